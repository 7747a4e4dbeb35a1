import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { WalSync } from "../../src/store/sqlite/batch.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";

/**
 * A SQLite store whose commits a test can hold (their WAL sync waits, and so does every answer of
 * their batch), counting the agent decisions made (every registration is one). `release` lets
 * the held commits go and stops holding; `[Symbol.asyncDispose]` releases and removes the file.
 */
export function heldCommits() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-mcp-held-"));
  const state = { hold: false, held: [] as (() => void)[], registrations: 0 };
  const walSync = (): WalSync => ({ sync: () => (state.hold ? new Promise<void>((r) => state.held.push(r)) : Promise.resolve()), close: () => {} });
  const store = new SqliteStore({ path: path.join(dir, "kxm.db"), synchronous: "full", walSync });
  const decideAgentLeases = store.agents.decideAgentLeases.bind(store.agents);
  store.agents.decideAgentLeases = (...args) => {
    state.registrations++;
    return decideAgentLeases(...args);
  };
  const release = () => {
    state.hold = false;
    for (const go of state.held.splice(0)) go();
  };
  return {
    store,
    state,
    release,
    [Symbol.asyncDispose]: async () => {
      release();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
