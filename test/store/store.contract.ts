import { describe, expect, it } from "vitest";
import type { StreamChange } from "../../src/store/change-feed.js";
import type { ListLeasesQuery } from "../../src/store/lease-store.js";
import type { HubStore, StoreClock } from "../../src/store/store.js";
import type { AgentRow, LeaseKey, LeaseRow, MessageRow } from "../../src/domain.js";
import { decideSend } from "../../src/peer/rules.js";

/** A clock the test moves: the time every decision of the store is made at. */
export class TestStoreClock implements StoreClock {
  constructor(public ms = 10_000) {}
  now(): number {
    return this.ms;
  }
}

/**
 * What every HubStore must do, whatever its database. Run by store.sqlite.test.ts and
 * store.postgres.test.ts; `open` gives the store the clock its decisions are made at.
 */
export function storeContract(name: string, open: (clock?: StoreClock) => Promise<HubStore>) {
  const agent = (id: string, project: string, name: string, online = true): AgentRow => ({
    id,
    project,
    name,
    purpose: "testing",
    keyHash: "00",
    connectedAtMs: 1_000,
    lastSeenAtMs: 1_000,
    online,
  });
  const x = { project: "p", name: "x" };
  const lease = (key: LeaseKey, token: number, holder: string | null = "agt_a"): LeaseRow => ({
    ...key,
    holderAgentId: holder,
    holderAgentName: holder && "alpha",
    fencingToken: token,
    acquiredAtMs: 1_000,
    expiresAtMs: 6_000,
  });

  describe(`store contract: ${name}`, () => {
    it("writes what a decision returns and answers its result", async () => {
      const store = await open();
      const r = await store.leases.decideLease(x, (cur) => ({ write: lease(x, (cur?.fencingToken ?? 0) + 1), result: "ok" }));
      expect(r).toBe("ok");
      expect(await store.leases.getLease(x)).toEqual(lease(x, 1));
      await store.close();
    });

    it("keeps the waiting call a lease was handed to with its row, and forgets it when a write names none (D64)", async () => {
      const store = await open();
      await store.leases.decideLease(x, () => ({ write: { ...lease(x, 1), handedTo: "wtr_1" }, result: undefined }));
      expect(await store.leases.getLease(x)).toEqual({ ...lease(x, 1), handedTo: "wtr_1" });
      // A decision is shown it, in a batch of several too.
      const seen = await Promise.all([1, 2].map(() => store.leases.decideLease(x, (cur) => ({ result: cur?.handedTo }))));
      expect(seen).toEqual(["wtr_1", "wtr_1"]);
      await store.leases.decideLease(x, () => ({ write: lease(x, 2), result: undefined }));
      expect(await store.leases.getLease(x)).toEqual(lease(x, 2));
      await store.close();
    });

    it("writes nothing when a decision throws", async () => {
      const store = await open();
      await store.leases.decideLease(x, () => ({ write: lease(x, 1), result: undefined }));
      await expect(
        store.leases.decideLease(x, () => {
          throw new Error("refused");
        }),
      ).rejects.toThrow("refused");
      expect((await store.leases.getLease(x))?.fencingToken).toBe(1);
      await store.close();
    });

    it("shows the next decision the stored row after one that wrote a lease and then failed, in the same batch or alone", async () => {
      const store = await open();
      await store.leases.decideLease(x, () => ({ write: lease(x, 1), result: undefined }));
      // It writes token 2 and a queued waiter, then fails (reading its result throws): rolled back.
      const failing = () =>
        store.leases.decideLease(x, () => ({
          write: lease(x, 2, "agt_b"),
          queue: { add: { id: "wtr_1", agentId: "agt_b", agentName: "beta", ttlMs: 1_000, deadlineMs: 60_000, sinceMs: 10_000 } },
          get result(): never {
            throw new Error("refused");
          },
        }));
      const seen = (cur: LeaseRow | undefined, waiters: { id: string }[]) => `${cur?.fencingToken} ${cur?.holderAgentId} [${waiters.map((w) => w.id)}]`;
      const together = await Promise.allSettled([failing(), store.leases.decideLease(x, (cur, _n, w) => ({ result: seen(cur, w) }))]);
      expect(together.map((o) => (o.status === "fulfilled" ? o.value : "rejected"))).toEqual(["rejected", "1 agt_a []"]);
      await expect(failing()).rejects.toThrow("refused");
      expect(await store.leases.decideLease(x, (cur, _n, w) => ({ result: seen(cur, w) }))).toBe("1 agt_a []");
      // An agent's decision that releases the lease it holds, then fails: rolled back too.
      await store.agents.decideAgentLeases({ project: "p", nameKey: "alpha" }, () => ({ write: agent("agt_a", "p", "alpha"), result: 0 }));
      const leaving = () =>
        store.agents.decideAgentLeases({ agentId: "agt_a" }, (_a, heldNow) => ({
          leases: heldNow.map((h) => ({ key: { project: h.lease.project, name: h.lease.name }, decision: { write: { ...h.lease, holderAgentId: null, holderAgentName: null }, result: undefined } })),
          get result(): never {
            throw new Error("refused");
          },
        }));
      const after = await Promise.allSettled([leaving(), store.leases.decideLease(x, (cur, _n, w) => ({ result: seen(cur, w) }))]);
      expect(after.map((o) => (o.status === "fulfilled" ? o.value : "rejected"))).toEqual(["rejected", "1 agt_a []"]);
      expect(await store.leases.getLease(x)).toEqual(lease(x, 1));
      await store.close();
    });

    it("never lowers a fencing token", async () => {
      const store = await open();
      await store.leases.decideLease(x, () => ({ write: lease(x, 5), result: undefined }));
      await expect(store.leases.decideLease(x, () => ({ write: lease(x, 4), result: undefined }))).rejects.toThrow();
      expect((await store.leases.getLease(x))?.fencingToken).toBe(5);
      await store.close();
    });

    it("keys leases by (project, name): project alpha/repo shares nothing with alpha's repo/main", async () => {
      const store = await open();
      const outer = { project: "alpha", name: "repo/main" };
      const inner = { project: "alpha/repo", name: "main" };
      await store.leases.decideLease(outer, () => ({ write: lease(outer, 5), result: 0 }));
      const seen = await store.leases.decideLease(inner, (cur) => ({ write: lease(inner, (cur?.fencingToken ?? 0) + 1, "agt_r"), result: cur }));
      expect(seen).toBeUndefined();
      expect(await store.leases.getLease(outer)).toEqual(lease(outer, 5));
      expect(await store.leases.getLease(inner)).toEqual(lease(inner, 1, "agt_r"));
      const list = (project: string) => store.leases.listLeases({ project, limit: 10, includeExpired: true, nowMs: 0 });
      expect((await list("alpha")).map((l) => [l.project, l.name])).toEqual([["alpha", "repo/main"]]);
      expect((await list("alpha/repo")).map((l) => [l.project, l.name])).toEqual([["alpha/repo", "main"]]);
      await store.close();
    });

    it("refuses a decision that writes a lease other than the one it was shown", async () => {
      const store = await open();
      const other = { project: "p", name: "y" };
      await expect(store.leases.decideLease(x, () => ({ write: lease(other, 1), result: 0 }))).rejects.toThrow();
      await expect(
        store.leases.decideLease(x, () => ({ write: lease({ project: "p/x", name: "" }, 1), result: 0 })),
      ).rejects.toThrow();
      expect(await store.leases.getLease(x)).toBeUndefined();
      expect(await store.leases.getLease(other)).toBeUndefined();
      await store.close();
    });

    it("serialises concurrent decisions on one resource", async () => {
      const store = await open();
      const results = await Promise.all(
        Array.from({ length: 20 }, () =>
          store.leases.decideLease(x, (cur) => {
            const next = (cur?.fencingToken ?? 0) + 1;
            return { write: lease(x, next), result: next };
          }),
        ),
      );
      expect([...results].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
      await store.close();
    });

    it("lists held leases by name, pages, and hides released floors and lapsed leases unless asked", async () => {
      const store = await open();
      for (const [project, name, holder, expires] of [
        ["p", "a", "agt_a", 9_000],
        ["p", "b", null, 9_000],
        ["p", "c", "agt_a", 2_000],
        ["p", "d", "agt_a", 9_000],
        ["q", "a", "agt_a", 9_000],
      ] as const) {
        const key = { project, name };
        await store.leases.decideLease(key, () => ({ write: { ...lease(key, 1, holder), expiresAtMs: expires }, result: 0 }));
      }
      const names = async (q: Partial<ListLeasesQuery>) =>
        (await store.leases.listLeases({ project: "p", limit: 10, includeExpired: false, nowMs: 5_000, ...q })).map((l) => l.name);
      expect(await names({})).toEqual(["a", "d"]);
      expect(await names({ includeExpired: true })).toEqual(["a", "c", "d"]);
      expect(await names({ includeExpired: true, afterName: "a", limit: 1 })).toEqual(["c"]);
      await store.close();
    });

    it("purges lapsed holders and keeps their rows as token floors", async () => {
      const store = await open(new TestStoreClock(10_000)); // the lease lapsed at 6,000
      await store.leases.decideLease(x, () => ({ write: lease(x, 3), result: 0 }));
      expect(await store.leases.purgeLapsedLeases(4_001)).toEqual([]);
      expect((await store.leases.purgeLapsedLeases(4_000)).map((l) => l.fencingToken)).toEqual([3]);
      expect(await store.leases.getLease(x)).toMatchObject({ holderAgentId: null, fencingToken: 3 });
      await store.close();
    });

    it("keeps agent names unique per project, case-folded, and lists in registration order", async () => {
      const store = await open();
      await store.agents.decideAgentLeases({ project: "p", nameKey: "beta" }, () => ({ write: agent("agt_2", "p", "Beta"), result: 0 }));
      await store.agents.decideAgentLeases({ project: "p", nameKey: "alpha" }, () => ({ write: agent("agt_1", "p", "alpha"), result: 0 }));
      await store.agents.decideAgentLeases({ project: "q", nameKey: "beta" }, () => ({ write: agent("agt_3", "q", "beta"), result: 0 }));
      const seen = await store.agents.decideAgentLeases({ project: "p", nameKey: "beta" }, (existing) => ({ result: existing?.id }));
      expect(seen).toBe("agt_2");
      expect((await store.agents.listAgents("p")).map((a) => a.id)).toEqual(["agt_2", "agt_1"]);
      await expect(
        store.agents.decideAgentLeases({ project: "p", nameKey: "alpha" }, () => ({ write: agent("agt_9", "p", "ALPHA"), result: 0 })),
      ).rejects.toThrow();
      await store.close();
    });

    it("sweeps only online agents last seen more than stale-after before the store's time, recording each", async () => {
      const clock = new TestStoreClock(1_000);
      const store = await open(clock);
      await store.agents.decideAgent("agt_1", () => ({ write: { ...agent("agt_1", "p", "a"), lastSeenAtMs: 100 }, result: 0 }));
      await store.agents.decideAgent("agt_2", () => ({ write: { ...agent("agt_2", "p", "b"), lastSeenAtMs: 200 }, result: 0 }));
      const seen: StreamChange[] = [];
      const stop = store.changes.tailChanges((c) => seen.push(c));
      clock.ms = 1_000;
      const swept = await store.agents.sweepStaleAgents(800, (a, nowMs) => ({ stream: "presence", body: { id: a.id, nowMs } }));
      expect(swept.map((a) => [a.id, a.online])).toEqual([["agt_1", false]]);
      expect(seen).toEqual([{ project: "p", stream: "presence", seq: 1, atMs: 1_000, body: { id: "agt_1", nowMs: 1_000 } }]);
      expect(await store.agents.countOnlineAgents()).toBe(1);
      await store.agents.markAllAgentsOffline((a) => ({ stream: "presence", body: { id: a.id } }));
      expect(await store.agents.countOnlineAgents()).toBe(0);
      expect(seen.map((c) => [c.seq, c.body])).toEqual([[1, { id: "agt_1", nowMs: 1_000 }], [2, { id: "agt_2" }]]);
      stop();
      await store.close();
    });

    it("decideAgent told the agent's project decides as without it; told another, it throws and writes nothing", async () => {
      const store = await open(new TestStoreClock(1_000));
      await store.agents.decideAgent("agt_1", () => ({ write: agent("agt_1", "p", "a"), result: 0 }));
      const seen: StreamChange[] = [];
      const stop = store.changes.tailChanges((c) => seen.push(c));
      const off = (cur: AgentRow | undefined) => ({ write: { ...cur!, online: false }, change: { stream: "presence" as const, body: { off: cur!.id } }, result: cur!.id });
      await expect(store.agents.decideAgent("agt_1", off, "q")).rejects.toThrow(/not of project "q"/);
      expect((await store.agents.getAgent("agt_1"))?.online).toBe(true);
      expect(await store.agents.decideAgent("agt_1", off, "p")).toBe("agt_1");
      expect((await store.agents.getAgent("agt_1"))?.online).toBe(false);
      expect(seen.map((c) => [c.project, c.body])).toEqual([["p", { off: "agt_1" }]]);
      // An unknown agent, told a project: decided on nothing, as without one.
      expect(await store.agents.decideAgent("agt_none", (cur) => ({ result: cur === undefined }), "p")).toBe(true);
      stop();
      await store.close();
    });

    it("decideAgentAsRead writes only on the row as read, and leaves a decision that records a change to decideAgent", async () => {
      const store = await open(new TestStoreClock(5_000));
      // A model and no host: one nullable column with a value, one without.
      await store.agents.decideAgent("agt_1", () => ({ write: { ...agent("agt_1", "p", "a"), model: "m" }, result: 0 }));
      // As a call's authentication reads it.
      const read = (await store.agents.peekCaller("agt_1"))!.agent;
      const seen: StreamChange[] = [];
      const stop = store.changes.tailChanges((c) => seen.push(c));
      const at = (cur: AgentRow, nowMs: number) => ({ write: { ...cur, lastSeenAtMs: nowMs }, result: nowMs });
      // On the row as read: written, on the store's time.
      expect(await store.agents.decideAgentAsRead(read, at)).toEqual({ result: 5_000 });
      const moved = { ...read, lastSeenAtMs: 5_000 };
      expect(await store.agents.getAgent("agt_1")).toEqual(moved);
      // On a row that moved on since (any column): nothing written.
      expect(await store.agents.decideAgentAsRead(read, (cur) => ({ write: { ...cur, purpose: "stale" }, result: 1 }))).toBeUndefined();
      expect(await store.agents.decideAgentAsRead({ ...moved, keyHash: "11" }, (cur) => ({ write: { ...cur, purpose: "stale" }, result: 1 }))).toBeUndefined();
      expect(await store.agents.getAgent("agt_1")).toEqual(moved);
      // A decision that records a change: nothing written, nothing recorded.
      const off = (cur: AgentRow) => ({ write: { ...cur, online: false }, change: { stream: "presence" as const, body: { off: cur.id } }, result: 2 });
      expect(await store.agents.decideAgentAsRead(moved, off)).toBeUndefined();
      expect(await store.agents.getAgent("agt_1")).toEqual(moved);
      // One that writes nothing answers without a write.
      expect(await store.agents.decideAgentAsRead(moved, () => ({ result: 3 }))).toEqual({ result: 3 });
      expect(await store.agents.peekCaller("agt_1")).toMatchObject({ agent: moved });
      expect(seen).toEqual([]);
      stop();
      await store.close();
    });

    it("peekCaller shows each agent as last committed, after every kind of write to it", async () => {
      const clock = new TestStoreClock(1_000);
      const store = await open(clock);
      const a = agent("agt_1", "p", "a");
      await store.agents.decideAgent("agt_1", () => ({ write: a, result: 0 }));
      await store.agents.decideAgent("agt_2", () => ({ write: agent("agt_2", "p", "b"), result: 0 }));
      expect((await store.agents.peekCaller("agt_1"))?.agent).toEqual(a);
      // A decision that writes (a key rotated).
      await store.agents.decideAgent("agt_1", (cur) => ({ write: { ...cur!, keyHash: "11" }, result: 0 }));
      expect((await store.agents.peekCaller("agt_1"))?.agent?.keyHash).toBe("11");
      // A decision whose write is made and then undone: the store writes the row, then reading
      // the decision's change throws, so the decision is rolled back.
      await expect(
        store.agents.decideAgent("agt_1", (cur) => ({
          write: { ...cur!, keyHash: "22" },
          result: 0,
          get change(): never {
            throw new Error("refused");
          },
        })),
      ).rejects.toThrow("refused");
      expect((await store.agents.peekCaller("agt_1"))?.agent?.keyHash).toBe("11");
      expect((await store.agents.getAgent("agt_1"))?.keyHash).toBe("11");
      // The sweeps.
      expect((await store.agents.peekCaller("agt_2"))?.agent?.online).toBe(true);
      clock.ms = 10_000;
      await store.agents.sweepStaleAgents(1_000, (r) => ({ stream: "presence", body: { id: r.id } }));
      expect((await store.agents.peekCaller("agt_2"))?.agent?.online).toBe(false);
      await store.agents.decideAgent("agt_2", (cur) => ({ write: { ...cur!, online: true, lastSeenAtMs: 10_000 }, result: 0 }));
      expect((await store.agents.peekCaller("agt_2"))?.agent?.online).toBe(true);
      await store.agents.markAllAgentsOffline((r) => ({ stream: "presence", body: { id: r.id } }));
      expect((await store.agents.peekCaller("agt_2"))?.agent?.online).toBe(false);
      // Forgotten agents are gone.
      clock.ms = 1_000_000;
      await store.agents.forgetAgents(1_000, (r) => ({ stream: "presence", body: { forgotten: { id: r.id, name: r.name } } }));
      expect((await store.agents.peekCaller("agt_1"))?.agent).toBeUndefined();
      expect((await store.agents.peekCaller("agt_2"))?.agent).toBeUndefined();
      await store.close();
    });

    it("peekCaller says whether the agent's project has managed tokens, from the first one written on", async () => {
      const store = await open();
      await store.agents.decideAgent("agt_1", () => ({ write: agent("agt_1", "p", "a"), result: 0 }));
      await store.agents.decideAgent("agt_2", () => ({ write: agent("agt_2", "q", "b"), result: 0 }));
      expect((await store.agents.peekCaller("agt_1"))?.projectHasTokens).toBe(false);
      const token = { id: "pt_0000000000000001", project: "p", scope: "agent" as const, label: "", hash: "h", createdAtMs: 1, expiryNoted: false };
      await store.tokens.decideToken("p", token.id, () => ({ write: token, result: 0 }));
      expect(await store.agents.peekCaller("agt_1")).toEqual({ agent: agent("agt_1", "p", "a"), projectHasTokens: true });
      expect((await store.agents.peekCaller("agt_2"))?.projectHasTokens).toBe(false);
      expect(await store.agents.peekCaller("agt_3")).toBeUndefined();
      await store.close();
    });

    it("shows a lease decision and a send whether their project has managed tokens, as their transaction reads it (D86)", async () => {
      const store = await open();
      const seen = async (project: string) => ({
        lease: await store.leases.decideLease({ project, name: "x" }, (_cur, _now, _waiters, _holder, hasTokens) => ({ result: hasTokens() })),
        send: (await store.messages.decideSend({ senderId: "agt_1", project, target: "agt_2" }, (_ctx, nowMs, hasTokens) => ({ result: hasTokens(), atMs: nowMs }))).result,
      });
      expect(await seen("p")).toEqual({ lease: false, send: false });
      const token = { id: "pt_0000000000000001", project: "p", scope: "agent" as const, label: "", hash: "h", createdAtMs: 1, expiryNoted: false };
      await store.tokens.decideToken("p", token.id, () => ({ write: token, result: 0 }));
      expect(await seen("p")).toEqual({ lease: true, send: true });
      expect(await seen("q")).toEqual({ lease: false, send: false });
      await store.close();
    });

    it("records a runtime's lapse once, on the store's time, until it heartbeats again", async () => {
      const clock = new TestStoreClock(1_000);
      const store = await open(clock);
      const beat = (project: string, id: string) =>
        store.agents.decideRuntime(project, id, (cur, nowMs) => ({
          write: { project, runtimeId: id, registeredAtMs: cur?.registeredAtMs ?? nowMs, heartbeatAtMs: nowMs },
          result: 0,
        }));
      await beat("p", "rtm_one");
      clock.ms = 1_500;
      await beat("q", "rtm_two");
      const lapse = () => store.agents.sweepExpiredRuntimes(1_000, (r, nowMs) => ({ stream: "presence", body: { r: r.runtimeId, nowMs } }));
      clock.ms = 1_999;
      expect(await lapse()).toEqual([]);
      clock.ms = 2_000;
      expect((await lapse()).map((r) => r.runtimeId)).toEqual(["rtm_one"]);
      expect(await lapse()).toEqual([]);
      clock.ms = 3_000;
      expect((await lapse()).map((r) => r.runtimeId)).toEqual(["rtm_two"]);
      await beat("p", "rtm_one");
      clock.ms = 4_000;
      expect((await lapse()).map((r) => r.runtimeId)).toEqual(["rtm_one"]);
      const p = await store.changes.readChanges("p", "presence", 0, 10);
      expect(p).toEqual({
        head: 2,
        changes: [
          { project: "p", stream: "presence", seq: 1, atMs: 2_000, body: { r: "rtm_one", nowMs: 2_000 } },
          { project: "p", stream: "presence", seq: 2, atMs: 4_000, body: { r: "rtm_one", nowMs: 4_000 } },
        ],
      });
      await store.close();
    });

    it("numbers each project's lease and presence changes apart, without gaps, and hands them over once committed", async () => {
      const clock = new TestStoreClock(5_000);
      const store = await open(clock);
      const seen: StreamChange[] = [];
      const stop = store.changes.tailChanges((c) => seen.push(c));
      const grant = (key: LeaseKey, token: number) =>
        store.leases.decideLease(key, (_cur, nowMs) => ({ write: lease(key, token), change: { stream: "leases", body: { token, nowMs } }, result: token }));
      await grant(x, 1);
      await grant({ project: "q", name: "x" }, 1);
      await expect(
        store.leases.decideLease(x, () => {
          throw new Error("refused");
        }),
      ).rejects.toThrow("refused");
      await store.agents.decideAgentLeases({ project: "p", nameKey: "a" }, () => ({ write: agent("agt_1", "p", "a"), change: { stream: "presence", body: "hello" }, result: 0 }));
      await grant(x, 2);
      // A decision the store refuses after it was decided (a lower token) records nothing either.
      await expect(grant(x, 1)).rejects.toThrow();
      expect(seen.map((c) => [c.project, c.stream, c.seq, c.body])).toEqual([
        ["p", "leases", 1, { token: 1, nowMs: 5_000 }],
        ["q", "leases", 1, { token: 1, nowMs: 5_000 }],
        ["p", "presence", 1, "hello"],
        ["p", "leases", 2, { token: 2, nowMs: 5_000 }],
      ]);
      expect(await store.changes.readChanges("p", "leases", 0, 10)).toEqual({ head: 2, changes: seen.filter((c) => c.project === "p" && c.stream === "leases") });
      expect(await store.changes.readChanges("p", "leases", 1, 10)).toEqual({ head: 2, changes: [seen[3]] });
      expect(await store.changes.readChanges("p", "leases", 0, 1)).toEqual({ head: 2, changes: [seen[0]] });
      expect(await store.changes.readChanges("r", "leases", 0, 10)).toEqual({ head: 0, changes: [] });
      stop();
      await grant(x, 3);
      expect(seen).toHaveLength(4);
      await store.close();
    });

    it("numbers changes without a gap when a decision that recorded one is rolled back, in the same batch or alone", async () => {
      const store = await open();
      const seen: StreamChange[] = [];
      const stop = store.changes.tailChanges((c) => seen.push(c));
      // A decision that records its change, then fails (reading its result throws): rolled back.
      const decide = (id: string, body: string, fail = false) =>
        store.agents.decideAgent(id, (cur) => {
          const d = { write: cur ?? agent(id, "p", id), change: { stream: "presence" as const, body } };
          return fail
            ? {
                ...d,
                get result(): never {
                  throw new Error("refused");
                },
              }
            : { ...d, result: 0 };
        });
      // Submitted together: one batch on a store that batches.
      const outcomes = await Promise.allSettled([decide("agt_1", "a"), decide("agt_2", "b", true), decide("agt_3", "c"), decide("agt_4", "d", true)]);
      expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled", "rejected"]);
      await expect(decide("agt_5", "e", true)).rejects.toThrow("refused");
      await decide("agt_6", "f");
      // The two that committed together take 1 and 2, in either order on a store that runs them
      // side by side; the next one 3.
      const bySeq = [...seen].sort((a, b) => a.seq - b.seq);
      expect(bySeq.map((c) => c.seq)).toEqual([1, 2, 3]);
      expect(bySeq.slice(0, 2).map((c) => c.body).sort()).toEqual(["a", "c"]);
      expect(bySeq[2]!.body).toBe("f");
      expect(await store.changes.readChanges("p", "presence", 0, 10)).toEqual({ head: 3, changes: bySeq });
      expect(await store.agents.getAgent("agt_2")).toBeUndefined();
      stop();
      await store.close();
    });

    it("snapshots the live leases and the presence with the head of their changes", async () => {
      const clock = new TestStoreClock(5_000);
      const store = await open(clock);
      const recorded = { stream: "leases" as const, body: {} };
      await store.leases.decideLease(x, () => ({ write: lease(x, 1), change: recorded, result: 0 }));
      await store.leases.decideLease({ project: "p", name: "gone" }, () => ({ write: { ...lease({ project: "p", name: "gone" }, 1), expiresAtMs: 5_000 }, change: recorded, result: 0 }));
      await store.leases.decideLease({ project: "p", name: "free" }, () => ({ write: lease({ project: "p", name: "free" }, 4, null), change: recorded, result: 0 }));
      await store.leases.decideLease({ project: "q", name: "y" }, () => ({ write: lease({ project: "q", name: "y" }, 1), change: recorded, result: 0 }));
      const snap = await store.leases.leaseSnapshot("p", 5_000);
      expect(snap).toEqual({ head: 3, leases: [lease(x, 1)], waiters: [] });
      await store.agents.decideAgentLeases({ project: "p", nameKey: "a" }, () => ({ write: agent("agt_1", "p", "a"), change: { stream: "presence", body: 1 }, result: 0 }));
      await store.agents.decideRuntime("p", "rtm_one", () => ({ write: { project: "p", runtimeId: "rtm_one", registeredAtMs: 1, heartbeatAtMs: 2 }, result: 0 }));
      expect(await store.agents.presenceSnapshot("p")).toEqual({
        head: 1,
        agents: [agent("agt_1", "p", "a")],
        runtimes: [{ project: "p", runtimeId: "rtm_one", registeredAtMs: 1, heartbeatAtMs: 2 }],
      });
      expect(await store.agents.presenceSnapshot("q")).toEqual({ head: 0, agents: [], runtimes: [] });
      await store.close();
    });

    it("purges changes past their retention on the store's time, or past the last `keep`, and keeps the head", async () => {
      const clock = new TestStoreClock(1_000);
      const store = await open(clock);
      for (const at of [1_000, 2_000, 3_000]) {
        clock.ms = at;
        await store.leases.decideLease(x, (cur) => ({ write: lease(x, (cur?.fencingToken ?? 0) + 1), change: { stream: "leases", body: at }, result: 0 }));
      }
      await store.leases.decideLease({ project: "q", name: "y" }, () => ({ write: lease({ project: "q", name: "y" }, 1), change: { stream: "leases", body: 0 }, result: 0 }));
      clock.ms = 4_000;
      expect(await store.changes.purgeChanges(2_000, 10, 100)).toBe(1);
      expect(await store.changes.readChanges("p", "leases", 0, 10)).toMatchObject({ head: 3, changes: [{ seq: 2 }, { seq: 3 }] });
      expect(await store.changes.purgeChanges(2_000, 1, 100)).toBe(1); // p keeps its newest; q's one change is its newest
      expect(await store.changes.readChanges("p", "leases", 0, 10)).toMatchObject({ head: 3, changes: [{ seq: 3 }] });
      expect(await store.changes.readChanges("q", "leases", 0, 10)).toMatchObject({ head: 1, changes: [{ seq: 1 }] });
      clock.ms = 10_000;
      expect(await store.changes.purgeChanges(2_000, 10, 100)).toBe(2);
      expect(await store.changes.readChanges("p", "leases", 0, 10)).toEqual({ head: 3, changes: [] });
      await store.leases.decideLease(x, (cur) => ({ write: lease(x, (cur?.fencingToken ?? 0) + 1), change: { stream: "leases", body: 4 }, result: 0 }));
      expect(await store.changes.readChanges("p", "leases", 3, 10)).toMatchObject({ head: 4, changes: [{ seq: 4, body: 4 }] });
      await store.close();
    });

    it("purges at most `limit` changes a call, each stream's oldest first, and keeps what stays a suffix", async () => {
      const clock = new TestStoreClock(1_000);
      const store = await open(clock);
      const y = { project: "q", name: "y" };
      for (let i = 1; i <= 5; i++) await store.leases.decideLease(x, () => ({ write: lease(x, i), change: { stream: "leases", body: i }, result: 0 }));
      for (let i = 1; i <= 3; i++) await store.leases.decideLease(y, () => ({ write: lease(y, i), change: { stream: "leases", body: i }, result: 0 }));
      clock.ms = 100_000;
      const seqs = async (project: string) => (await store.changes.readChanges(project, "leases", 0, 10)).changes.map((c) => c.seq);
      const left = async () => [...(await seqs("p")), ...(await seqs("q"))].length;
      const calls: number[] = [];
      for (let n = -1; n !== 0; ) {
        n = await store.changes.purgeChanges(1_000, 1, 3);
        calls.push(n);
        expect(n).toBeLessThanOrEqual(3);
        // Whatever a call took, what stays of each stream is its newest changes, up to its head.
        for (const [project, head] of [["p", 5], ["q", 3]] as const) {
          const s = await seqs(project);
          expect(s).toEqual(Array.from({ length: s.length }, (_, i) => head - s.length + 1 + i));
        }
      }
      expect(calls).toEqual([3, 3, 2, 0]);
      expect(await left()).toBe(0);
      expect((await store.changes.readChanges("p", "leases", 0, 10)).head).toBe(5);
      await store.close();
    });

    it("expires and purges at most `limit` messages a call, the earliest due first", async () => {
      const clock = new TestStoreClock(1_000);
      const store = await open(clock);
      await store.agents.decideAgentLeases({ project: "p", nameKey: "a" }, () => ({ write: agent("agt_a", "p", "a"), result: 0 }));
      await store.agents.decideAgentLeases({ project: "p", nameKey: "b" }, () => ({ write: agent("agt_b", "p", "b"), result: 0 }));
      const sender = { agentId: "agt_a", agentName: "a", project: "p" };
      // Five messages to b, the later sent expiring first.
      for (let i = 0; i < 5; i++) {
        const input = { target: "agt_b", content: `m${i}`, delivery: "followUp" as const, hops: 0, maxHops: 3, ttlMs: 10_000 - i * 1_000, allowOffline: false };
        await store.messages.decideSend({ senderId: "agt_a", project: "p", target: "agt_b" }, (ctx, nowMs) => decideSend(ctx, { sender, input, id: `msg_${i}`, nowMs }));
      }
      clock.ms = 20_000;
      const change = (m: MessageRow) => ({ stream: "messages" as const, body: m.id });
      const expiredIds = async (limit: number) => [...new Set((await store.messages.expireMessages("gone", change, limit)).map((e) => e.message.id))];
      expect(await expiredIds(2)).toEqual(["msg_4", "msg_3"]);
      expect(await expiredIds(2)).toEqual(["msg_2", "msg_1"]);
      expect(await expiredIds(2)).toEqual(["msg_0"]);
      expect(await expiredIds(2)).toEqual([]);
      expect((await store.messages.getMessage("msg_0"))?.status).toBe("expired");
      clock.ms = 1_000_000;
      const purged: string[] = [];
      for (let batch = await store.messages.purgeMessages(1_000, 2); ; batch = await store.messages.purgeMessages(1_000, 2)) {
        expect(batch.length).toBeLessThanOrEqual(2);
        purged.push(...batch.map((m) => m.id));
        if (batch.length < 2) break;
      }
      expect(purged.sort()).toEqual(["msg_0", "msg_1", "msg_2", "msg_3", "msg_4"]);
      expect(await store.messages.getMessage("msg_0")).toBeUndefined();
      await store.close();
    });

    it("keeps a runtime's rows per project", async () => {
      const store = await open();
      const row = { project: "p", runtimeId: "rtm_abcdef", registeredAtMs: 1, heartbeatAtMs: 2 };
      await store.agents.decideRuntime("p", "rtm_abcdef", () => ({ write: row, result: 0 }));
      await store.agents.decideRuntime("q", "rtm_abcdef", () => ({ write: { ...row, project: "q", host: "h" }, result: 0 }));
      expect(await store.agents.listRuntimes("p")).toEqual([row]);
      expect(await store.agents.listRuntimes("q")).toEqual([{ ...row, project: "q", host: "h" }]);
      await store.close();
    });
  });
}
