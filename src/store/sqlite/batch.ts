import fs from "node:fs";
import path from "node:path";
import type Database from "better-sqlite3";
import { DurabilityLost, type BatchBackend, type WorkOutcome } from "../group-commit.js";
import { StoreUnavailable } from "../store.js";
import type { ChangeStream } from "../change-feed.js";

/**
 * A decision's body: synchronous statements on the store's connection, returning its result.
 * A `plain` one makes every check before its first write, so that only a statement that fails
 * can stop it once it has written: it runs without a savepoint of its own (sqliteBatches).
 */
export type Work = (() => unknown) & { plain?: true };

/**
 * Numbers and stores one change of a project's stream, inside the decision; `text` is the body
 * as JSON when the decision wrote it already (a plain work writes it before its first write).
 */
export type RecordChange = (project: string, stream: ChangeStream, body: unknown, atMs: number, text?: string) => void;

/** How the store's concerns (agents.ts, leases.ts, messages.ts, ...) run their statements. */
export interface StoreAccess {
  /** One decision of the next batch; resolves once the batch is durable. */
  tx<T>(fn: () => T): Promise<T>;
  /**
   * One decision that may record changes for watchers (`record`, in its savepoint); they are
   * handed to the change listeners once it is durable. `plain`: see Work.
   */
  changeTx<T>(fn: (record: RecordChange) => T, plain?: true): Promise<T>;
  /** A read, once every commit made so far is durable. */
  read<T>(fn: () => T): Promise<T>;
  /**
   * A read of what is committed, durable or not yet (for a success only: a refusal read here is
   * confirmed with `read`).
   */
  peek<T>(fn: () => T): Promise<T>;
  /** The time of a decision (the store's clock). */
  now(): number;
  /** The newest number of a project's stream, inside the caller's read or decision (changes.ts). */
  head(project: string, stream: ChangeStream): number;
}

/**
 * Makes what the WAL holds durable. The default is `fdatasync` of the `-wal` file on libuv's
 * thread pool, so the event loop never waits on the disk; tests pass their own to hold a batch
 * between its commit and its durability.
 */
export interface WalSync {
  sync(): Promise<void>;
  close(): void;
}

/**
 * The `-wal` file's fdatasync. The connection runs `synchronous=NORMAL` (a commit writes the WAL
 * without syncing it; a checkpoint syncs the WAL before and the database after copying), and
 * this sync after each batch's COMMIT supplies what FULL would have done at that commit: when it
 * resolves, every frame of the batch is on disk. The directory is synced once, so the WAL's
 * own name is durable too.
 */
export function fdatasyncWal(file: string): WalSync {
  const wal = `${file}-wal`;
  const fd = fs.openSync(wal, "r");
  const dir = fs.openSync(path.dirname(path.resolve(wal)), "r");
  try {
    fs.fsyncSync(dir);
  } finally {
    fs.closeSync(dir);
  }
  return {
    sync: () => new Promise((resolve, reject) => fs.fdatasync(fd, (e) => (e ? reject(e) : resolve()))),
    close: () => fs.closeSync(fd),
  };
}

/**
 * The SQLite half of group commit (store/group-commit.ts): one IMMEDIATE transaction per batch,
 * a savepoint per work so one that throws is rolled back alone, one COMMIT, then the WAL sync.
 * A plain work (a lease decision) has no savepoint: one that throws before it wrote left nothing
 * to undo, and one that throws after (a statement failed: a full disk, a bug) takes the whole
 * batch with it, rolled back, each of its works failing with that error; the savepoint and its
 * release were about 2% of the hub's thread per lease cycle (bench/steps.md, fourteenth step).
 * A batch that wrote nothing (only refusals and reads) skips the sync: what it saw was made
 * durable before it started, since batches never overlap.
 */
/** What the store's checkpoints need to hear from the batches (checkpointer.ts). */
export interface BatchHooks {
  /**
   * Before a batch begins, with no transaction open: a promise holds the batch back until it
   * settles (the works queued meanwhile join it), undefined lets it start at once.
   */
  beforeBatch(): Promise<void> | undefined;
  /** After each COMMIT that wrote something. */
  wrote(): void;
  /** A work starts (in its savepoint, unless it is plain). */
  workStarted?(): void;
  /** A work threw and its savepoint was rolled back; `wrote`: a statement of it had changed rows. */
  workRolledBack?(wrote: boolean): void;
  /** Every work is done; the batch's last writes go here, inside its transaction. */
  beforeCommit?(): void;
  /** The batch's transaction was rolled back: nothing of it is in the file. */
  batchRolledBack?(): void;
  /** A write failed for want of the file (full, read-only, an I/O error); `wrote` tells it is over. */
  unwritable?(): void;
  /**
   * Before each batch: why the file written is no longer the one the store's path names (removed
   * or replaced while the hub ran), or undefined while it is. A batch then fails, and the store
   * stops, as after a lost sync: what it wrote would not be there after a restart.
   */
  fileLost?(): string | undefined;
}

/**
 * Counts the statements of the connection that changed rows, so that a batch tells the works
 * that wrote from the refusals without asking SQLite after each one (`SELECT total_changes()`
 * cost about 2 us a work). Wraps `prepare` from now on: a statement that is not read-only counts
 * a run() that changed rows (better-sqlite3 reports 0 changes when SQLite's total did not move)
 * and any get(), all() or iterate() (UPDATE ... RETURNING), whatever it returned. The
 * order of answers rests on it, and what a plain work that throws leaves behind (every statement
 * of the store's concerns is prepared after this wrap, sqlite-store.ts); whether a batch is
 * synced rests on total_changes() itself.
 */
