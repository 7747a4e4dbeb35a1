import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { replicaLockClass } from "../../src/store/postgres/inbox-notify.js";
import { serveCli, type ServingCli } from "../fixtures/cli.js";
import { sqlRows, startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import { eventually } from "../fixtures/streams.js";

/**
 * `kxm-hub serve` replicas on one PostgreSQL database, one of them SIGKILLed while a call waits
 * through it for a lease: nobody will ever answer that call, so no lease goes to it (D79,
 * docs/leases.md "Who waits": a place in a queue belongs to a call that can still take the lease).
 */

let server: TestPostgres;
let databaseUrl: string;
const hubs: ServingCli[] = [];
const serve = async () => {
  const h = await serveCli(["--port", "0", "--log-path", "-"], { env: { KXM_DATABASE_URL: databaseUrl } });
  hubs.push(h);
  return h;
};
beforeAll(async () => {
  server = await startPostgres();
  databaseUrl = await server.createDatabase();
  // One at a time, so the first migrates.
  await serve();
  await serve();
}, 60_000);
afterAll(async () => {
  await Promise.all(hubs.map((h) => (h.child.exitCode === null && h.child.signalCode === null ? h.stop() : undefined)));
  await server?.stop();
});

const sql = (q: string) => sqlRows(databaseUrl, q);
const count = async (q: string) => Number((await sql(q))[0]!.n);
/** The replicas the database sees alive: their liveness locks. */
const liveReplicas = () => count(`SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = ${replicaLockClass} AND objsubid = 2 AND granted`);
const queued = () => count("SELECT count(*) AS n FROM lease_waiters");

const post = (base: string, p: string, headers: Record<string, string>, json: unknown) =>
  fetch(`${base}${p}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(json) });
async function register(base: string, name: string): Promise<Record<string, string>> {
  const res = await post(base, "/v1/agents/register", {}, { name, project: "p" });
  const body = (await res.json()) as { agent: { id: string }; agentKey: string };
  return { "x-kxm-agent-id": body.agent.id, "x-kxm-agent-key": body.agentKey };
}
async function acquire(base: string, headers: Record<string, string>, resource: string, json: { ttlMs: number; waitMs?: number }) {
  const res = await post(base, `/v1/leases/${resource}/acquire`, headers, json);
  const body = (await res.json()) as { code?: string; lease?: { holderAgentName: string; fencingToken: number } };
  return { status: res.status, code: body.code, holder: body.lease?.holderAgentName, token: body.lease?.fencingToken };
}
async function waitersShown(base: string, headers: Record<string, string>, resource: string): Promise<string[]> {
  const res = await fetch(`${base}/v1/leases/${resource}`, { headers });
  return ((await res.json()) as { lease: { waiters?: { agentName: string }[] } }).lease.waiters?.map((w) => w.agentName) ?? [];
}

describe("a lease waiter whose replica is gone", () => {
  it("a call waiting through a live replica still gets the lease released through another", async () => {
    const [h1, h2] = hubs as [ServingCli, ServingCli];
    const a = await register(h1.url, "live-a");
    const b = await register(h2.url, "live-b");
    const got = await acquire(h1.url, a, "build", { ttlMs: 600_000 });
    expect(got.status).toBe(200);
    const waiting = acquire(h2.url, b, "build", { ttlMs: 60_000, waitMs: 600_000 });
    await eventually(async () => (await queued()) === 1, "b queued");
    expect((await post(h1.url, "/v1/leases/build/release", a, { fencingToken: got.token })).status).toBe(200);
    expect(await waiting).toMatchObject({ status: 200, holder: "live-b", token: got.token! + 1 });
  }, 60_000);

  it("is passed over when the lease is released: the next holder is a live caller, and the token still grows", async () => {
    const [h1, h2] = hubs as [ServingCli, ServingCli];
    const a = await register(h1.url, "a");
    const b = await register(h2.url, "b");
    const c = await register(h1.url, "c");
    const got = await acquire(h1.url, a, "deploy", { ttlMs: 600_000 });
    expect(got.status).toBe(200);

    // b waits through the second hub, which is then killed: nobody can ever answer b's call.
    const waiting = acquire(h2.url, b, "deploy", { ttlMs: 600_000, waitMs: 600_000 }).catch((e: unknown) => e);
    await eventually(async () => (await queued()) === 1, "b queued");
    h2.child.kill("SIGKILL");
    await waiting;
    // The database sees the replica gone once its connections' backends end.
    await eventually(async () => (await liveReplicas()) === 1, "the killed replica's liveness lock freed");
    // Its entry is still stored, but no view shows it.
    expect(await queued()).toBe(1);
    expect(await waitersShown(h1.url, a, "deploy")).toEqual([]);

    // a releases through the surviving hub: the lease is not handed to b's dead call, whose entry goes.
    expect((await post(h1.url, "/v1/leases/deploy/release", a, { fencingToken: got.token })).status).toBe(200);
    expect(await queued()).toBe(0);
    // c, a live caller, then asks for the lease and gets it on the next token.
    expect(await acquire(h1.url, c, "deploy", { ttlMs: 60_000 })).toMatchObject({ status: 200, code: undefined, holder: "c", token: got.token! + 1 });
  }, 60_000);

  it("leaves the queue when a replica starts: the waiters a killed replica left are dropped, the lease stays held", async () => {
    const h1 = hubs[0]!;
    const h3 = await serve();
    const a = await register(h1.url, "restart-a");
    const d = await register(h3.url, "restart-d");
    const got = await acquire(h1.url, a, "release", { ttlMs: 600_000 });
    expect(got.status).toBe(200);
    const waiting = acquire(h3.url, d, "release", { ttlMs: 60_000, waitMs: 600_000 }).catch((e: unknown) => e);
    await eventually(async () => (await queued()) === 1, "d queued");
    h3.child.kill("SIGKILL");
    await waiting;
    await eventually(async () => (await liveReplicas()) === 1, "the killed replica's liveness lock freed");
    expect(await queued()).toBe(1);

    // The killed replica comes back (a new process, as a supervisor restarts it): its start drops the entry.
    const again = await serve();
    expect(await queued()).toBe(0);
    expect(await waitersShown(again.url, a, "release")).toEqual([]);
    expect(await acquire(again.url, a, "release", { ttlMs: 600_000 })).toMatchObject({ status: 200, holder: "restart-a", token: got.token });
  }, 60_000);
});
