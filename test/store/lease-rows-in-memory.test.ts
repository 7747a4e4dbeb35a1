import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { decideAcquire, decideInstanceEnds, decideLeaving, decideRelease, decideWaiting } from "../../src/lease/rules.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { agentFromDb, leaseFromDb, type AgentDb, type LeaseDb } from "../../src/store/rows.js";
import type { AgentRow, LeaseKey, LeaseRow } from "../../src/domain.js";
import type { LeaseWaiter } from "../../src/store/lease-store.js";

/**
 * The SQLite store keeps lease rows, which queues may hold waiters and the agents it peeked in
 * memory (sqlite/leases.ts, agents.ts `current`). Inside every lease decision, what it hands
 * `decide` (row, queue, would-be holder) must be what the file holds at that point of the
 * transaction: checked over random sequences of lease decisions, agent decisions (takeovers,
 * evictions, one that writes and then fails), sweeps, purges, refusals and plain decisions that
 * fail after they wrote, in batches.
 */

const dirs: string[] = [];
const stores: SqliteStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close().catch(() => {});
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

type Db = { prepare(q: string): { get(...a: unknown[]): unknown; all(...a: unknown[]): unknown[] } };

describe("lease decisions see what the file holds, whatever the store keeps in memory", () => {
  for (const seed of Array.from({ length: 24 }, (_, i) => i + 1)) {
    it(`random sequence ${seed}`, async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-rows-"));
      dirs.push(dir);
      let now = 1_000_000;
      const store = new SqliteStore({ path: path.join(dir, "kxm.db"), synchronous: "normal", clock: { now: () => now } });
      stores.push(store);
      const db = (store as unknown as { db: Db }).db;
      const fileLease = (k: LeaseKey) => db.prepare("SELECT * FROM leases WHERE project = ? AND name = ?").get(k.project, k.name) as LeaseDb | undefined;
      const fileWaiters = (k: LeaseKey) =>
        (db.prepare("SELECT * FROM lease_waiters WHERE project = ? AND name = ? ORDER BY seq").all(k.project, k.name) as { id: string }[]).map((w) => w.id);
      const fileAgent = (id: string) => {
        const r = db.prepare("SELECT * FROM agents WHERE id = ?").get(id) as AgentDb | undefined;
        return r && agentFromDb(r);
      };
      const mismatches: string[] = [];
      let checks = 0;
      const check = (what: string, k: LeaseKey, cur: LeaseRow | undefined, waiters: LeaseWaiter[], holder: AgentRow | undefined, holderId?: string) => {
        checks++;
        const f = fileLease(k);
        const want = f && leaseFromDb(f);
        if (JSON.stringify(want ?? null) !== JSON.stringify(cur ?? null)) mismatches.push(`${what} ${k.name} row: file ${JSON.stringify(want)} vs ${JSON.stringify(cur)}`);
        const fw = fileWaiters(k);
        if (JSON.stringify(fw) !== JSON.stringify(waiters.map((w) => w.id))) mismatches.push(`${what} ${k.name} queue: file ${fw} vs ${waiters.map((w) => w.id)}`);
        if (holderId !== undefined) {
          const fa = fileAgent(holderId);
          if (JSON.stringify(fa ?? null) !== JSON.stringify(holder ?? null)) mismatches.push(`${what} holder ${holderId}: file ${JSON.stringify(fa)} vs ${JSON.stringify(holder)}`);
        }
      };
      const r = rng(seed);
      const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
      const agents = ["a1", "a2", "a3"];
      const names = ["x", "y"];
      let keyN = 0;
      const keys = new Map<string, string>();
      const agentRow = (id: string, online = true): AgentRow => ({
        id,
        project: "p",
        name: `n-${id}`,
        purpose: "t",
        keyHash: keys.get(id)!,
        connectedAtMs: now,
        lastSeenAtMs: now,
        online,
      });
      for (const id of agents) {
        keys.set(id, `k${keyN++}`);
        await store.agents.decideAgent(id, () => ({ write: agentRow(id), result: undefined }));
      }
      let wid = 0;
      const waitIds: { id: string; agent: string; name: string }[] = [];
      const lease = <T>(what: string, name: string, holderId: string | undefined, decide: (cur: LeaseRow | undefined, w: LeaseWaiter[], h: AgentRow | undefined) => T) => {
        const k = { project: "p", name };
        return store.leases.decideLease(
          k,
          (cur, _n, w, h) => {
            check(what, k, cur, w, h, holderId);
            return decide(cur, w, h) as never;
          },
          holderId,
        );
      };
      for (let round = 0; round < 150; round++) {
        const batch: Promise<unknown>[] = [];
        const n = 1 + Math.floor(r() * 6);
        for (let i = 0; i < n; i++) {
          const op = Math.floor(r() * 14);
          const a = pick(agents);
          const name = pick(names);
          const holder = { agentId: a, agentName: `n-${a}`, project: "p" };
          if (op <= 2) {
            const wait = r() < 0.5 ? { id: `w${wid++}`, deadlineMs: now + 20_000 } : undefined;
            if (wait) waitIds.push({ id: wait.id, agent: a, name });
            batch.push(lease("acquire", name, a, (cur, w) => decideAcquire(cur, { name, holder, ttlMs: 10_000, nowMs: now, wait }, w)));
          } else if (op === 3 && waitIds.length > 0) {
            const wt = pick(waitIds);
            batch.push(lease("waiting", wt.name, wt.agent, (cur, w) => decideWaiting(cur, { id: wt.id, holder: { agentId: wt.agent, agentName: `n-${wt.agent}`, project: "p" }, name: wt.name, nowMs: now }, w)));
          } else if (op === 4 && waitIds.length > 0) {
            const wt = pick(waitIds);
            batch.push(lease("leaving", wt.name, wt.agent, (cur, w) => decideLeaving(cur, { id: wt.id, holder: { agentId: wt.agent, agentName: `n-${wt.agent}`, project: "p" }, name: wt.name, nowMs: now, clientGone: r() < 0.5 }, w)));
          } else if (op === 5) {
            batch.push(lease("release", name, undefined, (cur, w) => decideRelease(cur, { name, holder, fencingToken: cur?.fencingToken ?? 1 }, w, now)));
          } else if (op === 6) {
            // takeover / eviction: new key, leases end
            const newKey = `k${keyN++}`;
            batch.push(
              store.agents.decideAgentLeases({ agentId: a }, (cur, held, nowMs) => {
                keys.set(a, newKey);
                return {
                  write: cur && { ...cur, keyHash: newKey },
                  leases: held.map((h) => ({ key: { project: h.lease.project, name: h.lease.name }, decision: decideInstanceEnds(h.lease, { agentId: a, nowMs }, h.waiters) })),
                  result: undefined,
                };
              }),
            );
          } else if (op === 7) {
            // agent decision that writes leases and the agent, then fails: rolled back (savepoint)
            batch.push(
              store.agents.decideAgentLeases({ agentId: a }, (cur, held, nowMs) => ({
                write: cur && { ...cur, keyHash: "bogus" },
                leases: held.map((h) => ({ key: { project: h.lease.project, name: h.lease.name }, decision: decideInstanceEnds(h.lease, { agentId: a, nowMs }, h.waiters) })),
                get result(): never {
                  throw new Error("refused after write");
                },
              })),
            );
          } else if (op === 8) {
            batch.push(store.agents.sweepStaleAgents(5_000, (row) => ({ stream: "presence", body: { id: row.id } })));
          } else if (op === 9) {
            batch.push(store.leases.purgeLapsedLeases(1_000));
          } else if (op === 10) {
            // a broken plain decision: writes a waiter, then its row breaks the CHECK: whole batch back
            if (r() < 0.5)
              batch.push(
                lease("broken", `b${wid}`, undefined, () => ({
                  queue: { add: { id: `w${wid++}`, agentId: a, agentName: `n-${a}`, ttlMs: 1_000, deadlineMs: now + 60_000, sinceMs: now } },
                  write: { project: "p", name: `b${wid - 1}`, holderAgentId: a, holderAgentName: "x", fencingToken: 0, acquiredAtMs: now, expiresAtMs: now + 1 },
                  result: undefined,
                })),
              );
          } else if (op === 11) {
            // heartbeat / re-register with a new key (resume)
            const newKey = r() < 0.5 ? `k${keyN++}` : keys.get(a)!;
            batch.push(
              store.agents.decideAgent(a, (cur) => {
                keys.set(a, newKey);
                return { write: cur ? { ...cur, keyHash: newKey, lastSeenAtMs: now, online: true } : agentRow(a), result: undefined };
              }),
            );
          } else if (op === 12) {
            batch.push(store.agents.peekCaller(a));
          } else {
            now += Math.floor(r() * 8_000);
          }
        }
        await Promise.allSettled(batch);
        // peeks between batches
        for (const a of agents) if (r() < 0.5) await store.agents.peekCaller(a);
        if (r() < 0.05) await store.agents.markAllAgentsOffline((row) => ({ stream: "presence", body: { id: row.id } }));
        if (r() < 0.03) await store.leases.clearLeaseWaiters();
        if (r() < 0.03) await store.agents.forgetAgents(0, (row) => ({ stream: "presence", body: { id: row.id } }));
      }
      expect(checks).toBeGreaterThan(100);
      expect(mismatches.slice(0, 10)).toEqual([]);
    });
  }
});

