import { describe, expect, it } from "vitest";
import type { AgentRow, HubStore, LeaseKey, LeaseRow } from "../../src/store/store.js";

/**
 * What every HubStore must do, whatever its database. Run by store.sqlite.test.ts; a PostgreSQL
 * store runs the same suite.
 */
export function storeContract(name: string, open: () => Promise<HubStore>) {
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
      const r = await store.decideLease(x, (cur) => ({ write: lease(x, (cur?.fencingToken ?? 0) + 1), result: "ok" }));
      expect(r).toBe("ok");
      expect(await store.getLease(x)).toEqual(lease(x, 1));
      await store.close();
    });

    it("writes nothing when a decision throws", async () => {
      const store = await open();
      await store.decideLease(x, () => ({ write: lease(x, 1), result: undefined }));
      await expect(
        store.decideLease(x, () => {
          throw new Error("refused");
        }),
      ).rejects.toThrow("refused");
      expect((await store.getLease(x))?.fencingToken).toBe(1);
      await store.close();
    });

    it("never lowers a fencing token", async () => {
      const store = await open();
      await store.decideLease(x, () => ({ write: lease(x, 5), result: undefined }));
      await expect(store.decideLease(x, () => ({ write: lease(x, 4), result: undefined }))).rejects.toThrow();
      expect((await store.getLease(x))?.fencingToken).toBe(5);
      await store.close();
    });

    it("keys leases by (project, name): project alpha/repo shares nothing with alpha's repo/main", async () => {
      const store = await open();
      const outer = { project: "alpha", name: "repo/main" };
      const inner = { project: "alpha/repo", name: "main" };
      await store.decideLease(outer, () => ({ write: lease(outer, 5), result: 0 }));
      const seen = await store.decideLease(inner, (cur) => ({ write: lease(inner, (cur?.fencingToken ?? 0) + 1, "agt_r"), result: cur }));
      expect(seen).toBeUndefined();
      expect(await store.getLease(outer)).toEqual(lease(outer, 5));
      expect(await store.getLease(inner)).toEqual(lease(inner, 1, "agt_r"));
      const list = (project: string) => store.listLeases({ project, limit: 10, includeExpired: true, nowMs: 0 });
      expect((await list("alpha")).map((l) => [l.project, l.name])).toEqual([["alpha", "repo/main"]]);
      expect((await list("alpha/repo")).map((l) => [l.project, l.name])).toEqual([["alpha/repo", "main"]]);
      await store.close();
    });

    it("refuses a decision that writes a lease other than the one it was shown", async () => {
      const store = await open();
      const other = { project: "p", name: "y" };
      await expect(store.decideLease(x, () => ({ write: lease(other, 1), result: 0 }))).rejects.toThrow();
      await expect(
        store.decideLease(x, () => ({ write: lease({ project: "p/x", name: "" }, 1), result: 0 })),
      ).rejects.toThrow();
      expect(await store.getLease(x)).toBeUndefined();
      expect(await store.getLease(other)).toBeUndefined();
      await store.close();
    });

    it("serialises concurrent decisions on one resource", async () => {
      const store = await open();
      const results = await Promise.all(
        Array.from({ length: 20 }, () =>
          store.decideLease(x, (cur) => {
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
        await store.decideLease(key, () => ({ write: { ...lease(key, 1, holder), expiresAtMs: expires }, result: 0 }));
      }
      const names = async (q: Partial<Parameters<HubStore["listLeases"]>[0]>) =>
        (await store.listLeases({ project: "p", limit: 10, includeExpired: false, nowMs: 5_000, ...q })).map((l) => l.name);
      expect(await names({})).toEqual(["a", "d"]);
      expect(await names({ includeExpired: true })).toEqual(["a", "c", "d"]);
      expect(await names({ includeExpired: true, afterName: "a", limit: 1 })).toEqual(["c"]);
      await store.close();
    });

    it("purges lapsed holders and keeps their rows as token floors", async () => {
      const store = await open();
      await store.decideLease(x, () => ({ write: lease(x, 3), result: 0 }));
      expect(await store.purgeLapsedLeases(5_999)).toEqual([]);
      expect((await store.purgeLapsedLeases(6_000)).map((l) => l.fencingToken)).toEqual([3]);
      expect(await store.getLease(x)).toMatchObject({ holderAgentId: null, fencingToken: 3 });
      await store.close();
    });

    it("keeps agent names unique per project, case-folded, and lists in registration order", async () => {
      const store = await open();
      await store.decideRegistration("p", "beta", () => ({ write: agent("agt_2", "p", "Beta"), result: 0 }));
      await store.decideRegistration("p", "alpha", () => ({ write: agent("agt_1", "p", "alpha"), result: 0 }));
      await store.decideRegistration("q", "beta", () => ({ write: agent("agt_3", "q", "beta"), result: 0 }));
      const seen = await store.decideRegistration("p", "beta", (existing) => ({ result: existing?.id }));
      expect(seen).toBe("agt_2");
      expect((await store.listAgents("p")).map((a) => a.id)).toEqual(["agt_2", "agt_1"]);
      await expect(
        store.decideRegistration("p", "alpha", () => ({ write: agent("agt_9", "p", "ALPHA"), result: 0 })),
      ).rejects.toThrow();
      await store.close();
    });

    it("sweeps only online agents last seen before the cutoff", async () => {
      const store = await open();
      await store.decideAgent("agt_1", () => ({ write: { ...agent("agt_1", "p", "a"), lastSeenAtMs: 100 }, result: 0 }));
      await store.decideAgent("agt_2", () => ({ write: { ...agent("agt_2", "p", "b"), lastSeenAtMs: 200 }, result: 0 }));
      const swept = await store.sweepStaleAgents(200);
      expect(swept.map((a) => [a.id, a.online])).toEqual([["agt_1", false]]);
      expect(await store.countOnlineAgents()).toBe(1);
      await store.markAllAgentsOffline();
      expect(await store.countOnlineAgents()).toBe(0);
      await store.close();
    });

    it("keeps a runtime's rows per project", async () => {
      const store = await open();
      const row = { project: "p", runtimeId: "rtm_abcdef", registeredAtMs: 1, heartbeatAtMs: 2 };
      await store.decideRuntime("p", "rtm_abcdef", () => ({ write: row, result: 0 }));
      await store.decideRuntime("q", "rtm_abcdef", () => ({ write: { ...row, project: "q", host: "h" }, result: 0 }));
      expect(await store.listRuntimes("p")).toEqual([row]);
      expect(await store.listRuntimes("q")).toEqual([{ ...row, project: "q", host: "h" }]);
      await store.close();
    });
  });
}
