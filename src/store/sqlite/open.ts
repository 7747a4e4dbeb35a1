import fs from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { makeDirs } from "../dirs.js";
import { StoreOpenError, StoreUnavailable } from "../store.js";
import { requireDriver } from "./driver.js";
import { lockStore, type StoreLock } from "./lock.js";
import { checkDataPath, openSchema } from "./schema.js";

export interface OpenedDatabase {
  db: Database.Database;
  /** Held until the store closes; none for `:memory:`. */
  lock: StoreLock | undefined;
}

/** The files SQLite keeps beside a database. */
export const companionsOf = (file: string) => [`${file}-wal`, `${file}-shm`, `${file}-journal`];

/**
 * Maps what better-sqlite3 and the file system throw while opening to the store's refusal
 * codes: a file that is not a database (or a damaged one) is `runtime_store_invalid`, one that
 * cannot be opened or written is `runtime_path_invalid`. Anything else is rethrown as is.
 */
export function asOpenRefusal(e: unknown, file: string): unknown {
  if (e instanceof StoreOpenError) return e;
  // A decision the file could not take (batch.ts): what SQLite said is the refusal's cause.
  if (e instanceof StoreUnavailable && e.cause !== undefined) return asOpenRefusal(e.cause, file);
  const code = (e as { code?: string }).code ?? "";
  const message = (e as Error).message;
  if (code === "SQLITE_NOTADB" || code.startsWith("SQLITE_CORRUPT")) {
    return new StoreOpenError("runtime_store_invalid", `${file} is not a kxm-hub database: ${message}`);
  }
  if (/^(SQLITE_(CANTOPEN|READONLY|IOERR|PERM|AUTH|FULL)|E[A-Z]+$)/.test(code)) {
    return new StoreOpenError("runtime_path_invalid", `cannot open ${file}: ${message}`);
  }
  return e;
}

/** Creates the data file's directory (mode 0700); returns the topmost directory it created. */
function makeDataDir(file: string): string | undefined {
  try {
    return makeDirs(path.dirname(path.resolve(file)));
  } catch (e) {
    throw new StoreOpenError("runtime_path_invalid", `cannot create the directory of ${file}: ${(e as Error).message}`);
  }
}

/** Removes the directories makeDataDir created, deepest first, while they are empty. */
function removeDataDir(file: string, created: string | undefined): void {
  if (created === undefined) return;
  for (let dir = path.dirname(path.resolve(file)); dir.startsWith(created); dir = path.dirname(dir)) {
    try {
      fs.rmdirSync(dir);
    } catch {
      return; // not empty (someone else is using it): keep it and everything above
    }
    if (dir === created) return;
  }
}

/**
 * WAL with `synchronous=NORMAL` whatever the configured durability: a commit writes the WAL
 * without syncing it, and checkpoints sync both files. FULL durability is the store's own WAL
 * sync after each batch's commit (batch.ts), before any of the batch is answered.
 *
 * `temp_store = MEMORY` keeps each decision's savepoint journal in memory. A batch opens a
 * savepoint per decision (batch.ts), and SQLite copies every page a decision first changes into
 * that journal; past 64 KiB it spills the journal to a temporary file. A sent message changes
 * about a dozen pages (the message, its five indexes, its inbox event and stream, the change row
 * and its head), so every send wrote five or more 4 KiB pages to a file nobody reads: about a
 * third of a send's statement time (bench/steps.md, "the savepoint journal and the WAL's
 * restart"). What a savepoint journal holds is one decision's pages, never more than the
 * batch's transaction would.
 */
function configure(db: Database.Database): void {
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.pragma("busy_timeout = 5000");
  db.pragma("foreign_keys = ON");
  db.pragma("temp_store = MEMORY");
}

/**
 * Refuses a damaged file (runtime_store_invalid) before anything is served from it: a page
 * overwritten under an intact header and schema opened, and every decision that read it then
 * failed as internal_error. SQLite's quick check reads every page once (about 0.24 s for a
 * store of 100,000 rows, as a backup's check of its copy).
 */
function checkIntact(db: Database.Database, file: string): void {
  const result = db.pragma("quick_check", { simple: true });
  if (result !== "ok") throw new StoreOpenError("runtime_store_invalid", `${file} is damaged: ${String(result).slice(0, 200)}`);
}

/**
 * Opens (creating if absent) the store's database: path checks, the directory, the process lock,
 * then the file and its schema (openSchema). Throws StoreOpenError. A refused open leaves the
 * disk as it found it: the database, its companions, the lock file and directories it created are
 * removed again, while the lock is still held, so no other hub can be using them.
 */
export function openDatabase(file: string): OpenedDatabase {
  requireDriver();
  if (file === ":memory:") {
    const db = new Database(file);
    configure(db);
    openSchema(db);
    return { db, lock: undefined };
  }
  checkDataPath(file);
  const createdDir = makeDataDir(file);
  let lock: StoreLock;
  try {
    lock = lockStore(file);
  } catch (e) {
    removeDataDir(file, createdDir);
    throw e;
  }
  const existed = fs.existsSync(file);
  let db: Database.Database | undefined;
  try {
    db = new Database(file);
    // Before anything is written to it (the journal mode, a migration): a damaged file of an
    // older release must be left as it was, for that release or a repair to open.
    checkIntact(db, file);
    configure(db);
    openSchema(db);
    return { db, lock };
  } catch (e) {
    db?.close(); // an existing file's companions are SQLite's to tidy (the last close does)
    if (!existed) for (const p of [file, ...companionsOf(file)]) fs.rmSync(p, { force: true });
    lock.release({ discard: true });
    removeDataDir(file, createdDir);
    throw asOpenRefusal(e, file);
  }
}
