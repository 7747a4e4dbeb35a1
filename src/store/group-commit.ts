/**
 * Group commit, for any store backend: decisions that arrive together share one transaction and
 * one durable commit. Callers submit a unit of work and get a promise for its own outcome; the
 * pipeline gathers what is queued, hands it to the backend as one batch, and settles each promise
 * only once the backend reports the batch durable. Nothing above `store/` sees a batch.
 *
 * Scheduling: the first work queued while the pipeline is idle starts a batch on the next
 * `setImmediate`, so everything that arrives in the same event-loop turn joins it and a lone
 * decision waits for no timer. While a batch is being made durable, new work queues up and
 * forms the next batch (at most `maxBatch` works), which starts right after: the batch size
 * follows the load by itself. A backend that must wait before it can run a batch (PostgreSQL,
 * for its project's locks) prepares first, and the batch is taken from the queue once it has.
 *
 * Answers: all at once, when the batch is durable; those whose work changed something first
 * (in batch order: a change is published in the order it was committed), then the others.
 *
 * Reads: `durable()` is pending while a committed batch is not yet durable. A read that waits
 * for it never shows a decision that a crash could still take back, and since the next batch
 * only starts on a later `setImmediate`, a read that resumes then sees exactly durable state.
 */

import type { CommitStats } from "./store.js";

/** One work's outcome inside a batch: a value, or what it threw (undone on its own). */
export type WorkOutcome = { ok: true; value: unknown; wrote?: boolean } | { ok: false; error: unknown };

export interface BatchBackend<W> {
  /**
   * Runs before a batch's works are taken from the queue (the PostgreSQL backend begins its
   * transaction and waits there for its project's locks; the SQLite one, now and then, for a
   * checkpoint), so that what is queued while it waits joins this batch instead of the next.
   * Undefined: nothing to wait for, the batch starts at once. What it throws fails the works
   * then queued.
   */
  prepare?(): Promise<void> | undefined;
  /**
   * Whether `prepare` may run now, while the batch before is still being committed, for the works
   * that wait for the next one: the PostgreSQL backend's head lock then waits in the database for
   * that batch's COMMIT, and is granted with it, instead of one round trip after it. Asked each
   * time; absent: never.
   */
  prepareAhead?(): boolean;
  /** Undoes a prepare whose batch will never be taken (the pipeline stopped meanwhile). */
  abandon?(): void;
  /**
   * Runs `works` in order inside one transaction, each isolated so that one that throws is undone
   * alone, commits, and resolves with one outcome per work once the commit is durable. Rejects
   * when the batch failed as a whole: then none of it is answered, and none of it stays applied.
   */
  commit(works: W[]): Promise<WorkOutcome[]>;
}

/** The batch's commit could not be made durable: the store stops (see SqliteStore). */
export class DurabilityLost extends Error {
  constructor(message: string, options?: { cause: unknown }) {
    super(message, options);
    this.name = "DurabilityLost";
  }
}

interface Pending<W> {
  work: W;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

export class GroupCommit<W> {
  private queue: Pending<W>[] = [];
  private inFlight: Promise<void> | undefined;
  /** The next batch's prepare, begun while a batch is in flight (BatchBackend.prepareAhead). */
  private ahead: Promise<void> | undefined;
  /** Whether the batch in flight has taken its works yet (until then, what is queued joins it). */
  private taken = false;
  private scheduled = false;
  private drained: (() => void)[] = [];
  private failure: unknown;
  /** Batches committed and the works in them. */
  readonly stats: CommitStats = { commits: 0, works: 0 };

  constructor(
    private readonly backend: BatchBackend<W>,
    private readonly maxBatch = 128,
    /** Called each time nothing is left queued or in flight. */
    private readonly onIdle?: () => void,
  ) {}

  /** Queues one work; resolves with its value (or rejects with its error) once durable. */
  submit<T>(work: W): Promise<T> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ work, resolve: resolve as (v: unknown) => void, reject });
      this.schedule();
    });
  }

  /** Pending while a committed batch is not durable yet; undefined when everything is. */
  durable(): Promise<void> | undefined {
    return this.inFlight;
  }

  /** Why the pipeline stopped (a commit that could not be made durable), if it did. */
  get failed(): unknown {
    return this.failure;
  }

  /** Whether anything is queued, scheduled or in flight. */
  get busy(): boolean {
    return this.inFlight !== undefined || this.queue.length > 0 || this.scheduled;
  }

  /** Resolves when nothing is queued or in flight (close waits on it). */
  idle(): Promise<void> {
    if (!this.inFlight && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.drained.push(resolve));
  }

  private schedule(): void {
    if (this.inFlight) return this.prepareNext();
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  /**
   * Begins the next batch's prepare while one is in flight, when the backend allows it and works
   * wait: they are taken when that batch is done, so every prepare begun is used.
   */
  private prepareNext(): void {
    if (!this.taken || this.ahead || this.queue.length === 0 || this.failure !== undefined || !this.backend.prepareAhead?.()) return;
    let ahead: Promise<void> | undefined;
    try {
      ahead = this.backend.prepare?.();
    } catch (e) {
      ahead = Promise.reject(e);
    }
    if (!ahead) return;
    // Its failure is the next batch's (flush), not an unhandled rejection meanwhile.
    ahead.catch(() => undefined);
    this.ahead = ahead;
  }

  private flush(): void {
    this.scheduled = false;
    if (this.inFlight) return;
    if (this.queue.length === 0) return this.wake();
    const batch: Pending<W>[] = [];
    const take = () => {
      batch.push(...this.queue.splice(0, this.maxBatch));
      this.taken = true;
    };
    const commit = () => {
      take();
      const committing = this.backend.commit(batch.map((p) => p.work));
      // What is still queued (beyond maxBatch) is the next batch's: its prepare can begin.
      this.prepareNext();
      return committing;
    };
    let committed: Promise<WorkOutcome[]>;
    this.taken = false;
    try {
      const ahead = this.ahead;
      this.ahead = undefined;
      const prepared = ahead ?? this.backend.prepare?.();
      committed = prepared
        ? prepared.then(commit, (e: unknown) => {
            take();
            throw e;
          })
        : commit();
    } catch (e) {
      committed = Promise.reject(e);
    }
    this.inFlight = committed.then(
      (outcomes) => {
        this.stats.commits++;
        this.stats.works += batch.length;
        // Decisions that changed something are answered first: others are typically waiting on
        // them (the holder's release before the next grant), while refusals can wait a moment.
        const settle = (p: Pending<W>, o: WorkOutcome) => (o.ok ? p.resolve(o.value) : p.reject(o.error));
        batch.forEach((p, i) => {
          const o = outcomes[i]!;
          if (o.ok && o.wrote) settle(p, o);
        });
        batch.forEach((p, i) => {
          const o = outcomes[i]!;
          if (!(o.ok && o.wrote)) settle(p, o);
        });
      },
      (error: unknown) => {
        if (error instanceof DurabilityLost) this.stop(error);
        for (const p of batch) p.reject(error);
      },
    );
    void this.inFlight.then(() => {
      this.inFlight = undefined;
      if (this.queue.length > 0) this.schedule();
      else this.wake();
    });
  }

  /** After a lost commit nothing more is accepted: what is queued fails with the same error. */
  private stop(error: unknown): void {
    this.failure = error;
    for (const p of this.queue.splice(0)) p.reject(error);
    if (this.ahead) {
      this.ahead = undefined;
      this.backend.abandon?.();
    }
  }

  private wake(): void {
    for (const resolve of this.drained.splice(0)) resolve();
    this.onIdle?.();
  }
}
