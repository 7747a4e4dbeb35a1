import fs from "node:fs";
import path from "node:path";

/**
 * The repository's own memory of fencing tokens: `<GIT_DIR>/kxm-fences.json`, the highest token
 * `kxm-hub guard git` has accepted for each lease, so a hub restored from an older backup (whose
 * token counter went back) cannot admit an older writer again. Tokens only grow here.
 *
 * Read, checked and written under `<GIT_DIR>/kxm-fences.json.lock`, created exclusively (O_EXCL):
 * two concurrent pushes cannot both pass on the same stale read. The file is replaced whole
 * (written to a temporary file, fsynced, renamed over), so a reader sees the old or the new record,
 * never half of one.
 */

export const recordFileName = "kxm-fences.json";

/** What one lease's entry keeps: its highest accepted token and the ref that carried it. */
export interface AcceptedFence {
  fencingToken: number;
  ref: string;
}

/** The record: project -> lease name -> highest accepted token. */
export interface FenceRecord {
  version: 1;
  projects: Record<string, Record<string, AcceptedFence>>;
}

/** The record cannot be read, written or locked: the guard refuses the push (fails closed). */
export class RecordError extends Error {
  constructor(
    readonly code: "fence_record_unreadable" | "fence_record_busy",
    message: string,
  ) {
    super(message);
    this.name = "RecordError";
  }
}

/** How long a push waits for another push's lock: its hub calls are bounded by 10 s each. */
const lockWaitMs = 30_000;
const lockRetryMs = 25;

const isRunning = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
};

/** The signals a push's hook can be ended by and still let its lock go (git's, a terminal's, lease run's). */
const endingSignals = ["SIGTERM", "SIGINT", "SIGHUP"] as const;

/**
 * Takes the lock file, waiting for a running push to finish with it. Throws fence_record_busy when
 * it stays taken past lockWaitMs, or at once when the process that took it is gone: it died
 * holding it, and an operator removes the file (breaking it automatically would race with another
 * push doing the same). So while it holds the lock, a signal that would end the hook (a push
 * interrupted, `lease run` ending its command's group) lets the lock go first, then ends it as
 * that signal does; only an uncatchable end (SIGKILL) leaves the file behind.
 */
async function lock(lockPath: string): Promise<() => void> {
  const deadline = performance.now() + lockWaitMs;
  for (;;) {
    try {
      const fd = fs.openSync(lockPath, "wx", 0o600);
      const unlock = () => {
        for (const signal of endingSignals) process.off(signal, onSignal);
        fs.rmSync(lockPath, { force: true });
      };
      const onSignal = (signal: NodeJS.Signals) => {
        unlock();
        process.kill(process.pid, signal);
      };
      for (const signal of endingSignals) process.once(signal, onSignal);
      fs.writeSync(fd, `${process.pid}\n`);
      fs.closeSync(fd);
      return unlock;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw new RecordError("fence_record_unreadable", `cannot create ${lockPath}: ${(e as Error).message}`);
    }
    let holder = NaN;
    try {
      holder = Number.parseInt(fs.readFileSync(lockPath, "utf8"), 10);
    } catch {
      // Removed or still being written: try again.
    }
    if (Number.isSafeInteger(holder) && holder > 0 && !isRunning(holder)) {
      throw new RecordError("fence_record_busy", `${lockPath} was left by process ${holder}, which is gone; remove the file once no push is running`);
    }
    if (performance.now() > deadline) {
      throw new RecordError("fence_record_busy", `${lockPath} is held by process ${Number.isNaN(holder) ? "?" : holder} for over ${lockWaitMs / 1000} s; try again`);
    }
    await new Promise((r) => setTimeout(r, lockRetryMs));
  }
}

function read(file: string): FenceRecord {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return { version: 1, projects: {} };
    throw new RecordError("fence_record_unreadable", `cannot read ${file}: ${(e as Error).message}`);
  }
  try {
    const record = JSON.parse(text) as FenceRecord;
    if (record.version !== 1 || !isObject(record.projects)) throw new Error("not a version 1 record");
    // Every entry is read as it was written, or the record is unreadable: an entry taken for no
    // floor would let a lower token in and be overwritten with it.
    for (const [project, leases] of Object.entries(record.projects)) {
      if (!isObject(leases)) throw new Error(`project ${JSON.stringify(project)} is not an object of leases`);
      for (const [lease, entry] of Object.entries(leases)) {
        const e = entry as Partial<AcceptedFence> | null;
        if (!isObject(e) || !Number.isSafeInteger(e.fencingToken) || e.fencingToken! < 1 || typeof e.ref !== "string") {
          throw new Error(`the entry of lease ${JSON.stringify(lease)} is not {fencingToken, ref}`);
        }
      }
    }
    return record;
  } catch (e) {
    throw new RecordError("fence_record_unreadable", `${file} is not a fence record (${(e as Error).message}); fix or remove it`);
  }
}

function write(file: string, record: FenceRecord): void {
  const temp = `${file}.${process.pid}.tmp`;
  try {
    const fd = fs.openSync(temp, "w", 0o644);
    try {
      fs.writeSync(fd, `${JSON.stringify(record, null, 2)}\n`);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(temp, file);
    // The rename is durable once the directory is: a crash must not bring back the older floor.
    const dir = fs.openSync(path.dirname(file), "r");
    try {
      fs.fsyncSync(dir);
    } finally {
      fs.closeSync(dir);
    }
  } catch (e) {
    fs.rmSync(temp, { force: true });
    throw new RecordError("fence_record_unreadable", `cannot write ${file}: ${(e as Error).message}`);
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** `o[key]` when `o` has it as its own property: a lease or project named `__proto__` is a name like any other. */
const own = <T>(o: Record<string, T> | undefined, key: string): T | undefined => (o !== undefined && Object.hasOwn(o, key) ? o[key] : undefined);

/** The highest token accepted for `lease` of `project`, 0 when none was. */
export const acceptedToken = (record: FenceRecord, project: string, lease: string): number => own(own(record.projects, project), lease)?.fencingToken ?? 0;

/** A copy of `record` with `entry` as `lease`'s of `project` (defined as own properties, whatever the names). */
export function withAccepted(record: FenceRecord, project: string, lease: string, entry: AcceptedFence): FenceRecord {
  const define = <T>(o: Record<string, T>, key: string, value: T) => Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
  const leases = define({ ...own(record.projects, project) }, lease, entry);
  return { version: 1, projects: define({ ...record.projects }, project, leases) };
}

/**
 * Runs `decide` on the record under the lock; when it answers a record, that one replaces the file
 * before the lock is let go. Throws RecordError.
 */
export async function withFenceRecord<T>(gitDir: string, decide: (record: FenceRecord) => Promise<{ result: T; next?: FenceRecord }>): Promise<T> {
  const file = path.join(gitDir, recordFileName);
  const unlock = await lock(`${file}.lock`);
  try {
    const { result, next } = await decide(read(file));
    if (next) write(file, next);
    return result;
  } finally {
    unlock();
  }
}
