import fs from "node:fs";
import path from "node:path";

/**
 * `mkdir -p` for the directories of the hub's files (store, lock, backup, log), mode 0700.
 * Returns the topmost directory it created (undefined when all existed), like
 * `fs.mkdirSync(dir, { recursive: true })`, which never returns on some file systems: under
 * `/proc` every mkdir fails with ENOENT and Node's recursive mkdir retries the parent forever.
 * Throws the file system's error (ENOENT, ENOTDIR, EACCES, ...).
 */
export function makeDirs(dir: string): string | undefined {
  const missing: string[] = [];
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    const st = fs.statSync(d, { throwIfNoEntry: false });
    if (st) {
      if (!st.isDirectory()) throw Object.assign(new Error(`ENOTDIR: not a directory, ${d}`), { code: "ENOTDIR" });
      break;
    }
    missing.unshift(d);
    if (path.dirname(d) === d) break;
  }
  for (const d of missing) {
    try {
      fs.mkdirSync(d, { mode: 0o700 });
    } catch (e) {
      // made meanwhile by another process: fine, it is a directory
      if ((e as { code?: string }).code !== "EEXIST" || !fs.statSync(d).isDirectory()) throw e;
    }
  }
  return missing[0];
}