describe("what the store keeps of the queues", () => {
  it("forgets a resource whose queue a decision emptied: nothing is kept for queues nobody waits in", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-rows-"));
    dirs.push(dir);
    const store = new SqliteStore({ path: path.join(dir, "kxm.db"), synchronous: "normal", clock: { now: () => 1_000_000 } });
    stores.push(store);
    const a = { agentId: "a", agentName: "alpha", project: "p" };
    const b = { agentId: "b", agentName: "beta", project: "p" };
    const cycle = async (j: number) => {
      const name = `job-${j}`;
      const k = { project: "p", name };
      // a holds it; b waits behind it, then leaves the queue
      await store.leases.decideLease(k, (cur, nowMs, w) => decideAcquire(cur, { name, holder: a, ttlMs: 10_000, nowMs }, w));
      await store.leases.decideLease(k, (cur, nowMs, w) => decideAcquire(cur, { name, holder: b, ttlMs: 10_000, nowMs, wait: { id: `w-${j}`, deadlineMs: nowMs + 5_000 } }, w));
      expect(store.keptLeaseRows().queues).toBeGreaterThan(0);
      await store.leases.decideLease(k, (cur, nowMs, w) => decideLeaving(cur, { id: `w-${j}`, holder: b, name, nowMs, clientGone: false }, w));
    };
    await Promise.all(Array.from({ length: 200 }, (_, j) => cycle(j)));
    expect(await store.leases.leaseWaiters("p")).toEqual([]);
    expect(store.keptLeaseRows()).toEqual({ rows: 200, queues: 0 });
  });
});
