import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/**
 * A rolling upgrade runs hubs of two releases on one database: the newer one migrates at its
 * start, the older ones go on serving. A migration that only adds (a column, a table) must not
 * break them. PostgreSQL refuses to run a prepared statement whose `*` has come to mean another
 * row type, and the store prepares every statement once per connection, so each names its
 * columns (src/store/postgres/rows.ts).
 */

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

/** What a newer release's additive migration could do: one column more in every table. */
async function addColumnEverywhere(url: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const tables = (await c.query<{ t: string }>("SELECT tablename AS t FROM pg_tables WHERE schemaname = current_schema()")).rows.map((r) => r.t);
    for (const t of tables) await c.query(`ALTER TABLE ${pg.escapeIdentifier(t)} ADD COLUMN added_later text`);
    return tables.length;
  } finally {
    await c.end();
  }
}

/** Every call a round makes answers 2xx; a failure names the call and its answer. */
async function ok(call: string, res: Promise<Response>): Promise<any> {
  const r = await res;
  const text = await r.text();
  expect(`${call} ${r.status}`, text).toMatch(/ 2\d\d$/);
  return text ? JSON.parse(text) : undefined;
}

/** The calls of an agent's day and an operator's, each through the statements it prepares. */
async function round(t: TestHub, n: number): Promise<void> {
  const a = await t.register(`alpha-${n}`, "p");
  const b = await t.register(`beta-${n}`, "p");
  const c = await t.register(`gamma-${n}`, "p");
  const lease = `repo-${n}`;
  const granted = await ok("acquire", t.rest(`/v1/leases/${lease}/acquire`, { json: { ttlMs: 60_000 }, headers: a.headers }));
  await ok("renew", t.rest(`/v1/leases/${lease}/renew`, { json: { ttlMs: 60_000, fencingToken: granted.lease.fencingToken }, headers: a.headers }));
  await ok("get lease", t.rest(`/v1/leases/${lease}`, { headers: a.headers }));
  await ok("list leases", t.rest("/v1/leases", { headers: a.headers }));
  const sent = await ok("send", t.rest("/v1/messages", { json: { target: b.id, content: `hello ${n}` }, headers: a.headers }));
  const id = sent.message?.id ?? sent.messageId;
  expect(id, JSON.stringify(sent)).toBeTypeOf("string");
  await ok("inbox", t.rest("/v1/inbox", { headers: b.headers }));
  await ok("get message", t.rest(`/v1/messages/${id}`, { headers: b.headers }));
  await ok("list messages", t.rest("/v1/messages", { headers: b.headers }));
  await ok("ack", t.rest(`/v1/messages/${id}/ack`, { json: {}, headers: b.headers }));
  await ok("reply", t.rest(`/v1/messages/${id}/reply`, { json: { content: "done" }, headers: b.headers }));
  await ok("snapshot", t.rest("/v1/ops/snapshot?project=p"));
  await ok("projects", t.rest("/v1/ops/projects"));
  await ok("runtime", t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: `rt_runtime${n}` } }));
  const token = await ok("create token", t.rest("/v1/ops/projects/q/tokens", { json: { scope: "read", label: `l${n}` } }));
  expect(token.token.tokenId, JSON.stringify(token)).toMatch(/^pt_/);
  await ok("list tokens", t.rest("/v1/ops/projects/q/tokens"));
  await ok("revoke token", t.rest(`/v1/ops/projects/q/tokens/${token.token.tokenId}`, { method: "DELETE" }));
  await ok("audit", t.rest("/v1/ops/audit"));
  await ok("heartbeat", t.rest(`/v1/agents/${a.id}/heartbeat`, { json: {}, headers: a.headers }));
  await ok("release", t.rest(`/v1/leases/${lease}/release`, { json: { fencingToken: granted.lease.fencingToken }, headers: a.headers }));
  // Unregistering ends the instance, which reads the leases it holds or waits for.
  await ok("unregister", t.rest(`/v1/agents/${a.id}`, { method: "DELETE", headers: a.headers }));
  await ok("agents", t.rest("/v1/agents", { headers: b.headers }));
  // What the sweep reads and ends: a lease left to lapse, a message left to expire, a token
  // that runs out, a runtime and an agent that go quiet.
  await ok("acquire to lapse", t.rest(`/v1/leases/${lease}-lapse/acquire`, { json: { ttlMs: 5_000 }, headers: b.headers }));
  await ok("send to expire", t.rest("/v1/messages", { json: { target: c.id, content: "late", ttlMs: 1_000 }, headers: b.headers }));
  await ok("create token to expire", t.rest("/v1/ops/projects/q/tokens", { json: { scope: "read", label: `e${n}`, ttlMs: 1_000 } }));
  t.clock.advance(40 * 86_400_000);
  await t.hub.sweepNow();
  await ok("snapshot after the sweep", t.rest("/v1/ops/snapshot?project=p"));
}

describe("an older hub after a newer one migrated", () => {
  it("goes on serving every call once each table has a column more", async () => {
    const url = await server.createDatabase();
    // One connection: every statement the second round runs was prepared on it by the first.
    // The store decides on the test's clock, which the rounds move for the sweep.
    const clock = new FakeClock();
    await using t = await startTestHub({ clock, overrides: { store: await PostgresStore.open({ url, poolSize: 1, clock }) } });
    await round(t, 1);
    expect(await addColumnEverywhere(url)).toBeGreaterThan(10);
    await round(t, 2);
  });
});
