import fs from "node:fs";
import Database from "better-sqlite3";
import { StoreOpenError } from "../store.js";
import { requireDriver } from "./driver.js";

/**
 * One process per data file. The lock is a companion SQLite file `<db>.lock` held by a
 * connection in `locking_mode=EXCLUSIVE` inside an open `BEGIN EXCLUSIVE` transaction until
 * release: any other opener (another process, or another connection of this one) gets
 * SQLITE_BUSY at once (busy timeout 0). The OS drops the lock when the process dies, SIGKILL
 * included, so a crash never leaves a stale lock. The main database is never locked
 * exclusively: `kxm-hub backup` reads it while the hub runs.
 *
 * The lock file stays after a normal release. Deleting it then would let a second opener lock
 * the unlinked inode while a third creates a fresh file, and both would run.
 */
export interface StoreLock {
  readonly path: string;
  /**
   * Releases the lock. `discard` (only after a refused open) also deletes the lock file when this
   * open created it, before letting go, so a refused start leaves nothing behind.
   */
  release(options?: { discard?: boolean }): void;
}

export const lockPathOf = (dbPath: string) => `${dbPath}.lock`;

/** Takes the data file's lock; throws StoreOpenError `runtime_store_locked`, `runtime_path_invalid` or `runtime_driver_unavailable`. */
export function lockStore(dbPath: string): StoreLock {
  requireDriver();
  const lockPath = lockPathOf(dbPath);
  let existed = false;
  try {
    const st = fs.lstatSync(lockPath);
    existed = true;
    if (st.isSymbolicLink() || !st.isFile()) {
      throw new StoreOpenError("runtime_path_invalid", `${lockPath} must be a regular file, not a link or directory`);
    }
  } catch (e) {
    if (e instanceof StoreOpenError) throw e;
  }
  let db: Database.Database | undefined;
  try {
    db = new Database(lockPath, { timeout: 0 });
    db.pragma("locking_mode = EXCLUSIVE");
    db.pragma("journal_mode = MEMORY"); // nothing is ever written: no -journal file beside it
    db.exec("BEGIN EXCLUSIVE");
  } catch (e) {
    db?.close();
    if ((e as { code?: string }).code === "SQLITE_BUSY") {
      throw new StoreOpenError(
        "runtime_store_locked",
        `${dbPath} is in use by another kxm-hub process (it holds ${lockPath}); stop that hub first`,
      );
    }
    if (!existed) fs.rmSync(lockPath, { force: true });
    throw new StoreOpenError("runtime_path_invalid", `cannot create the lock file ${lockPath}: ${(e as Error).message}`);
  }
  const held = db;
  return {
    path: lockPath,
    release({ discard = false } = {}) {
      if (!held.open) return;
      if (discard && !existed) fs.rmSync(lockPath, { force: true });
      held.close(); // rolls the empty transaction back and lets the file lock go
    },
  };
}
