import fs from "node:fs";
import path from "node:path";
import { ConfigError } from "../config.js";
import { makeDirs } from "../store/dirs.js";

/**
 * The log file, opened synchronously before the hub listens. pino's own asynchronous open
 * (sonic-boom) reports an unusable path only after start-up, as a crash, and a flush before it
 * is ready throws `sonic boom is not ready yet`; an open file descriptor has neither problem.
 */

const refuse = (logPath: string, why: string) =>
  new ConfigError("log_path_invalid", `cannot write the log file ${logPath}: ${why}`);

/**
 * Proves, before the store is opened, that the log file can be opened for appending: opens it
 * (creating it and its directories, 0700) and closes it again. Returns an undo for a start that
 * is refused later: it removes the file and directories this created, while they are still
 * empty. Throws ConfigError `log_path_invalid`. `undefined` (stdout) always passes.
 */
export function prepareLogFile(logPath: string | undefined): () => void {
  if (logPath === undefined) return () => undefined;
  const file = path.resolve(logPath);
  let createdDir: string | undefined;
  const existed = fs.existsSync(file);
  try {
    if (existed && !fs.statSync(file).isFile()) throw new Error("it is not a regular file");
    createdDir = makeDirs(path.dirname(file));
    fs.closeSync(fs.openSync(file, "a", 0o600));
  } catch (e) {
    undo(file, existed, createdDir);
    throw refuse(logPath, (e as Error).message);
  }
  return () => undo(file, existed, createdDir);
}

function undo(file: string, existed: boolean, createdDir: string | undefined): void {
  try {
    if (!existed && fs.statSync(file, { throwIfNoEntry: false })?.size === 0) fs.rmSync(file);
    if (createdDir === undefined) return;
    for (let dir = path.dirname(file); dir.startsWith(createdDir); dir = path.dirname(dir)) {
      fs.rmdirSync(dir); // throws once a directory is not empty: keep it and those above
      if (dir === createdDir) return;
    }
  } catch {
    // something else is in there now: leave it
  }
}

/**
 * Opens the log file for appending (mode 0600; its directory 0700), creating both as needed, and
 * returns the file descriptor. Throws ConfigError `log_path_invalid`.
 */
export function openLogFile(logPath: string): number {
  const file = path.resolve(logPath);
  try {
    makeDirs(path.dirname(file));
    return fs.openSync(file, "a", 0o600);
  } catch (e) {
    throw refuse(logPath, (e as Error).message);
  }
}
