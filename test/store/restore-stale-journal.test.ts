/**
 * A restore stopped hard (SIGKILL, a power loss) leaves its scratch copy and a hot rollback
 * journal under `<data>.restore-<pid>`; a later restore in a process of the same id (pid 1 in a
 * container) restores exactly its backup, the leftovers removed first. The stale journal was
 * rolled into the fresh copy, and a sound backup refused as "database disk image is malformed".
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { backupTo, restoreFrom } from "../../src/store/sqlite/backup.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function storeWithLeases(file: string, names: string[], token: number) {
  const db = new Database(file);
  const put = db.prepare("INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at) VALUES ('p', ?, NULL, NULL, ?, 0, 0)");
  db.transaction(() => {
    for (const n of names) put.run(n, token);
  })();
  db.close();
}

describe("restore after an earlier restore was stopped hard", () => {
  it("restores exactly the backup, whatever an earlier attempt left at its scratch name", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-restore-journal-"));
    dirs.push(dir);
    // Two backups: "other" (the earlier attempt's) and "wanted" (the one restored now).
    const other = path.join(dir, "other.db");
    const wanted = path.join(dir, "wanted.db");
    await new SqliteStore({ path: other, synchronous: "full" }).close();
    await new SqliteStore({ path: wanted, synchronous: "full" }).close();
    storeWithLeases(other, Array.from({ length: 3000 }, (_, i) => `other-${String(i).padStart(5, "0")}-${"o".repeat(60)}`), 7);
    storeWithLeases(wanted, ["only-in-wanted"], 3);
    await backupTo(other, path.join(dir, "other.bak"), { hubVersion: "0", nowMs: 0 });
    await backupTo(wanted, path.join(dir, "wanted.bak"), { hubVersion: "0", nowMs: 0 });

    const dataPath = path.join(dir, "kxm.db");
    const scratch = `${dataPath}.restore-${process.pid}`;
    // The earlier attempt: its copy of "other" mid-transaction (a large update that spilled to
    // the file, as keepAhead/bumpFence do on a big store) when the process was killed.
    fs.copyFileSync(path.join(dir, "other.bak"), scratch);
    const script = `
      const Database = require(${JSON.stringify(require.resolve("better-sqlite3"))});
      const db = new Database(${JSON.stringify(scratch)});
      db.pragma("journal_mode = DELETE");
      db.pragma("cache_size = 10");
      db.exec("BEGIN IMMEDIATE");
      db.prepare("UPDATE leases SET fencing_token = fencing_token + 1000000, holder_agent_id = NULL").run();
      process.kill(process.pid, "SIGKILL");
    `;
    spawnSync(process.execPath, ["-e", script], { stdio: "inherit" });
    expect(fs.existsSync(`${scratch}-journal`)).toBe(true);

    let refused = "";
    try {
      restoreFrom({ from: path.join(dir, "wanted.bak"), dataPath, margin: 1_000 });
    } catch (e) {
      refused = String(e);
    }
    expect(refused).toBe("");
    const db = new Database(dataPath, { readonly: true });
    let names: string[] = [];
    let check = "";
    try {
      check = String(db.pragma("quick_check", { simple: true }));
      names = (db.prepare("SELECT name FROM leases").all() as { name: string }[]).map((r) => r.name);
    } catch (e) {
      check = String(e);
    } finally {
      db.close();
    }
    expect({ check, leases: names.length, sample: names.slice(0, 2) }).toEqual({ check: "ok", leases: 1, sample: ["only-in-wanted"] });
  });
});
