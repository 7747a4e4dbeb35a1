/**
 * A damaged store of an older release is refused (runtime_store_invalid) before it is migrated or
 * put in WAL mode: its bytes and its schema version stay as they were, for that release (or a
 * repair) to open. The check ran after the migrations, which had committed this release's
 * version into the damaged file, so the previous release refused it as runtime_schema_newer.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { schemaVersion } from "../../src/store/sqlite/schema.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { StoreOpenError } from "../../src/store/store.js";
import { tearRootPage } from "../fixtures/torn-page.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});
const sha = (f: string) => createHash("sha256").update(fs.readFileSync(f)).digest("hex");

describe("a damaged store of an older schema", () => {
  it("is refused without being migrated: its bytes and version stay as they were", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-damaged-older-"));
    dirs.push(dir);
    const file = path.join(dir, "kxm.db");
    await new SqliteStore({ path: file, synchronous: "full" }).close();
    const db = new Database(file);
    // The file as the previous release left it: schema 16, before leases.handed_to/handed_token.
    db.exec("ALTER TABLE leases DROP COLUMN handed_to; ALTER TABLE leases DROP COLUMN handed_token;");
    db.pragma(`user_version = ${schemaVersion - 1}`);
    const put = db.prepare(
      `INSERT INTO sync_events (project_id, run_id, sequence, hub_project, home_runtime_id, event_type, content_hash, received_at, occurred_at, record)
       VALUES ('pj', 'r', ?, 'p', 'rt', 'step', 'h', 0, 'x', ?)`,
    );
    db.transaction(() => {
      for (let i = 1; i <= 2000; i++) put.run(i, "y".repeat(200));
    })();
    // A torn page in sync_events (a table migration 017 does not touch).
    tearRootPage(db, file, "sync_events");
    const before = sha(file);

    let code = "";
    try {
      await new SqliteStore({ path: file, synchronous: "full" }).close();
    } catch (e) {
      code = e instanceof StoreOpenError ? e.code : String(e);
    }
    expect(code).toBe("runtime_store_invalid");
    const after = new Database(file, { readonly: true });
    const version = after.pragma("user_version", { simple: true });
    after.close();
    expect(version).toBe(schemaVersion - 1);
    expect(sha(file)).toBe(before);
  });
});
