import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { keyLists } from "../../src/store/postgres/key-list.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import type { SyncEventRow } from "../../src/store/sync-store.js";
import type { AgentRow, LeaseRow } from "../../src/domain.js";

/**
 * The statements every call and every batch runs are planned once per connection, not at every
 * run: PostgreSQL keeps a named statement's generic plan only while it looks no dearer than one
 * made for the values at hand, and the authentication read, the head lock and a push's read of
 * its projects' owners, written with `= ANY($1)`, were planned again each time
 * (store/postgres/key-list.ts). Counted by PostgreSQL
 * itself (pg_stat_statements), on a new database, as a hub starts on one.
 */

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres({ statements: true });
});
afterAll(() => server?.stop());

const agent = (i: number): AgentRow => ({
  id: `agt_${i}`,
  project: "p",
  name: `a${i}`,
  purpose: "testing",
  keyHash: "00",
  connectedAtMs: 1_000,
  lastSeenAtMs: 1_000,
  online: true,
});

/** How often the database ran and planned the statements whose text holds `marker`, since `reset`. */
async function counted(c: pg.Client, marker: string): Promise<{ calls: number; plans: number }> {
  const r = await c.query<{ calls: string | null; plans: string | null }>(
    "SELECT sum(calls) AS calls, sum(plans) AS plans FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE $1",
    [`%${marker}%`],
  );
  return { calls: Number(r.rows[0]!.calls ?? 0), plans: Number(r.rows[0]!.plans ?? 0) };
}

describe("PostgreSQL store: statements planned once per connection", () => {
  it("plans the authentication read, the head lock and a push's owners read a few times, however often they run", async () => {
    const url = await server.createDatabase();
    const store = await PostgresStore.open({ url, poolSize: 2 });
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
      for (let i = 0; i < 12; i++) await store.agents.decideAgentLeases({ project: "p", nameKey: `a${i}` }, () => ({ write: agent(i), result: 0 }));
      await c.query("SELECT pg_stat_statements_reset()");

      // Reads that arrive together go as one statement: of 1, 3 and 7 keys, 40 times each.
      for (let round = 0; round < 40; round++) {
        for (const n of [1, 3, 7]) {
          const read = await Promise.all(Array.from({ length: n }, (_, i) => store.agents.peekCaller(`agt_${(round + i) % 12}`)));
          expect(read.map((r) => r?.agent.id)).toEqual(Array.from({ length: n }, (_, i) => `agt_${(round + i) % 12}`));
        }
      }
      // One decision at a time: each is a batch of its own, which locks the project's heads first.
      for (let token = 1; token <= 100; token++) {
        const lease: LeaseRow = { project: "p", name: "x", holderAgentId: "agt_0", holderAgentName: "a0", fencingToken: token, acquiredAtMs: 1_000, expiresAtMs: 6_000 };
        await store.leases.decideLease({ project: "p", name: "x" }, () => ({ write: lease, result: undefined }));
      }

      // Run facts, one push at a time: each reads who owns its projects.
      for (let sequence = 1; sequence <= 40; sequence++) {
        const event: SyncEventRow = {
          projectId: "wf",
          runId: "run-1",
          sequence,
          hubProject: "p",
          homeRuntimeId: "rt-1",
          eventType: "step.completed",
          contentHash: `h${sequence}`,
          receivedAtMs: 1_000,
          occurredAt: "2026-01-01T00:00:00Z",
          record: "{}",
        };
        const pushed = await store.sync.pushSyncEvents([event], () => ({ outcome: "accepted" }), {
          run: () => ({ stream: "runs", body: {} }),
          conflict: () => ({ stream: "runs", body: {} }),
        });
        expect(pushed.outcomes).toEqual([{ outcome: "accepted" }]);
      }

      const reads = await counted(c, "has_tokens");
      const heads = await counted(c, "pg_current_xact_id");
      const owners = await counted(c, "hub_project FROM sync_projects");
      expect(reads.calls).toBeGreaterThanOrEqual(120);
      expect(heads.calls).toBeGreaterThanOrEqual(140);
      expect(owners.calls).toBeGreaterThanOrEqual(40);
      // Five custom plans and the generic one per statement text and connection at most; planned
      // at every run, these were 120, 140 and 40.
      expect(reads.plans).toBeLessThanOrEqual(3 * 2 * 6);
      expect(heads.plans).toBeLessThanOrEqual(2 * 6);
      expect(owners.plans).toBeLessThanOrEqual(2 * 6);
    } finally {
      await c.end();
      await store.close();
    }
  });
});

describe("keyLists", () => {
  const list = keyLists((l) => `SELECT * FROM t WHERE k IN (${l})`);

  it("fills the keys up to the next power of two with the last key", () => {
    expect(list(["a"])).toEqual({ text: "SELECT * FROM t WHERE k IN ($1)", params: ["a"] });
    expect(list(["a", "b", "c"])).toEqual({ text: "SELECT * FROM t WHERE k IN ($1, $2, $3, $4)", params: ["a", "b", "c", "c"] });
    expect(list(["a", "b", "c", "d"]).params).toEqual(["a", "b", "c", "d"]);
    expect(list(Array.from({ length: 9 }, (_, i) => i)).params).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 8, 8, 8, 8]);
  });

  it("refuses an empty list: a read of no keys is nobody's statement", () => {
    expect(() => list([])).toThrow("at least one key");
  });
});
