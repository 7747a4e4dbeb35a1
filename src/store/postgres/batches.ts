import type pg from "pg";
import type { StreamChange } from "../change-feed.js";
import type { BatchBackend, WorkOutcome } from "../group-commit.js";
import { isRetryable, maxAttempts, storeError, type PgChangeWork, type PgRecordChange, type PgTx } from "./transaction.js";

/** What a batch needs of the change log (changes.ts). */
export interface BatchChangeLog {
  lockHeads(t: PgTx, projects: readonly string[]): Promise<void>;
  append(t: PgTx, project: string, stream: StreamChange["stream"], body: unknown, atMs: number): Promise<StreamChange>;
  emit(changes: readonly StreamChange[]): void;
}

/**
 * `record` for a decision that declared `projects`: numbers and stores the change in `t` and keeps
 * it in `into`. A change in a project it did not declare is a bug that throws (that head is not
 * locked first), except in a decision that declared none: one on a row that does not exist yet
 * (an agent created by id), which locks nothing another transaction waits for but that new
 * row, locks the heads of the project it records in when it records.
 */
export function recorder(t: PgTx, projects: readonly string[], log: BatchChangeLog, into: StreamChange[]): PgRecordChange {
  const late: string[] = [];
  return async (project, stream, body, atMs) => {
    if (!projects.includes(project) && !late.includes(project)) {
      if (projects.length > 0) throw new Error(`a decision recorded a change in project ${JSON.stringify(project)}, which it did not declare`);
      await log.lockHeads(t, [project]);
      late.push(project);
    }
    into.push(await log.append(t, project, stream, body, atMs));
  };
}

/**
 * The PostgreSQL half of group commit (store/group-commit.ts) for the decisions of one project
 * on one hub: one transaction per batch on one pooled connection, which first locks the
 * project's head rows (so batches of several hubs take turns on them and never deadlock, see
 * changes.ts lockHeads), runs each decision in a savepoint (one that throws is rolled back
 * alone; one that lost a race runs again in it, on what is committed by then), and commits once:
 * the decisions share one turn of the heads and one WAL flush. The changes are handed to the
 * listeners in batch order once the COMMIT has returned. A batch whose connection fails, or
 * whose head lock or COMMIT fails, is rejected whole: none of it is answered, none of it applied
 * (a race there runs the whole batch again).
 */
export function pgBatches(pool: pg.Pool, project: string, log: BatchChangeLog, committed: (works: number) => void): BatchBackend<PgChangeWork> {
  const declared = [project];
  return {
    async commit(works: PgChangeWork[]): Promise<WorkOutcome[]> {
      for (let attempt = 1; ; attempt++) {
        let client: pg.PoolClient;
        try {
          client = await pool.connect();
        } catch (e) {
          throw storeError(e);
        }
        let broken: Error | undefined;
        const tx = prepared(client);
        try {
          await client.query("BEGIN");
          await log.lockHeads(client, declared);
          const outcomes: WorkOutcome[] = [];
          const changes: StreamChange[] = [];
          if (works.length === 1) {
            // Alone, a decision needs no savepoint: what it throws rolls back the transaction.
            const value = await works[0]!(tx, recorder(tx, declared, log, changes));
            outcomes.push({ ok: true, value, wrote: changes.length > 0 });
          } else {
            for (const [i, work] of works.entries()) {
              await client.query(i === 0 ? "SAVEPOINT decision" : "RELEASE SAVEPOINT decision; SAVEPOINT decision");
              outcomes.push(await inSavepoint(client, tx, work, declared, log, changes));
            }
          }
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
          if (!broken && isRetryable(e) && attempt < maxAttempts) continue;
          throw storeError(e);
        } finally {
          client.release(broken);
        }
      }
    },
  };
}

/** Each statement's name on every connection: the same text is parsed and planned once per connection. */
const names = new Map<string, string>();

/**
 * `client` running each statement as a named prepared statement, so PostgreSQL parses and plans
 * it once per connection instead of at every run (the decisions' statements are a fixed set).
 */
export function prepared(client: pg.ClientBase): PgTx {
  return {
    query: (text, values) => {
      let name = names.get(text);
      if (name === undefined) names.set(text, (name = `kxm_${names.size + 1}`));
      return client.query({ name, text, values: values ?? [] });
    },
  };
}

/**
 * One decision inside the batch's open savepoint: its outcome, its changes added to `changes`.
 * What it throws is rolled back to the savepoint (and the decision runs again when it lost a
 * race); a savepoint that cannot be rolled back fails the batch.
 */
async function inSavepoint(client: pg.PoolClient, tx: PgTx, work: PgChangeWork, declared: readonly string[], log: BatchChangeLog, changes: StreamChange[]): Promise<WorkOutcome> {
  for (let attempt = 1; ; attempt++) {
    const own: StreamChange[] = [];
    try {
      const value = await work(tx, recorder(tx, declared, log, own));
      changes.push(...own);
      return { ok: true, value, wrote: own.length > 0 };
    } catch (error) {
      await client.query("ROLLBACK TO SAVEPOINT decision");
      if (isRetryable(error) && attempt < maxAttempts) continue;
      return { ok: false, error: storeError(error) };
    }
  }
}
