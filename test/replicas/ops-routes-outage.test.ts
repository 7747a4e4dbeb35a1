import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import { eventually } from "../fixtures/streams.js";

/**
 * While the PostgreSQL database is away, `/health` still says the process is up (200, without
 * the online count it cannot read) and `/metrics` still answers, the gauges read from the store
 * at their last value; `/ready` alone says 503. Both answered 500 internal_error: a liveness probe on
 * /health restarted every replica in a database outage, and the scrape lost every metric.
 */
let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

describe("the ops routes while PostgreSQL is away", () => {
  it("/health answers 200, /metrics answers with the store's gauges at their last value, /ready 503", async () => {
    const url = await server.createDatabase();
    await using t = await startTestHub({ config: { databaseUrl: url } });
    await t.register("alpha");
    expect(await (await t.rest("/health")).json()).toEqual({ ok: true, agents: 1 });
    expect(await (await t.rest("/metrics")).text()).toMatch(/^kxm_online_agents 1$/m);
    server.stopServer("fast");
    try {
      await eventually(async () => (await t.rest("/ready")).status === 503, "not ready");
      const health = await t.rest("/health");
      expect({ status: health.status, body: await health.json() }).toEqual({ status: 200, body: { ok: true } });
      const metrics = await t.rest("/metrics");
      const text = await metrics.text();
      expect(metrics.status).toBe(200);
      expect(text).toMatch(/^kxm_requests_total \d+$/m);
      expect(text).toMatch(/^kxm_online_agents 1$/m);
      expect(t.events.filter((e) => e.event === "internal_error")).toEqual([]);
    } finally {
      server.startServer();
    }
  }, 60_000);
});
