import Database from "better-sqlite3";
import { StoreOpenError } from "../store.js";

let loaded = false;

/**
 * Loads the SQLite driver's native module (better-sqlite3 loads it at its first open) before the
 * store touches any file, so a module built for another Node (after a Node upgrade without
 * `npm rebuild`) or missing altogether is refused as what it is, `runtime_driver_unavailable`,
 * rather than as a lock file or data path that cannot be opened. An in-memory open fails for no
 * other reason.
 */
export function requireDriver(): void {
  if (loaded) return;
  try {
    new Database(":memory:").close();
    loaded = true;
  } catch (e) {
    throw new StoreOpenError(
      "runtime_driver_unavailable",
      `the SQLite driver (better-sqlite3's native module) does not load in Node ${process.version} ` +
        `(modules ${process.versions.modules}): ${(e as Error).message.split("\n")[0]!.replace(/\.$/, "")}; ` +
        "rebuild it for this Node with `npm rebuild better-sqlite3` (or `npm ci`) in the hub's folder",
    );
  }
}
