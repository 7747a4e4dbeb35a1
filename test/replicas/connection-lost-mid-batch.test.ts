import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { StoreClient } from "../../src/store/postgres/client.js";
import { startTestHub } from "../fixtures/hub.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/**
 * A pooled connection whose backend ends between two statements of a batch (an operator's
 * pg_terminate_backend, a server restart, a proxy or failover cutting it): node-postgres then
 * refuses the batch's next statement with "Client has encountered a connection error and is not
 * queryable". docs/api.md: the database cannot be reached (connection lost) is store_unavailable
 * (503), and a retry is safe; never internal_error.
 */

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

/**
 * Arms a one-shot fault: the next statement whose text contains `marker` is sent only after the
 * backend of its connection was terminated and the client has seen its connection fail.
 */
function armConnectionLossBefore(url: string, marker: string): { fired: () => boolean; restore: () => void } {
  const proto = StoreClient.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  let armed = true;
  let fired = false;
  proto.query = function (this: pg.Client & { processID: number; _queryable: boolean }, ...args: unknown[]) {
    const text = typeof args[0] === "string" ? args[0] : (args[0] as { text?: string } | undefined)?.text;
    if (!armed || typeof text !== "string" || !text.includes(marker)) return original.apply(this, args);
    armed = false;
    return (async () => {
      const lost = new Promise<void>((r) => this.once("error", () => r()));
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      await admin.query("SELECT pg_terminate_backend($1)", [this.processID]);
      await admin.end();
      await lost;
      fired = true;
      return original.apply(this, args);
    })();
  };
  return { fired: () => fired, restore: () => (proto.query = original) };
}

/**
 * A pooled connection lost between two statements of a batch (its backend ended: a restart, a
 * proxy, a failover) is the database being unreachable: store_unavailable (503, a retry is
 * safe), never internal_error, and nothing of the call applied. node-postgres refuses the next
 * statement as "not queryable", with no code.
 */
describe("a connection lost between two statements of a batch", () => {
  it.each([
    ["an acquire", "FROM lease_waiters WHERE project = $1 AND name = ANY"],
    ["a send", "FROM messages\n            WHERE (from_id, idempotency_key)"],
  ])("%s is refused with store_unavailable (503), not internal_error, and nothing is applied", async (what, marker) => {
    const url = await server.createDatabase();
    await using t = await startTestHub({ config: { databaseUrl: url } });
    const alice = await t.register("alice");
    await t.register("bob");
    const call = () =>
      what === "an acquire"
        ? t.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: alice.headers })
        : t.rest("/v1/messages", { json: { target: "bob", content: "hi", idempotencyKey: "k1" }, headers: alice.headers });
    const fault = armConnectionLossBefore(url, marker);
    let res: Response;
    try {
      res = await call();
    } finally {
      fault.restore();
    }
    expect(fault.fired()).toBe(true);
    const body = (await res.json()) as { code: string };
    expect({ status: res.status, code: body.code }).toEqual({ status: 503, code: "store_unavailable" });
    // Nothing of it applied, and a retry is answered.
    const again = await call();
    expect(again.status).toBeLessThan(300);
    if (what === "an acquire") expect(((await again.json()) as { lease: { fencingToken: number } }).lease.fencingToken).toBe(1);
    else expect(await t.sql("SELECT count(*)::int AS n FROM messages")).toEqual([{ n: 1 }]);
  });
});
