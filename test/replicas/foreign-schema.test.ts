/**
 * `kxm-hub serve` on a PostgreSQL database that holds tables it did not make refuses with one line,
 * runtime_schema_shape_invalid, as on a SQLite file of another layout: it printed
 * `internal_error: error: relation "agents" already exists` and the driver's stack trace.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefusal, runCli } from "../fixtures/cli.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

describe("serve on a PostgreSQL database that holds someone else's tables", () => {
  it("is one refusal line (runtime_schema_shape_invalid), not an internal_error with a stack trace", async () => {
    const url = await server.createDatabase();
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query("CREATE TABLE agents (id serial PRIMARY KEY, owner text)");
    await c.end();
    const r = await runCli(["--port", "0", "--log-path", "-"], { env: { KXM_DATABASE_URL: url } });
    expect(r.code).toBe(1);
    expectRefusal(r, "runtime_schema_shape_invalid");
  });
});
