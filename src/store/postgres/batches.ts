import type pg from "pg";
import type { StreamChange } from "../change-feed.js";
import type { BatchBackend, WorkOutcome } from "../group-commit.js";
import { StoreUnavailable } from "../store.js";
import type { LockedHeads, RecordedChange } from "./changes.js";
import { connect, isRetryable, maxAttempts, namedStatement, rollback, sendTogether, storeError, together, type PgChangeWork, type PgRecordChange, type PgTx, type Statement } from "./transaction.js";

/** What a transaction that records changes needs of the change log (changes.ts). */
export interface ChangeLog {
  lockHeads(t: PgTx, projects: readonly string[], into: LockedHeads): Promise<void>;
  numberChanges(locked: LockedHeads, recorded: readonly RecordedChange[]): { changes: StreamChange[]; statements: Statement[] };
  emit(changes: readonly StreamChange[]): void;
  committed(xid: string | undefined): Promise<boolean>;
  settleLater(changes: readonly StreamChange[], xid: string | undefined): void;
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
  // `marks` is a plain property, not a getter: an object literal with an accessor gets a hidden
  // class of its own per evaluation, which keeps the batch alive past young collections (D57).
  const tx = {
    marks: 0,
    // Counted from when the heads' answer arrived, not from the first decision: a batch prepared
    // ahead waits for its decisions with the heads locked.
    clockMs: (): number => Math.round(locked.nowMs + (performance.now() - locked.atMs)),
    query(text: string, values?: unknown[]) {
      const s = namedStatement(text);
      if (s === undefined || s.writes) tx.marks++;
      const run = s === undefined ? client.query(text, values) : client.query({ name: s.name, text, values: values ?? [] });
      return run.catch((e: unknown) => {
        tx.marks++;
        throw e;
      });
    },
  };
  return tx;
}

/**
 * Decisions of one kind that a batch runs together, in memory (a run of lease decisions, say):
 * what they decide on is read and locked in one statement, each is decided in order against
 * that and what the earlier ones decided, and what they decided is written in one statement.
 * Three round trips however many decisions, where each would take two or three on its own.
 */
export interface SegmentKind<I> {
  /** A segment's state for one run of decisions of `project`. */
  open(project: string): Segment<I>;
}

export interface Segment<I> {
  /** Reads and locks, in one statement, what `items` decide on. */
  load(tx: PgTx, items: readonly I[]): Promise<void>;
  /**
   * Decides one item at `nowMs`, against what is loaded and what the earlier items decided;
   * records its changes (in the batch's project) and returns its result. One that throws must
   * have changed nothing: it is a refusal.
   */
  decide(item: I, nowMs: number, record: (stream: RecordedChange["stream"], body: unknown, atMs: number) => void): unknown;
  /**
   * The statements that write what the items decided, in order. Those of `together` go as one
   * statement with the batch's changes when the segment ends the batch (see transaction.ts
   * together: each writes a table of its own, none has a WITH); `after` run after them.
   */
  flush(): { together: Statement[]; after: Statement[] };
}

/** A decision run in a segment: its kind, and what it decides on. */
export interface SegmentWork<I = unknown> {
  kind: SegmentKind<I>;
  item: I;
}

/** What a project's batches run: decisions that run their own statements, and segment decisions. */
export type BatchWork = PgChangeWork | SegmentWork;

/**
 * A work whose failure cannot be undone without a savepoint: the batch runs again with one per
 * work. Its cause is what the work threw, which the batch reports when it cannot run again.
 */
class NeedsSavepoints extends Error {
  constructor(cause: unknown) {
    super("a decision must be undone alone", { cause });
  }
}

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
 * it is answered, none of it applied (a race there runs the whole batch again). Except a COMMIT
 * whose answer was lost (the connection failed with it sent): the status of its transaction,
 * whose id came with the heads, says whether it committed once it has ended (changes.ts
 * committed), and if it did it is answered as committed.
 */
