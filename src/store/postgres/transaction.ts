import type pg from "pg";
import type { ChangeStream } from "../change-feed.js";
import type { SegmentKind } from "./batches.js";
import { StoreUnavailable } from "../store.js";

/** How a decision runs its statements: inside its own transaction, on its pooled connection. */
export interface PgTx {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
  /** The database's time for the decisions of a batch (batches.ts), when it runs in one. */
  clockMs?(): number;
}

/** A statement and its parameters, to run later. */
export interface Statement {
  text: string;
  values: unknown[];
}

/**
 * Statements as one: all but the last become data-modifying WITH queries of the last, their
 * parameters renumbered after the previous ones'. They run on one snapshot and none sees the
 * others' writes, so each must write a table no other one reads or writes, and none may have a
 * WITH of its own (PostgreSQL allows data-modifying WITH queries at the top level only).
 */
export function together(statements: readonly Statement[]): Statement | undefined {
  if (statements.length <= 1) return statements[0];
  let offset = 0;
  const values: unknown[] = [];
  const parts = statements.map((st) => {
    if (/^\s*WITH\b/i.test(st.text)) throw new Error("a statement with a WITH of its own cannot be put together with others");
    const from = offset;
    offset += st.values.length;
    values.push(...st.values);
    return st.text.replace(/\$(\d+)/g, (_, n: string) => `$${Number(n) + from}`);
  });
  const last = parts.pop()!;
  return { text: `WITH ${parts.map((p, i) => `s${i + 1} AS (${p})`).join(", ")} ${last}`, values };
}

/** Numbers and stores one change of a project's stream, inside the decision. */
export type PgRecordChange = (project: string, stream: ChangeStream, body: unknown, atMs: number) => Promise<void>;

/** How the store's concerns (agents.ts, leases.ts, messages.ts, ...) run their statements (postgres-store.ts). */
export interface PgAccess {
  /** One decision, its own transaction; resolves once it is committed. */
  tx<T>(work: (tx: PgTx) => Promise<T>): Promise<T>;
  /**
   * One decision that may record changes for watchers (`record`, inside its transaction), in the
   * projects it declares beforehand: their head rows are locked first (changes.ts lockHeads), and
   * recording in a project it did not declare is a bug that throws. The changes are handed to the
   * change listeners once it has committed. A decision on one project joins that project's next
   * batch (batches.ts); one on several (a sweep) or none runs on its own.
   */
  changeTx<T>(projects: string | readonly string[], work: PgChangeWork<T>): Promise<T>;
  /**
   * A decision of a kind that runs in segments (batches.ts SegmentKind), in `project`'s next
   * batch on this hub; resolves once that batch has committed.
   */
  batched<I, T>(project: string, kind: SegmentKind<I>, item: I): Promise<T>;
  /** A read on the pool: what is committed. */
  rows<R extends pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<R[]>;
  /** One statement that writes and commits on its own, on the pool; resolves once it is committed. */
  alone<R extends pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<R[]>;
  /** The time of a decision, inside its transaction (the database's clock unless one is injected). */
  now(tx: PgTx): Promise<number>;
  /**
   * The time as this hub follows the database's clock (the injected clock in tests), for reads
   * that choose what a decision will lock: the decision reads `now` again inside.
   */
  hubNow(): number;
  /** Several reads that see one snapshot of the database (REPEATABLE READ, read only). */
  snapshot<T>(read: (tx: PgTx) => Promise<T>): Promise<T>;
  /** The newest number of a project's stream as `tx` sees it (changes.ts). */
  head(tx: PgTx, project: string, stream: ChangeStream): Promise<number>;
}

/** Each statement's name on every connection, and whether it may write. */
const statementNames = new Map<string, { name: string; writes: boolean }>();
/** Beyond this many texts, statements run unnamed (a safeguard: the store's statements are a fixed set). */
const maxNamed = 512;

/**
 * The name statement `text` runs under: PostgreSQL parses and plans a named statement once per
 * connection instead of at every run. Undefined once the safeguard's count of texts is reached.
 */
export function namedStatement(text: string): { name: string; writes: boolean } | undefined {
  let s = statementNames.get(text);
  if (s === undefined && statementNames.size < maxNamed) {
    statementNames.set(text, (s = { name: `kxm_${statementNames.size + 1}`, writes: !/^\s*SELECT\b/i.test(text) }));
  }
  return s;
}

/** A decision's body: reads, the pure decide, writes; returns its result. */
export type PgWork<T> = (tx: PgTx) => Promise<T>;

