import type pg from "pg";
import type { StreamChange } from "../change-feed.js";
import type { BatchBackend, WorkOutcome } from "../group-commit.js";
import type { LockedHeads, RecordedChange } from "./changes.js";
import { isRetryable, maxAttempts, storeError, type PgChangeWork, type PgRecordChange, type PgTx } from "./transaction.js";

/** What a transaction that records changes needs of the change log (changes.ts). */
export interface ChangeLog {
  lockHeads(t: PgTx, projects: readonly string[], into: LockedHeads): Promise<void>;
  writeChanges(t: PgTx, locked: LockedHeads, recorded: readonly RecordedChange[]): Promise<StreamChange[]>;
  emit(changes: readonly StreamChange[]): void;
}

/**
 * `record` for a decision that declared `projects` and holds their heads (`locked`): keeps the
 * change in `into`, to be numbered and stored at the end of its transaction. A change in a
 * project it did not declare is a bug that throws (that head is not locked first), except in a
 * decision that declared none: one on a row that does not exist yet (an agent created by id),
 * which locks nothing another transaction waits for but that new row, locks the heads of the
 * project it records in when it records.
 */
export function recorder(t: PgTx, projects: readonly string[], log: ChangeLog, locked: LockedHeads, into: RecordedChange[]): PgRecordChange {
  const late: string[] = [];
  return async (project, stream, body, atMs) => {
    if (!projects.includes(project) && !late.includes(project)) {
      if (projects.length > 0) throw new Error(`a decision recorded a change in project ${JSON.stringify(project)}, which it did not declare`);
      await log.lockHeads(t, [project], locked);
      late.push(project);
    }
    into.push({ project, stream, atMs, body });
  };
}

/** Each statement's name on every connection, and whether it may write. */
const statements = new Map<string, { name: string; writes: boolean }>();
/** Beyond this many texts, statements run unnamed (a safeguard: the decisions' statements are a fixed set). */
const maxNamed = 512;

/**
 * A connection inside a batch: runs each statement as a named prepared statement, so PostgreSQL
 * parses and plans it once per connection instead of at every run; counts the statements that
 * may have written or that failed (a failed one aborts the transaction); and gives the decisions
 * their time (`clockMs`), the database's clock read when the heads were locked, advanced by
 * this process's monotonic clock.
 */
export interface BatchTx extends PgTx {
  /** Statements that may have written, or failed, so far. */
  readonly marks: number;
}

function batchTx(client: pg.ClientBase, locked: LockedHeads): BatchTx {
  let marks = 0;
  let lockedAt = performance.now();
  let lockedMs = Number.NaN;
  const tx = {
    get marks() {
      return marks;
    },
    clockMs(): number {
      if (lockedMs !== locked.nowMs) [lockedMs, lockedAt] = [locked.nowMs, performance.now()];
      return Math.round(lockedMs + (performance.now() - lockedAt));
    },
    query(text: string, values?: unknown[]) {
      let s = statements.get(text);
      if (s === undefined && statements.size < maxNamed) statements.set(text, (s = { name: `kxm_${statements.size + 1}`, writes: !/^\s*SELECT\b/i.test(text) }));
      if (s === undefined || s.writes) marks++;
      const run = s === undefined ? client.query(text, values) : client.query({ name: s.name, text, values: values ?? [] });
      return run.catch((e: unknown) => {
        marks++;
        throw e;
      });
    },
  };
  return tx as BatchTx;
}

/** A work whose failure cannot be undone without a savepoint: the batch runs again with one per work. */
class NeedsSavepoints extends Error {}