export function countWrites(db: Database.Database): { readonly count: number } {
  const counter = { count: 0 };
  const prepare = db.prepare.bind(db) as (sql: string) => Database.Statement;
  (db as { prepare: (sql: string) => Database.Statement }).prepare = (sql: string) => {
    const statement = prepare(sql);
    // A statement that may write: INSERT, UPDATE, DELETE, with or without RETURNING (a reader too).
    if (statement.readonly) return statement;
    const run = statement.run.bind(statement);
    statement.run = (...params: unknown[]) => {
      const info = run(...params);
      if (info.changes > 0) counter.count++;
      return info;
    };
    for (const verb of ["get", "all", "iterate"] as const) {
      const read = (statement[verb] as (...p: unknown[]) => unknown).bind(statement);
      (statement as unknown as Record<string, unknown>)[verb] = (...params: unknown[]) => {
        counter.count++;
        return read(...params);
      };
    }
    return statement;
  };
  return counter;
}

export function sqliteBatches(
  db: Database.Database,
  walSync: () => WalSync | undefined,
  hooks: BatchHooks = { beforeBatch: () => undefined, wrote() {} },
): BatchBackend<Work> {
  /**
   * A write SQLite could not make for want of its file (a full disk, a read-only one, an I/O
   * error) is the store being away, as a PostgreSQL hub's unreachable database is: the decision
   * was rolled back, so a retry is safe (store_unavailable, 503), not internal_error.
   */
  const unwritten = (error: unknown): unknown => {
    const code = (error as { code?: unknown } | undefined)?.code;
    if (typeof code !== "string" || !/^SQLITE_(FULL|IOERR|READONLY|CANTOPEN)/.test(code)) return error;
    hooks.unwritable?.();
    return new StoreUnavailable(`the database cannot be written: ${(error as Error).message}`, { cause: error });
  };
  const writes = countWrites(db);
  const s = {
    begin: db.prepare("BEGIN IMMEDIATE"),
    commit: db.prepare("COMMIT"),
    rollback: db.prepare("ROLLBACK"),
    savepoint: db.prepare("SAVEPOINT decision"),
    release: db.prepare("RELEASE decision"),
    rollbackTo: db.prepare("ROLLBACK TO decision"),
    changes: db.prepare<[], { n: number }>("SELECT total_changes() AS n"),
  };
  return {
    prepare: () => hooks.beforeBatch(),
    commit(works: Work[]): Promise<WorkOutcome[]> {
      const outcomes: WorkOutcome[] = [];
      // total_changes() counts every row a statement changed, kept or rolled back: read before
      // and after the batch, it says whether the batch wrote (and so needs the WAL synced).
      const lost = hooks.fileLost?.();
      if (lost !== undefined) return Promise.reject(new DurabilityLost(lost));
      const before = s.changes.get()!.n;
      let changed: boolean;
      s.begin.run();
      try {
        for (const work of works) {
          const plain = work.plain === true;
          if (!plain) s.savepoint.run();
          hooks.workStarted?.();
          const seen = writes.count;
          try {
            const value = work();
            const wrote = writes.count !== seen;
            if (!plain) s.release.run();
            outcomes.push({ ok: true, value, wrote });
          } catch (error) {
            // SQLite ends the whole transaction on some errors (disk full, I/O): then the batch fails.
            if (!db.inTransaction) throw error;
            if (plain) {
              // Half written, with no savepoint to go back to: the batch goes as a whole.
              if (writes.count !== seen) throw error;
              outcomes.push({ ok: false, error: unwritten(error) });
              continue;
            }
            s.rollbackTo.run();
            s.release.run();
            hooks.workRolledBack?.(writes.count !== seen);
            outcomes.push({ ok: false, error: unwritten(error) });
          }
        }
        hooks.beforeCommit?.();
        changed = s.changes.get()!.n !== before;
        s.commit.run();
      } catch (error) {
        if (db.inTransaction) s.rollback.run();
        hooks.batchRolledBack?.();
        return Promise.reject(unwritten(error));
      }
      // Committed from here on: nothing may fail the batch as if it had not been. A checkpoint
      // that cannot be asked for leaves the WAL to grow (it never holds a batch); a WAL that
      // cannot be synced loses durability, which stops the store.
      if (changed) {
        try {
          hooks.wrote();
        } catch {
          // the checkpointer answers its own failures (checkpointer.ts)
        }
      }
      let sync: ReturnType<typeof walSync> | undefined;
      try {
        sync = changed ? walSync() : undefined;
      } catch (e) {
        return Promise.reject(new DurabilityLost(`the WAL could not be synced: ${(e as Error).message}`, { cause: e }));
      }
      if (!sync) return Promise.resolve(outcomes);
      return sync.sync().then(
        () => outcomes,
        (e: unknown) => {
          // The commit is in the page cache but may never reach the disk: nothing of it may be
          // answered, and the store stops rather than build on it.
          throw new DurabilityLost(`the WAL could not be synced: ${(e as Error).message}`, { cause: e });
        },
      );
    },
  };
}
