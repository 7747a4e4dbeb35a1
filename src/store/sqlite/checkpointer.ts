import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/**
 * WAL checkpoints off the event loop. SQLite's automatic checkpoint runs inside the COMMIT that
 * crosses 1,000 WAL pages: it copies those pages into the database and syncs both files while
 * the hub's one thread waits (tens of milliseconds under load, the tail of every latency). The
 * store turns it off (`wal_autocheckpoint = 0`) and asks this worker thread instead, which holds
 * its own connection to the same file and runs PASSIVE checkpoints: they never block the hub's
 * writes, copy only frames no reader still needs, and sync the WAL before and the database after
 * copying (`synchronous=NORMAL`), so SQLite restarts the WAL only over frames safely in the
 * database. The worker starts on the first request and ends with the store.
 *
 * Under sustained writes a PASSIVE checkpoint in another thread never sees the WAL's end (the hub
 * appends while it copies), so SQLite never gets to restart the WAL and the file would grow
 * without bound. Once the worker reports more than `restartFrames` frames (`restartDue`), the
 * store holds its next batch back until the worker has run one more checkpoint (`fold`): nothing
 * is appended meanwhile, so that one reaches the WAL's end, and the batch's write restarts the
 * WAL from its start. The worker has already copied nearly everything, so the hold is one
 * checkpoint of the last frames and its syncs (1-3 ms), during which the hub's thread goes on
 * serving: calls are read, checked and queued, and join the held batch (D58).
 */

/** The worker's code: a script, so it needs no TypeScript loader. */
const workerSource = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
db.pragma("busy_timeout = 5000");
db.pragma("synchronous = NORMAL");
db.pragma("wal_autocheckpoint = 0");
parentPort.on("message", (m) => {
  if (m === "close") {
    db.close();
    parentPort.close();
    return;
  }
  try {
    const [r] = db.pragma("wal_checkpoint(PASSIVE)");
    parentPort.postMessage({ ok: true, busy: r.busy, log: r.log, checkpointed: r.checkpointed });
  } catch (e) {
    parentPort.postMessage({ ok: false, error: String(e && e.message || e) });
  }
});
`;

const driverPath = createRequire(import.meta.url).resolve("better-sqlite3");

/** A checkpoint's outcome: WAL frames, and how many of them are in the database now. */
export type CheckpointResult = { ok: true; busy: number; log: number; checkpointed: number } | { ok: false; error: string };

/** Batches committed before a checkpoint is asked for (about SQLite's own 1,000 pages). */
const commitsPerCheckpoint = 200;
/** A checkpoint is also asked for when this long has passed since the last one, if anything was committed. */
const maxCheckpointGapMs = 1_000;
/** WAL frames (4 KiB pages) above which the store folds the WAL back (below). */
export const defaultRestartFrames = 4_096;

export class Checkpointer {
  private worker: Worker | undefined;
  private inFlight = false;
  private commits = 0;
  private lastAtMs = performance.now();
  private closed = false;
  /** Folds waiting for a checkpoint that starts after they asked, and those the running one answers. */
  private asked: (() => void)[] = [];
  private answering: (() => void)[] = [];
  /** The last report answered a fold: it says nothing of the WAL the next write restarts. */
  private folded = false;
  /** The last checkpoint's outcome (tests, diagnostics). */
  last: CheckpointResult | undefined;

  constructor(
    private readonly file: string,
    private readonly restartFrames = defaultRestartFrames,
    /** Starts the worker (tests give one that cannot start). */
    private readonly startWorker: (file: string) => Worker = (file) => new Worker(workerSource, { eval: true, workerData: { file, driver: driverPath } }),
  ) {}

  /** True when the worker last reported a WAL past `restartFrames`, and no fold came since. */
  restartDue(): boolean {
    return !this.folded && this.last?.ok === true && this.last.log >= this.restartFrames;
  }

  /**
   * Resolves once the worker has run a checkpoint that started after this call: with nothing
   * written meanwhile (the store holds its next batch until then), it copied the whole WAL.
   * Never rejects: a checkpoint that failed leaves the WAL to grow, as it would have anyway.
   */
  fold(): Promise<void> {
    return new Promise((resolve) => {
      this.asked.push(resolve);
      try {
        // The process stays up for it, as for close(): the worker is otherwise unref'd.
        this.ensureWorker().ref();
      } catch (e) {
        // No worker can start (a thread limit, memory): what waits is answered, the WAL grows.
        this.answering.push(...this.asked.splice(0));
        this.reported({ ok: false, error: (e as Error).message });
        return;
      }
      if (!this.inFlight) this.request();
    });
  }

  /** Called after each batch that wrote: asks for a checkpoint when one is due and none runs. */
  committed(): void {
    this.commits++;
    if (this.inFlight || this.closed) return;
    if (this.commits < commitsPerCheckpoint && performance.now() - this.lastAtMs < maxCheckpointGapMs) return;
    this.request();
  }

  private request(): void {
    this.inFlight = true;
    this.commits = 0;
    this.lastAtMs = performance.now();
    this.answering = this.asked;
    this.asked = [];
    try {
      this.ensureWorker().postMessage("checkpoint");
    } catch (e) {
      // No worker can start: this checkpoint ends as failed, and the next commit asks again.
      this.reported({ ok: false, error: (e as Error).message });
    }
  }

  /** A checkpoint ended (or the worker did): answers the folds it covered, starts the next one asked. */
  private reported(r: CheckpointResult): void {
    this.last = r;
    this.inFlight = false;
    const answered = this.answering;
    this.answering = [];
    this.folded = answered.length > 0;
    for (const resolve of answered) resolve();
    if (this.asked.length > 0 && !this.closed) this.request();
    else if (this.worker) this.worker.unref();
  }

  private ensureWorker(): Worker {
    if (this.worker) return this.worker;
    const worker = this.startWorker(this.file);
    worker.unref();
    worker.on("message", (r: CheckpointResult) => this.reported(r));
    // A worker that fails, or ends when not asked to, answers what waits on it: a checkpoint
    // that cannot run leaves the WAL to grow (SQLite checkpoints at close), it never holds a batch.
    const lost = (error: string) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.answering.push(...this.asked.splice(0));
      this.reported({ ok: false, error });
    };
    worker.on("error", (e) => lost(e.message));
    worker.on("exit", (code) => lost(`the checkpoint worker ended (exit code ${code})`));
    this.worker = worker;
    return worker;
  }

  /** Stops the worker (after its checkpoint, if one runs). */
  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    if (!worker) return;
    this.worker = undefined;
    // Held (ref) while it finishes, or a process with nothing else left to do would exit first.
    worker.ref();
    await new Promise<void>((resolve) => {
      worker.once("exit", () => resolve());
      worker.postMessage("close");
    });
  }
}
