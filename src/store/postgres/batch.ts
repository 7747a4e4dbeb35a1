import type pg from "pg";
import type { BatchBackend, WorkOutcome } from "../group-commit.js";
import { StoreUnavailable } from "../store.js";

/** How a decision runs its statements: inside its batch's transaction, on the batch's connection. */
export interface PgTx {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
}

/** A decision's body: reads, the pure decide, writes; returns its result. */
export type PgWork = (tx: PgTx) => Promise<unknown>;

/**
 * PostgreSQL errors after which a decision is run again, in the same batch, on what is committed
 * by then: another replica created the same row first (`unique_violation`: the insert waited for
 * that transaction, so the re-run sees its row), or two replicas' batches locked rows in opposite
 * orders (`deadlock_detected`, `serialization_failure`). A decision is a pure function of what it
 * reads, so running it again is safe.
 */
const retryable = new Set(["23505", "40P01", "40001"]);
const maxAttempts = 4;

/**
 * The error as the store reports it: a database that cannot be reached (no connection, a lost
 * one, a server shutting down or starting: SQLSTATE classes 08 and 57P) is StoreUnavailable;
 * anything the server answered with a SQLSTATE of its own stays what it is.
 */
export function storeError(e: unknown): unknown {
  if (e instanceof StoreUnavailable) return e;
  const code = (e as { code?: unknown }).code;
  const sqlState = typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
  if (sqlState === undefined || sqlState.startsWith("08") || sqlState.startsWith("57P")) {
    return new StoreUnavailable(`the database cannot be reached: ${(e as Error).message}`, { cause: e });
  }
  return e;
}

/**
 * The PostgreSQL half of group commit (store/group-commit.ts): one transaction per batch on one
 * pooled connection, a savepoint per decision so one that throws is rolled back alone, one
 * COMMIT. PostgreSQL's COMMIT returns once the commit is durable (synchronous_commit, on by
 * default), so the batch is answered when it returns; a batch whose COMMIT fails (the database
 * went away) is rejected as a whole, with StoreUnavailable, and none of it is answered.
 */
export function postgresBatches(pool: pg.Pool): BatchBackend<PgWork> {
  return {
    async commit(works: PgWork[]): Promise<WorkOutcome[]> {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (e) {
        throw storeError(e);
      }
      let failed: unknown;
      try {
        await client.query("BEGIN");
        const outcomes: WorkOutcome[] = [];
        for (const work of works) outcomes.push(await runWork(client, work));
        await client.query("COMMIT");
        return outcomes;
      } catch (e) {
        failed = e;
        await client.query("ROLLBACK").catch(() => {});
        throw storeError(e);
      } finally {
        // A connection that failed mid-batch is not handed out again.
        client.release(failed instanceof Error ? failed : undefined);
      }
    },
  };
}

async function runWork(client: pg.PoolClient, work: PgWork): Promise<WorkOutcome> {
  for (let attempt = 1; ; attempt++) {
    let changed = 0;
    const tx: PgTx = {
      async query(sql, params) {
        const r = await client.query(sql, params);
        if (r.command === "INSERT" || r.command === "UPDATE" || r.command === "DELETE") changed += r.rowCount ?? 0;
        return r;
      },
    };
    await client.query("SAVEPOINT decision");
    try {
      const value = await work(tx);
      await client.query("RELEASE SAVEPOINT decision");
      return { ok: true, value, wrote: changed > 0 };
    } catch (error) {
      // Undoes this decision alone; if even that fails, the connection is gone: the batch fails.
      await client.query("ROLLBACK TO SAVEPOINT decision");
      await client.query("RELEASE SAVEPOINT decision");
      const code = (error as { code?: unknown }).code;
      if (typeof code === "string" && retryable.has(code) && attempt < maxAttempts) continue;
      return { ok: false, error };
    }
  }
}
