import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import type { Decision } from "../../src/store/change-feed.js";
import { StoreOpenError } from "../../src/store/store.js";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { schemaVersion } from "../../src/store/postgres/schema.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import type { LeaseKey, LeaseRow } from "../../src/domain.js";

/**
 * What the PostgreSQL store must do beyond the contract suite: several stores on one database
 * (one per hub replica) keep one fence, and the schema is migrated once and checked.
 */

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

const key: LeaseKey = { project: "p", name: "repo/main" };

/** Grants the lease to `holder` when nobody holds it (the lease rules in miniature); "held" else. */
const acquire = (holder: string) => (cur: LeaseRow | undefined): Decision<LeaseRow, number | "held"> => {
  if (cur?.holderAgentId) return { result: "held" };
  const token = (cur?.fencingToken ?? 0) + 1;
  const write: LeaseRow = { ...key, holderAgentId: holder, holderAgentName: holder, fencingToken: token, acquiredAtMs: 1, expiresAtMs: 2 };
  return { write, result: token };
};
const release = (holder: string, token: number) => (cur: LeaseRow | undefined): Decision<LeaseRow, boolean> =>
  cur?.holderAgentId === holder && cur.fencingToken === token
    ? { write: { ...cur, holderAgentId: null, holderAgentName: null }, result: true }
    : { result: false };

describe("PostgreSQL store", () => {
  it("three stores on one database race for one lease: one winner a round, tokens strictly growing", async () => {
    const url = await server.createDatabase();
    const stores = await Promise.all([1, 2, 3].map(() => PostgresStore.open({ url })));
    try {
      const tokens: number[] = [];
      for (let round = 0; round < 20; round++) {
        // 50 agents spread over the three stores, all at once.
        const answers = await Promise.all(
          Array.from({ length: 50 }, (_, i) => stores[i % 3]!.leases.decideLease(key, acquire(`agt_${round}_${i}`)).then((r) => ({ i, r }))),
        );
        const winners = answers.filter((a) => a.r !== "held");
        expect(winners).toHaveLength(1);
        const { i, r } = winners[0]!;
        const token = r as number;
        tokens.push(token);
        expect(await stores[(i + 1) % 3]!.leases.decideLease(key, release(`agt_${round}_${i}`, token))).toBe(true);
      }
      expect(tokens).toEqual(Array.from({ length: 20 }, (_, k) => k + 1));
      expect((await stores[2]!.leases.getLease(key))?.fencingToken).toBe(20);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it("stores opening together migrate the database once, and a newer schema is refused", async () => {
    const url = await server.createDatabase();
    const stores = await Promise.all(Array.from({ length: 4 }, () => PostgresStore.open({ url })));
    await Promise.all(stores.map((s) => s.close()));
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      expect((await c.query("SELECT version FROM kxm_schema")).rows).toEqual([{ version: schemaVersion }]);
      await c.query("UPDATE kxm_schema SET version = version + 1");
    } finally {
      await c.end();
    }
    const e = await PostgresStore.open({ url }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(StoreOpenError);
    expect((e as StoreOpenError).code).toBe("runtime_schema_newer");
  });

  it("is not ready while the database is down, and serves again when it is back", async () => {
    const own = await startPostgres();
    try {
      const store = await PostgresStore.open({ url: await own.createDatabase() });
      expect(await store.ready()).toBe(true);
      expect(await store.leases.decideLease(key, acquire("agt_a"))).toBe(1);
      own.stopServer("immediate");
      expect(await store.ready()).toBe(false);
      await expect(store.leases.decideLease(key, acquire("agt_b"))).rejects.toThrow();
      own.startServer();
      expect(await store.ready()).toBe(true);
      // Nothing answered was lost; the lease is still held with its token.
      expect(await store.leases.decideLease(key, acquire("agt_b"))).toBe("held");
      expect((await store.leases.getLease(key))?.fencingToken).toBe(1);
      await store.close();
    } finally {
      await own.stop();
    }
  });
});