export function pgBatches(
  pool: pg.Pool,
  project: string,
  log: ChangeLog,
  now: (tx: PgTx) => Promise<number>,
  committed: (works: number) => void,
): BatchBackend<BatchWork> {
  const declared = [project];

  /** A connection with a batch's transaction begun and the project's heads locked. */
  async function open(): Promise<{ client: pg.PoolClient; tx: BatchTx; locked: LockedHeads }> {
    const client = await connect(pool);
    const locked: LockedHeads = { heads: new Map(), nowMs: 0, atMs: 0 };
    const tx = batchTx(client, locked);
    try {
      // Pipelined (the pool's connections are, postgres-store.ts): the head rows' read goes with
      // BEGIN, one round trip for both.
      await sendTogether(client, () => Promise.all([client.query("BEGIN"), log.lockHeads(tx, declared, locked)]));
      return { client, tx, locked };
    } catch (e) {
      client.release(await rollback(client));
      throw e;
    }
  }

  type Opened = Awaited<ReturnType<typeof open>>;
  /** The transaction `prepare` is opening for the next commit: undefined in it when that failed. */
  let opened: Promise<Opened | undefined> | undefined;

  return {
    /**
     * Begins the next batch's transaction and locks the heads before the batch is taken: while
     * another hub's batch holds them, what this hub queues meanwhile joins this batch. It may
     * begin while this hub's batch before is committing (prepareAhead): the head lock then waits
     * in the database for that COMMIT and is granted with it. A failure here is left to commit,
     * which opens again (and retries a lost race).
     * @NOTE decision D84.
     */
    prepare(): Promise<void> {
      const opening = open().catch(() => undefined);
      opened = opening;
      return opening.then(() => undefined);
    },

    /**
     * Only with a connection free for it and nobody waiting for one: the transaction it opens
     * holds its connection, idle, until this batch is done, which must not keep another
     * project's batch from its connection.
     */
    prepareAhead: () => pool.waitingCount === 0 && (pool.idleCount > 0 || pool.totalCount < (pool.options.max ?? 10)),

    /** A prepared transaction no batch will take: rolled back, its connection back in the pool. */
    abandon(): void {
      const opening = opened;
      opened = undefined;
      void opening?.then(async (o) => {
        if (o) o.client.release(await rollback(o.client));
      });
    },

    async commit(works: BatchWork[]): Promise<WorkOutcome[]> {
      let savepoints = false;
      for (let attempt = 1; ; attempt++) {
        // The first time, the transaction prepared for this batch (taken before anything is
        // awaited: a prepare begun later is the next batch's). On a run again, the one prepared
        // ahead for the next batch, if any: it waits on the heads this batch just gave up, and
        // would hold them, idle, until this batch is done, so a transaction opened here would
        // wait behind it for ever. The next batch then opens its own.
        const prepared = opened;
        opened = undefined;
        let begun: Opened;
        try {
          begun = (prepared && (await prepared)) ?? (await open());
        } catch (e) {
          if (isRetryable(e) && attempt < maxAttempts) continue;
          throw storeError(e);
        }
        const { client, tx, locked } = begun;
        let broken: Error | undefined;
        try {
          const outcomes: WorkOutcome[] = [];
          const recorded: RecordedChange[] = [];
          /** Whether a savepoint is open (savepoints are only used around decisions that run their own statements). */
          let inSavepoint = false;
          /** What the last segment writes, when it ends the batch: it goes with the changes. */
          let last: { together: Statement[]; after: Statement[] } = { together: [], after: [] };
          for (let i = 0; i < works.length; ) {
            const work = works[i]!;
            if (typeof work !== "function") {
              let end = i + 1;
              while (end < works.length && (works[end] as SegmentWork).kind === work.kind) end++;
              if (inSavepoint) await client.query("RELEASE SAVEPOINT decision");
              inSavepoint = false;
              const run = await runSegment(tx, project, works.slice(i, end) as SegmentWork[], () => now(tx), recorded);
              outcomes.push(...run.outcomes);
              if (end < works.length) await write(tx, run.writes.together, run.writes.after);
              else last = run.writes;
              i = end;
            } else if (works.length === 1) {
              // Alone, a decision needs no savepoint: what it throws rolls back the transaction.
              const value = await work(tx, recorder(tx, declared, log, locked, recorded));
              outcomes.push({ ok: true, value, wrote: recorded.length > 0 });
              i++;
            } else {
              if (savepoints) await client.query(inSavepoint ? "RELEASE SAVEPOINT decision; SAVEPOINT decision" : "SAVEPOINT decision");
              inSavepoint = savepoints;
              outcomes.push(await runOne(client, tx, work, savepoints, recorder.bind(null, tx, declared, log, locked), recorded));
              i++;
            }
          }
          const { changes, statements } = log.numberChanges(locked, recorded);
          try {
            await write(tx, [...last.together, ...statements], last.after, client);
          } catch (e) {
            // The connection failed with the COMMIT sent: the batch may have committed. Its
            // transaction's status, once it has ended, tells: then it is answered, and its
            // changes go to this hub's listeners (its tail skips what this hub wrote).
            if (changes.length === 0 || !(storeError(e) instanceof StoreUnavailable)) throw e;
            broken = e as Error;
            const known = await log.committed(locked.xid).catch(() => undefined);
            // Not known yet: answered as unavailable, and asked again until it is (settleLater).
            if (known === undefined) log.settleLater(changes, locked.xid);
            if (known !== true) throw e;
            committed(works.length);
            log.emit(changes);
            return outcomes;
          }
          committed(works.length);
          log.emit(changes);
          return outcomes;
        } catch (e) {
          broken ??= await rollback(client);
          if (!broken && e instanceof NeedsSavepoints && !savepoints) {
            savepoints = true;
            attempt--;
            continue;
          }
          const cause = e instanceof NeedsSavepoints ? e.cause : e;
          if (!broken && isRetryable(cause) && attempt < maxAttempts) continue;
          throw storeError(cause);
        } finally {
          client.release(broken);
        }
      }
    },
  };
}