/**
 * The PostgreSQL half of group commit (store/group-commit.ts) for the decisions of one project
 * on one hub: one transaction per batch on one pooled connection.
 * - It first locks the project's head rows (so batches of several hubs take turns on them and
 *   never deadlock, see changes.ts lockHeads) and reads the database's clock with them.
 * - Each decision runs in order. One that throws before it wrote anything (a refusal) changed
 *   nothing and needs no undo. One that throws after a write, or whose statement failed, is
 *   undone by running the batch again with a savepoint per decision (at most once per batch):
 *   there one that throws is rolled back alone, and one that lost a race runs again in it, on
 *   what is committed by then.
 * - The changes of the decisions that succeeded are numbered and stored in one statement, then
 *   the batch commits once: the decisions share one turn of the heads and one WAL flush. The
 *   changes are handed to the listeners in batch order once the COMMIT has returned.
 * A batch whose connection fails, or whose head lock or COMMIT fails, is rejected whole: none of
 * it is answered, none of it applied (a race there runs the whole batch again).
 */
export function pgBatches(pool: pg.Pool, project: string, log: ChangeLog, committed: (works: number) => void): BatchBackend<PgChangeWork> {
  const declared = [project];
  return {
    async commit(works: PgChangeWork[]): Promise<WorkOutcome[]> {
      let savepoints = false;
      for (let attempt = 1; ; attempt++) {
        let client: pg.PoolClient;
        try {
          client = await pool.connect();
        } catch (e) {
          throw storeError(e);
        }
        let broken: Error | undefined;
        const locked: LockedHeads = { heads: new Map(), nowMs: 0 };
        const tx = batchTx(client, locked);
        try {
          await client.query("BEGIN");
          await log.lockHeads(tx, declared, locked);
          const outcomes: WorkOutcome[] = [];
          const recorded: RecordedChange[] = [];
          if (works.length === 1) {
            // Alone, a decision needs no savepoint: what it throws rolls back the transaction.
            const value = await works[0]!(tx, recorder(tx, declared, log, locked, recorded));
            outcomes.push({ ok: true, value, wrote: recorded.length > 0 });
          } else {
            for (const [i, work] of works.entries()) {
              if (savepoints) await client.query(i === 0 ? "SAVEPOINT decision" : "RELEASE SAVEPOINT decision; SAVEPOINT decision");
              outcomes.push(await runOne(client, tx, work, savepoints, recorder.bind(null, tx, declared, log, locked), recorded));
            }
          }
          const changes = await log.writeChanges(tx, locked, recorded);
          await client.query("COMMIT");
          committed(works.length);
          log.emit(changes);
          return outcomes;
        } catch (e) {
          try {
            await client.query("ROLLBACK");
          } catch (rollback) {
            broken = rollback as Error; // the connection is gone: it is not handed out again
          }
          if (!broken && e instanceof NeedsSavepoints && !savepoints) {
            savepoints = true;
            attempt--;
            continue;
          }
          if (!broken && isRetryable(e) && attempt < maxAttempts) continue;
          throw storeError(e);
        } finally {
          client.release(broken);
        }
      }
    },
  };
}

/**
 * One decision of a batch: its outcome, its changes added to `recorded`. Without savepoints, one
 * that throws after a write or a failed statement throws NeedsSavepoints; inside its savepoint,
 * what it throws is rolled back (and the decision runs again when it lost a race), and a
 * savepoint that cannot be rolled back fails the batch.
 */
async function runOne(
  client: pg.PoolClient,
  tx: BatchTx,
  work: PgChangeWork,
  savepoint: boolean,
  recordInto: (into: RecordedChange[]) => PgRecordChange,
  recorded: RecordedChange[],
): Promise<WorkOutcome> {
  for (let attempt = 1; ; attempt++) {
    const own: RecordedChange[] = [];
    const marks = tx.marks;
    try {
      const value = await work(tx, recordInto(own));
      recorded.push(...own);
      return { ok: true, value, wrote: own.length > 0 };
    } catch (error) {
      if (!savepoint) {
        if (tx.marks !== marks) throw new NeedsSavepoints();
        return { ok: false, error: storeError(error) };
      }
      await client.query("ROLLBACK TO SAVEPOINT decision");
      if (isRetryable(error) && attempt < maxAttempts) continue;
      return { ok: false, error: storeError(error) };
    }
  }
}
