import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { jsonOf, startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { sqlRows, startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/**
 * A hub on PostgreSQL authenticates a lease decision or a send on the agent's row as it read it
 * lately (D86), and the decision checks that caller again in its own transaction. Two hubs on one
 * database, one clock that does not move (the rows read lately stay so for the whole test): what
 * one hub changes, the other has not read yet, and its decisions still refuse what a fresh
 * authentication would have refused.
 */

const admin = "admin-secret";
let server: TestPostgres;
let url: string;
let clock: FakeClock;
let one: TestHub;
let other: TestHub;

beforeAll(async () => {
  server = await startPostgres();
  url = await server.createDatabase();
  clock = new FakeClock(Date.now());
  const hub = async () =>
    startTestHub({ clock, config: { authToken: admin }, overrides: { store: await PostgresStore.open({ url, clock }) } });
  one = await hub();
  other = await hub();
}, 60_000);
afterAll(async () => {
  await one?.close();
  await other?.close();
  await server?.stop();
});

/** Rows of a query on the database both hubs share. */
const sql = (query: string, values: unknown[] = []) => sqlRows(url, query, values);

const call = (t: TestHub, path: string, a: AgentCreds, json: unknown = {}) => t.rest(path, { json, headers: a.headers });
const refusal = async (res: Response) => ({ status: res.status, code: (await jsonOf(res)).code as string });

/** Every call the other hub makes for `a` that its rows read lately would let in. */
async function deciding(a: AgentCreds, to: AgentCreds, lease: { name: string; fencingToken: number }) {
  return {
    acquire: await refusal(await call(other, "/v1/leases/fresh/acquire", a, { ttlMs: 60_000 })),
    renew: await refusal(await call(other, `/v1/leases/${lease.name}/renew`, a, { fencingToken: lease.fencingToken, ttlMs: 60_000 })),
    release: await refusal(await call(other, `/v1/leases/${lease.name}/release`, a, { fencingToken: lease.fencingToken })),
    send: await refusal(await call(other, "/v1/messages", a, { target: to.id, content: "hello" })),
  };
}

/** Has the other hub read `a`'s row (a lease granted and a message sent through it), and answers the lease. */
async function warm(a: AgentCreds, to: AgentCreds, name: string): Promise<{ name: string; fencingToken: number }> {
  const granted = await call(other, `/v1/leases/${name}/acquire`, a, { ttlMs: 60_000 });
  expect(granted.status).toBe(200);
  expect((await call(other, "/v1/messages", a, { target: to.id, content: "first" })).status).toBe(202);
  return { name, fencingToken: (await jsonOf(granted)).lease.fencingToken };
}

describe("calls authenticated on rows read lately (D86)", () => {
  it("an agent unregistered through one hub: its old key is refused on the other, whose row of it is recent", async () => {
    const a = await one.register("leaver", "keys", admin);
    const b = await one.register("stayer", "keys", admin);
    const lease = await warm(a, b, "kept");

    const gone = await one.rest(`/v1/agents/${a.id}`, { method: "DELETE", headers: a.headers });
    expect(gone.status).toBe(204);

    const refused = { status: 401, code: "invalid_agent_identity" };
    expect(await deciding(a, b, lease)).toEqual({ acquire: refused, renew: refused, release: refused, send: refused });
    // Nothing of it was written: the lease is still the old instance's, no message went out.
    expect(await sql("SELECT holder_agent_id, fencing_token::int FROM leases WHERE project = 'keys' AND name = 'kept'")).toEqual([
      { holder_agent_id: a.id, fencing_token: lease.fencingToken },
    ]);
    expect(await sql("SELECT content FROM messages WHERE from_id = $1", [a.id])).toEqual([{ content: "first" }]);
  });

  it("a project that got its first token through one hub: the admin token no longer stands in on the other, whose rows say it had none", async () => {
    const a = await one.register("before", "closing", admin);
    const b = await one.register("peer", "closing", admin);
    const lease = await warm(a, b, "held");

    const made = await one.rest("/v1/ops/projects/closing/tokens", { json: {}, headers: { authorization: `Bearer ${admin}` } });
    expect(made.status).toBe(201);
    const { secret } = await jsonOf(made);

    const refused = { status: 401, code: "invalid_auth" };
    expect(await deciding(a, b, lease)).toEqual({ acquire: refused, renew: refused, release: refused, send: refused });
    expect(await sql("SELECT name FROM leases WHERE project = 'closing'")).toEqual([{ name: "held" }]);
    expect(await sql("SELECT count(*)::int AS n FROM messages WHERE from_id = $1", [a.id])).toEqual([{ n: 1 }]);

    // With the project's own token the same calls go through.
    const own = { ...a, headers: { ...a.headers, authorization: `Bearer ${secret}` } };
    expect((await call(other, "/v1/leases/fresh/acquire", own, { ttlMs: 60_000 })).status).toBe(200);
    expect((await call(other, `/v1/leases/held/release`, own, { fencingToken: lease.fencingToken })).status).toBe(200);
    expect((await call(other, "/v1/messages", own, { target: b.id, content: "after" })).status).toBe(202);
  });
});
