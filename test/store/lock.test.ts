import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { schemaVersion } from "../../src/store/sqlite/schema.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { StoreOpenError } from "../../src/store/store.js";

/**
 * One process per data file (the store's `<db>.lock`), and refused opens that leave the disk as
 * they found it. Across processes: test/cli/backup.test.ts; the lock's release on SIGKILL is what
 * lets test/lease/lease.crash.test.ts restart on its file.
 */

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-lock-"));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const open = (file: string) => new SqliteStore({ path: file, synchronous: "full" });

function refusal(file: string): StoreOpenError {
  try {
    void open(file).close();
  } catch (e) {
    expect(e).toBeInstanceOf(StoreOpenError);
    return e as StoreOpenError;
  }
  throw new Error(`${file} opened, expected a refusal`);
}

/** Every path under `root`, relative, sorted. */
const tree = (root: string): string[] =>
  fs.readdirSync(root, { recursive: true, encoding: "utf8" }).sort();

describe("the store's process lock", () => {
  it("refuses a second store on the same file while the first keeps working", async () => {
    const file = path.join(dir, "kxm.db");
    const first = open(file);
    const e = refusal(file);
    expect(e.code).toBe("runtime_store_locked");
    expect(e.message).toContain(`${file}.lock`);
    expect(await first.ready()).toBe(true);
    await first.agents.markAllAgentsOffline(() => ({ stream: "presence", body: {} }));
    await first.close();
    const again = open(file); // released on close
    await again.close();
    expect(tree(dir)).toEqual(["kxm.db", "kxm.db.lock"]); // the lock file stays (see lock.ts)
  });

  it("does not lock the database itself: a reader opens it while the store holds the lock", async () => {
    const file = path.join(dir, "kxm.db");
    const store = open(file);
    const reader = new Database(file, { readonly: true, timeout: 0 });
    expect(reader.pragma("user_version", { simple: true })).toBe(schemaVersion);
    reader.close();
    await store.close();
  });

  it("needs no lock in memory", async () => {
    const a = open(":memory:");
    const b = open(":memory:");
    expect((await a.ready()) && (await b.ready())).toBe(true);
    await a.close();
    await b.close();
  });
});

describe("a refused open leaves nothing behind", () => {
  it("a file that is not a database: runtime_store_invalid, the file unchanged", () => {
    const file = path.join(dir, "junk.db");
    fs.writeFileSync(file, Buffer.alloc(8192, 7));
    const before = createHash("sha256").update(fs.readFileSync(file)).digest("hex");
    expect(refusal(file).code).toBe("runtime_store_invalid");
    expect(createHash("sha256").update(fs.readFileSync(file)).digest("hex")).toBe(before);
    expect(tree(dir)).toEqual(["junk.db"]);
  });

  it("a path whose directory cannot be made: runtime_path_invalid, nothing created", () => {
    fs.writeFileSync(path.join(dir, "plain"), "");
    expect(refusal(path.join(dir, "plain", "state", "kxm.db")).code).toBe("runtime_path_invalid");
    expect(tree(dir)).toEqual(["plain"]);
  });

  it("a newer schema: runtime_schema_newer, no lock file or WAL left", () => {
    const file = path.join(dir, "newer.db");
    const db = new Database(file);
    db.pragma(`user_version = ${schemaVersion + 1}`);
    db.close();
    expect(refusal(file).code).toBe("runtime_schema_newer");
    expect(tree(dir)).toEqual(["newer.db"]);
  });
});
