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

    // What the hub ahead shows follows the database's clock too: the lease is not expired, and
    // beta, registered a moment ago, is online (not stale for an hour).
    const read = await ahead.rest("/v1/leases/deploy", { headers: b.headers });
    expect(((await read.json()) as { expired: boolean }).expired).toBe(false);
    const agents = (await (await ahead.rest("/v1/agents", { headers: b.headers })).json()) as { agents: { name: string; presence: string }[] };
    expect(agents.agents.find((x) => x.name === "beta")?.presence).toBe("online");
    // And so are the stamps it writes: a runtime's heartbeat.
    const beat = await ahead.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: "rtm_clockcheck" } });
    const heartbeatAt = Date.parse(((await beat.json()) as { presence: { heartbeatAt: string } }).presence.heartbeatAt);
    expect(Math.abs(heartbeatAt - Date.now())).toBeLessThan(30_000);
  });
});
