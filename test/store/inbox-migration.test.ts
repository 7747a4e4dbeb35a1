import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { schemaVersion } from "../../src/store/sqlite/schema.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";

/**
 * Migration 016: an agent's inbox events and its stream row move to tables keyed by their
 * primary key alone (WITHOUT ROWID). A version-15 file keeps every event, cursor and retention
 * mark, and the store reads them as before.
 */

const migrationsDir = path.resolve(import.meta.dirname, "../../src/store/sqlite/migrations");
const T = Date.UTC(2026, 0, 1, 12, 0, 0);

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-016-"));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function version15(sql: string): string {
  const file = path.join(dir, "kxm.db");
  const db = new Database(file);
  for (const f of fs.readdirSync(migrationsDir).filter((f) => /^0(0[6-9]|1[0-5])-.*\.sql$/.test(f)).sort()) {
    db.exec(fs.readFileSync(path.join(migrationsDir, f), "utf8"));
  }
  db.pragma("user_version = 15");
  db.exec(sql);
  db.close();
  return file;
}

const message = (id: string, to: string, seq: number) =>
  `INSERT INTO messages (id, project, from_id, from_name, to_id, to_name, content, delivery, hops, max_hops, seq, created_at, expires_at, status)
   VALUES ('${id}', 'p', 'agt_a', 'a', '${to}', 'b', 'hello ${seq}', 'direct', 0, 3, ${seq}, ${T}, ${T + 3_600_000}, 'queued');`;

describe("migration 016: inbox tables without rowid", () => {
  it("keeps every event and stream row, and the store reads them", async () => {
    const file = version15(
      [
        `INSERT INTO agents (id, project, name, name_key, purpose, key_hash, connected_at, last_seen_at, online)
         VALUES ('agt_b', 'p', 'b', 'b', 'testing', '00', ${T}, ${T}, 1);`,
        message("msg_1", "agt_b", 3),
        message("msg_2", "agt_b", 4),
        "INSERT INTO inbox_events (agent_id, seq, kind, message_id, created_at) VALUES ('agt_b', 3, 'message', 'msg_1', 1), ('agt_b', 4, 'message', 'msg_2', 2);",
        "INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through) VALUES ('agt_b', 5, 3, 2);",
      ].join("\n"),
    );
    const store = new SqliteStore({ path: file, synchronous: "normal" });
    try {
      const state = await store.messages.inboxState("agt_b");
      expect(state).toEqual({ head: 4, ackedCursor: 3, purgedThrough: 2 });
      const events = await store.messages.readInbox("agt_b", 0, 10);
      expect(events.map((e) => [e.seq, e.kind, e.message.id])).toEqual([
        [3, "message", "msg_1"],
        [4, "message", "msg_2"],
      ]);
    } finally {
      await store.close();
    }
    const db = new Database(file, { readonly: true });
    try {
      expect(db.pragma("user_version", { simple: true })).toBe(schemaVersion);
      for (const table of ["inbox_events", "inbox_streams"]) {
        const sql = (db.prepare("SELECT sql FROM sqlite_schema WHERE name = ?").get(table) as { sql: string }).sql;
        expect(sql, table).toMatch(/WITHOUT ROWID\s*$/);
      }
      expect(db.prepare("SELECT name FROM sqlite_schema WHERE name = 'inbox_events_message'").get()).toBeDefined();
    } finally {
      db.close();
    }
  });
});
