import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { startTestHub } from "../fixtures/hub.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import { syncEvent } from "../sync/fixtures.js";

/**
 * One hub on PostgreSQL. Project q pushes run facts naming project p's sync projectId and runs (a
 * misconfigured or hostile runtime: the hub answers those events `conflict`,
 * sync_project_mismatch, inside a 200), while p pushes its own. The two projects' batches run side
 * by side; a push locks only its own hub projects' runs (postgres/sync.ts), so the batches never
 * lock the same runs in opposite orders: every push is answered, as on SQLite.
 */
let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
  // Deadlocks found after 10 ms instead of 1 s, so the test runs many rounds quickly.
  const c = new pg.Client({ connectionString: server.url });
  await c.connect();
  await c.query("ALTER SYSTEM SET deadlock_timeout = '10ms'");
  await c.query("SELECT pg_reload_conf()");
  await c.end();
});
afterAll(() => server?.stop());

describe("two projects pushing run facts that name the same runs", () => {
  it("every push is answered (200, conflicts as results), never internal_error", async () => {
    const url = await server.createDatabase();
    await using t = await startTestHub({ config: { databaseUrl: url } });
    const runs = 8;
    const ev = (r: number, s: number) => syncEvent({ projectId: "prj_shared0001", runId: `run_shared${r}00`, sequence: s });
    const failed: Record<string, number> = {};
    for (let round = 1; round <= 15; round++) {
      const pushes: Promise<void>[] = [];
      for (let r = 0; r < runs; r++) {
        // p, the projectId's owner, in one order; q in the other.
        for (const [project, run] of [["p", r], ["q", runs - 1 - r]] as const) {
          pushes.push(
            t.rest("/v1/sync/events", { json: { project, runtimeId: "rtm_runtime0001", events: [ev(run, round)] } }).then((res) => {
              if (res.status !== 200) failed[`${project} ${res.status}`] = (failed[`${project} ${res.status}`] ?? 0) + 1;
            }),
          );
        }
      }
      await Promise.all(pushes);
    }
    const internal = t.events.filter((e) => e.event === "internal_error").map((e) => String(e.fields.error).split("\n")[0]);
    expect({ failed, internal: [...new Set(internal)] }).toEqual({ failed: {}, internal: [] });
  });
});
