import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openDatabase, type OpenedDatabase } from "../../src/store/sqlite/open.js";

/**
 * A decision's savepoint journal stays in memory (open.ts, `temp_store = MEMORY`). SQLite opens a
 * temporary file for it once it passes 64 KiB, unlinked at once: on Linux it shows among the
 * process's descriptors as "(deleted)" while the transaction is open. Vitest runs each file in
 * a process of its own (pool "forks"), so the descriptors seen here are this file's.
 */
const unlinkedFiles = (): string[] =>
  fs
    .readdirSync("/proc/self/fd")
    .map((fd) => {
      try {
        return fs.readlinkSync(path.join("/proc/self/fd", fd));
      } catch {
        return ""; // closed since it was listed
      }
    })
    .filter((target) => target.endsWith("(deleted)"))
    .sort();

describe.runIf(process.platform === "linux")("the savepoint journal of a decision", () => {
  let dir: string;
  let opened: OpenedDatabase;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-savepoint-"));
    opened = openDatabase(path.join(dir, "kxm.db"));
  });

  afterEach(() => {
    opened.db.close();
    opened.lock?.release();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("writes no temporary file when a decision changes more than 64 KiB of pages", () => {
    const { db } = opened;
    // 40 rows of 3 KB, each on a 4 KiB page of its own.
    db.exec("CREATE TABLE bulk (id INTEGER PRIMARY KEY, body BLOB)");
    const insert = db.prepare("INSERT INTO bulk (body) VALUES (?)");
    for (let i = 0; i < 40; i++) insert.run(Buffer.alloc(3000, i));
    const before = unlinkedFiles();
    db.exec("BEGIN IMMEDIATE");
    db.exec("SAVEPOINT decision");
    // Every page is changed inside the savepoint: about 160 KiB of original pages to keep.
    const changed = db.prepare("UPDATE bulk SET body = zeroblob(3001)").run().changes;
    const during = unlinkedFiles();
    db.exec("ROLLBACK TO decision");
    db.exec("RELEASE decision");
    db.exec("COMMIT");
    expect(changed).toBe(40);
    expect(during).toEqual(before);
    // What the savepoint undid is undone: the rows are as they were.
    expect(db.prepare<[], { n: number }>("SELECT count(*) AS n FROM bulk WHERE length(body) = 3000").get()!.n).toBe(40);
  });
});
