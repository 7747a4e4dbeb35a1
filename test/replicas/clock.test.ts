import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub } from "../fixtures/hub.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/**
 * Hubs on one PostgreSQL database decide on the database's clock, not their own: two hubs whose
 * clocks are two hours apart agree on when a lease lapses.
 */

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

describe("one clock for hubs on one database", () => {
  it("a hub whose clock runs two hours ahead still sees a live lease as held", async () => {
    const url = await server.createDatabase();
    const real = Date.now();
    // The stores read the database's clock (no clock injected into them); the hubs' own are skewed.
    await using behind = await startTestHub({ clock: new FakeClock(real - 3_600_000), overrides: { store: await PostgresStore.open({ url }) } });
    await using ahead = await startTestHub({ clock: new FakeClock(real + 3_600_000), overrides: { store: await PostgresStore.open({ url }) } });
    const a = await behind.register("alpha");
    const b = await ahead.register("beta");

    const granted = await behind.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: a.headers });
    expect(granted.status).toBe(200);
    const lease = ((await granted.json()) as { lease: { fencingToken: number; expiresAt: string } }).lease;
    // Stamped on the database's clock: neither hub's.
    const expiresAt = Date.parse(lease.expiresAt);
    expect(Math.abs(expiresAt - (real + 60_000))).toBeLessThan(30_000);

    // On its own clock the hub ahead would call this lease lapsed an hour ago and take it over.
    const refused = await ahead.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: b.headers });
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { code: string }).code).toBe("lease_held");
  });
});
