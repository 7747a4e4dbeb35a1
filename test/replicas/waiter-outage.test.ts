import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import { eventually } from "../fixtures/streams.js";

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

/**
 * A waiting acquire whose client goes away while the database is away cannot leave its queue at
 * once: it leaves once the database is back (tried again after a back-off on the hub clock), so
 * the lease is never handed to a call nobody waits on (docs/leases.md "Who waits").
 */
describe("a waiting acquire whose client goes away while the database is unreachable", () => {
  it("leaves the queue once the database is back: a release does not hand the lease to the gone call", async () => {
    const url = await server.createDatabase();
    await using t = await startTestHub({ config: { databaseUrl: url } });
    const a = await t.register("a");
    const b = await t.register("b");
    const c = await t.register("c");
    const acquired = await t.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: a.headers });
    expect(acquired.status).toBe(200);
    const token = ((await acquired.json()) as { lease: { fencingToken: number } }).lease.fencingToken;

    // b waits in the queue for up to 5 minutes.
    const ac = new AbortController();
    const waiting = t.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000, waitMs: 300_000 }, headers: b.headers, signal: ac.signal }).catch((e: unknown) => e);
    await eventually(async () => (await t.sql("SELECT count(*)::int AS n FROM lease_waiters"))[0]!.n === 1, "b queued");

    // The database goes away; b's client gives up meanwhile, and the hub ends b's call.
    server.stopServer("fast");
    const before = t.events.length;
    ac.abort();
    await waiting;
    await eventually(async () => t.events.slice(before).some((e) => e.event === "request_error"), "the hub to end b's call");
    server.startServer();
    await eventually(async () => (await t.rest("/ready")).status === 200, "ready again");
    // The gone call's leave is tried again after a back-off on the hub clock, until it is made.
    await eventually(async () => {
      t.clock.advance(5_000);
      return (await t.sql("SELECT count(*)::int AS n FROM lease_waiters"))[0]!.n === 0;
    }, "b's entry gone");

    // a releases. Nobody waits for the lease any more: it is free, and c gets it.
    expect((await t.rest("/v1/leases/deploy/release", { json: { fencingToken: token }, headers: a.headers })).status).toBe(200);
    const got = await t.rest("/v1/leases/deploy", { headers: c.headers });
    const view = (await got.json()) as { lease?: { holderAgentName?: string } };
    expect(view.lease?.holderAgentName).not.toBe("b");
    const res = await t.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: c.headers });
    expect({ status: res.status, code: ((await res.json()) as { code?: string }).code }).toEqual({ status: 200, code: undefined });
  });
});