/** The body of a decision that may record changes. */
export type PgChangeWork<T = unknown> = (tx: PgTx, record: PgRecordChange) => Promise<T>;

/**
 * PostgreSQL errors after which a decision's transaction is rolled back and run again, on what is
 * committed by then: another hub created the same row first (`unique_violation`: the insert
 * waited for that transaction, so the re-run sees its row), or two transactions locked rows in
 * opposite orders (`deadlock_detected`, `serialization_failure`). A decision is a pure function
 * of what it reads, so running it again is safe.
 */
const retryable = new Set(["23505", "40P01", "40001"]);
export const maxAttempts = 5;

/** Whether a decision that threw `e` runs again (above). */
export function isRetryable(e: unknown): boolean {
  const code = (e as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && retryable.has(code);
}

/**
 * The error as the store reports it: a database that cannot be reached is StoreUnavailable (a
 * connection refused, reset or timed out, one the server closed, a client whose connection died
 * between two statements of a batch ("not queryable"), or a SQLSTATE of class 08,
 * connection exception, or 57P, the server shutting down or starting). Anything else, a
 * decision's own refusal or a SQL error, stays what it is.
 */
export function storeError(e: unknown): unknown {
  if (e instanceof StoreUnavailable || !(e instanceof Error)) return e;
  const code = (e as { code?: unknown }).code;
  const unreachable =
    (typeof code === "string" && (/^E[A-Z]+$/.test(code) || code.startsWith("08") || code.startsWith("57P"))) ||
    // node-postgres refuses a statement on a client whose connection died under it, or that it closed.
    /Connection terminated|connection timeout|timeout exceeded when trying to connect|is not queryable/i.test(e.message);
  return unreachable ? new StoreUnavailable(`the database cannot be reached: ${e.message}`, { cause: e }) : e;
}

/**
 * Runs `send`, which asks `client` for several statements without waiting, and writes them to
 * the database in one system call: the pool's connections are pipelined (postgres-store.ts), so
 * each statement is written as it is asked, a `writev` of its own, which on a loopback TCP
 * socket is the most expensive call a hub makes per statement (the kernel delivers to the
 * server in it). The socket is corked around them.
 */
export function sendTogether<T>(client: pg.ClientBase, send: () => T): T {
  const stream = (client as pg.Client).connection?.stream;
  stream?.cork();
  try {
    return send();
  } finally {
    stream?.uncork();
  }
}

/** Connections that have their listener for a connection lost while checked out. */
const listened = new WeakSet<pg.PoolClient>();

/**
 * A pooled connection; one the database refuses is StoreUnavailable. A connection lost while it
 * is checked out (the server gone, the backend terminated) rejects the query in flight, and its
 * holder releases it as broken; the pool listens for that only while a connection is idle, so
 * without this listener the client's `error` event would end the process.
 */
export async function connect(pool: pg.Pool): Promise<pg.PoolClient> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (e) {
    throw storeError(e);
  }
  if (!listened.has(client)) {
    listened.add(client);
    client.on("error", () => {});
  }
  return client;
}

/**
 * Rolls back the transaction open on `client`; returns the error when that failed (the
 * connection is gone, and must be released with it, so that it is not handed out again).
 */
export async function rollback(client: pg.ClientBase): Promise<Error | undefined> {
  try {
    await client.query("ROLLBACK");
    return undefined;
  } catch (e) {
    return e as Error;
  }
}

/**
 * Runs one decision as one transaction on a pooled connection and resolves once its COMMIT,
 * durable in PostgreSQL (`synchronous_commit` on by default), has returned. Decisions run
 * concurrently, one connection each, so the pool's size is the store's parallelism; PostgreSQL
 * flushes the WAL of commits that arrive together at once. (The decisions that record changes
 * of one project run in batches instead, batches.ts.) A decision that throws is rolled back; one
 * that loses a race (above) runs again; a connection that fails is StoreUnavailable, and the
 * decision is not answered.
 */
export async function runTransaction<T>(pool: pg.Pool, work: PgWork<T>, begin = "BEGIN"): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const client = await connect(pool);
    let broken: Error | undefined;
    try {
      await client.query(begin);
      const value = await work(client);
      await client.query("COMMIT");
      return value;
    } catch (e) {
      broken = await rollback(client);
      if (!broken && isRetryable(e) && attempt < maxAttempts) continue;
      throw storeError(e);
    } finally {
      client.release(broken);
    }
  }
}
