import type pg from "pg";
import type { ChangeStream } from "../change-feed.js";
import { StoreUnavailable } from "../store.js";

/** How a decision runs its statements: inside its own transaction, on its pooled connection. */
export interface PgTx {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
}

/** Numbers and stores one change of a project's stream, inside the decision. */
export type PgRecordChange = (project: string, stream: ChangeStream, body: unknown, atMs: number) => Promise<void>;

/** How the store's concerns (agents.ts, leases.ts, messages.ts, ...) run their statements (postgres-store.ts). */
export interface PgAccess {
  /** One decision, its own transaction; resolves once it is committed. */
  tx<T>(work: (tx: PgTx) => Promise<T>): Promise<T>;
  /**
   * One decision that may record changes for watchers (`record`, inside its transaction, last:
   * it locks the stream's head row until the commit); they are handed to the change listeners
   * once it has committed.
   */
  changeTx<T>(work: (tx: PgTx, record: PgRecordChange) => Promise<T>): Promise<T>;
  /** A read on the pool: what is committed. */
  rows<R extends pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<R[]>;
  /** The time of a decision, inside its transaction (the database's clock unless one is injected). */
  now(tx: PgTx): Promise<number>;
  /** Several reads that see one snapshot of the database (REPEATABLE READ, read only). */
  snapshot<T>(read: (tx: PgTx) => Promise<T>): Promise<T>;
  /** The newest number of a project's stream as `tx` sees it (changes.ts). */
  head(tx: PgTx, project: string, stream: ChangeStream): Promise<number>;
}

/** A decision's body: reads, the pure decide, writes; returns its result. */
export type PgWork<T> = (tx: PgTx) => Promise<T>;

/**
 * PostgreSQL errors after which a decision's transaction is rolled back and run again, on what is
 * committed by then: another hub created the same row first (`unique_violation`: the insert
 * waited for that transaction, so the re-run sees its row), or two transactions locked rows in
 * opposite orders (`deadlock_detected`, `serialization_failure`). A decision is a pure function
 * of what it reads, so running it again is safe.
 */
const retryable = new Set(["23505", "40P01", "40001"]);
const maxAttempts = 5;

/**
 * The error as the store reports it: a database that cannot be reached is StoreUnavailable (a
 * connection refused, reset or timed out, one the server closed, or a SQLSTATE of class 08,
 * connection exception, or 57P, the server shutting down or starting). Anything else, a
 * decision's own refusal or a SQL error, stays what it is.
 */
export function storeError(e: unknown): unknown {
  if (e instanceof StoreUnavailable || !(e instanceof Error)) return e;
  const code = (e as { code?: unknown }).code;
  const unreachable =
    (typeof code === "string" && (/^E[A-Z]+$/.test(code) || code.startsWith("08") || code.startsWith("57P"))) ||
    /Connection terminated|connection timeout|timeout exceeded when trying to connect/i.test(e.message);
  return unreachable ? new StoreUnavailable(`the database cannot be reached: ${e.message}`, { cause: e }) : e;
}

/**
 * Runs one decision as one transaction on a pooled connection and resolves once its COMMIT,
 * durable in PostgreSQL (`synchronous_commit` on by default), has returned. Decisions run
 * concurrently, one connection each, so the pool's size is the store's parallelism; PostgreSQL
 * flushes the WAL of commits that arrive together at once, which is group commit done by the
 * database. (One transaction per batch of decisions, as on SQLite, would hold every row a batch
 * locked until its end: hubs whose batches lock rows in different orders would deadlock, and a
 * deadlock is only found after `deadlock_timeout`.) A decision that throws is rolled back; one
 * that loses a race (above) runs again; a connection that fails is StoreUnavailable, and the
 * decision is not answered.
 */
export async function runTransaction<T>(pool: pg.Pool, work: PgWork<T>, begin = "BEGIN"): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    let client: pg.PoolClient;
    try {
      client = await pool.connect();
    } catch (e) {
      throw storeError(e);
    }
    let broken: Error | undefined;
    try {
      await client.query(begin);
      const value = await work(client);
      await client.query("COMMIT");
      return value;
    } catch (e) {
      try {
        await client.query("ROLLBACK");
      } catch (rollback) {
        broken = rollback as Error; // the connection is gone: it is not handed out again
      }
      const code = (e as { code?: unknown }).code;
      if (!broken && typeof code === "string" && retryable.has(code) && attempt < maxAttempts) continue;
      throw storeError(e);
    } finally {
      client.release(broken);
    }
  }
}
