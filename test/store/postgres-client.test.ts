import { spawn } from "node:child_process";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StoreClient } from "../../src/store/postgres/client.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import { repo } from "../fixtures/cli.js";

/**
 * The PostgreSQL store's connections (src/store/postgres/client.ts, D89): node-postgres' promise
 * contract, with each statement handed to node-postgres with its callback, so that what a
 * statement leaves behind dies young.
 */

let server: TestPostgres;
let url: string;
beforeAll(async () => {
  server = await startPostgres();
  url = await server.createDatabase();
});
afterAll(() => server?.stop());

async function connected<C extends pg.Client>(make: new (config: pg.ClientConfig) => C): Promise<C> {
  const c = new make({ connectionString: url });
  await c.connect();
  return c;
}

describe("StoreClient: node-postgres' promise contract", () => {
  it("resolves with the result: rows, fields and command", async () => {
    const c = await connected(StoreClient);
    try {
      const r = await c.query<{ n: number; s: string }>("SELECT $1::int AS n, $2::text AS s", [7, "seven"]);
      expect(r.rows).toEqual([{ n: 7, s: "seven" }]);
      expect(r.fields.map((f) => f.name)).toEqual(["n", "s"]);
      expect(r.command).toBe("SELECT");
      const named = await c.query<{ n: number }>({ name: "kxm_client_test", text: "SELECT $1::int + 1 AS n", values: [1] });
      expect(named.rows).toEqual([{ n: 2 }]);
    } finally {
      await c.end();
    }
  });

  it("rejects with the database's error, its code kept and its stack taken again", async () => {
    const c = await connected(StoreClient);
    try {
      const e = await c.query("SELECT * FROM no_such_table").then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(e).toBeInstanceOf(Error);
      expect((e as { code?: string }).code).toBe("42P01");
      expect((e as Error).stack).toContain("withStackHere");
      // The connection goes on after a refused statement.
      expect((await c.query<{ ok: number }>("SELECT 1 AS ok")).rows).toEqual([{ ok: 1 }]);
    } finally {
      await c.end();
    }
  });

  it("leaves a statement given a callback, or a query object of the caller's own, to node-postgres", async () => {
    const c = await connected(StoreClient);
    try {
      const viaCallback = await new Promise<unknown>((resolve, reject) => {
        const returned = c.query("SELECT 3 AS n", (e: Error | null, r: pg.QueryResult) => (e ? reject(e) : resolve(r.rows)));
        expect(returned).toBeUndefined();
      });
      expect(viaCallback).toEqual([{ n: 3 }]);
      const own = new pg.Query("SELECT 4 AS n");
      const rows = new Promise<unknown>((resolve, reject) => {
        own.on("end", (r: pg.QueryResult) => resolve(r.rows));
        own.on("error", reject);
      });
      expect(c.query(own)).toBe(own);
      expect(await rows).toEqual([{ n: 4 }]);
    } finally {
      await c.end();
    }
  });

  it("refuses a missing statement at once, as node-postgres does", async () => {
    const c = await connected(StoreClient);
    try {
      expect(() => c.query(undefined as unknown as string)).toThrow(TypeError);
    } finally {
      await c.end();
    }
  });

  it("is what a pool made with it hands out, and what the pool's own query runs on", async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2, Client: StoreClient });
    try {
      const client = await pool.connect();
      expect(client).toBeInstanceOf(StoreClient);
      client.release();
      expect((await pool.query<{ n: number }>("SELECT 5 AS n")).rows).toEqual([{ n: 5 }]);
    } finally {
      await pool.end();
    }
  });
});

describe("StoreClient under V8's young generation (D89)", () => {
  /** Bytes promoted by 3,000 statements on one connection, in a process of its own (test/fixtures/pg-promotion.ts). */
  function promotedBy(which: "pg" | "store"): Promise<number> {
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_")));
    const child = spawn(process.execPath, ["--expose-gc", "--import", "tsx", path.join(repo, "test/fixtures/pg-promotion.ts"), url, which], {
      cwd: repo,
      env: base,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr.on("data", (b: Buffer) => (err += b.toString()));
    return new Promise((resolve, reject) => {
      child.on("error", reject);
      child.on("close", (code) => (code === 0 ? resolve((JSON.parse(out) as { promoted: number }).promoted) : reject(new Error(`pg-promotion ${which} exited with ${code}: ${err}`))));
    });
  }

  it("promotes almost nothing of its statements, where node-postgres' own promises promote them", async () => {
    const viaStoreClient = await promotedBy("store");
    const viaPg = await promotedBy("pg");
    // node-postgres' own promise path is the control: if this release of it (or of V8) no longer
    // promotes its statements, the test says nothing about StoreClient, and D89's reason is gone.
    expect(viaPg, "node-postgres' promises promote the statements' objects").toBeGreaterThan(2_000_000);
    expect(viaStoreClient).toBeLessThan(600_000);
  }, 60_000);
});