/**
 * Runs `first` as one statement (transaction.ts together), then `after` in order, and then, given
 * the batch's connection, COMMIT: all sent at once (pipelined), one round trip. A statement that
 * fails aborts the transaction, so the ones behind it fail too and the COMMIT only ends it (as a
 * ROLLBACK): this rejects with the first failure, which comes back first.
 */
async function write(tx: PgTx, first: readonly Statement[], after: readonly Statement[], commit?: pg.ClientBase): Promise<void> {
  const one = together(first);
  const send = () => Promise.all([...(one ? [one] : []), ...after].map((st) => tx.query(st.text, st.values)));
  if (commit === undefined) {
    await send();
    return;
  }
  const [, ended] = await sendTogether(commit, () => Promise.all([send(), commit.query("COMMIT")]));
  if (ended.command !== "COMMIT") throw new Error(`the batch's COMMIT ended as ${ended.command}`);
}

/** A run of segment decisions of one kind: loaded, then decided in order at `now()`; their outcomes and what they write. */
async function runSegment(
  tx: PgTx,
  project: string,
  works: readonly SegmentWork[],
  now: () => Promise<number>,
  recorded: RecordedChange[],
): Promise<{ outcomes: WorkOutcome[]; writes: ReturnType<Segment<unknown>["flush"]> }> {
  const segment = works[0]!.kind.open(project);
  await segment.load(
    tx,
    works.map((w) => w.item),
  );
  // Timed once what they decide on is locked: the load may have waited for it.
  const nowMs = await now();
  const outcomes = works.map((w): WorkOutcome => {
    const own: RecordedChange[] = [];
    try {
      const value = segment.decide(w.item, nowMs, (stream, body, atMs) => own.push({ project, stream, body, atMs }));
      recorded.push(...own);
      return { ok: true, value, wrote: own.length > 0 };
    } catch (error) {
      return { ok: false, error };
    }
  });
  return { outcomes, writes: segment.flush() };
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
        if (tx.marks !== marks) throw new NeedsSavepoints(error);
        return { ok: false, error: storeError(error) };
      }
      await client.query("ROLLBACK TO SAVEPOINT decision");
      if (isRetryable(error) && attempt < maxAttempts) continue;
      return { ok: false, error: storeError(error) };
    }
  }
}
