import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { decideAcquire, decideRelease } from "../../src/lease/rules.js";
import { backupTo, bumpFence, manifestPathOf, readFences, restoreFrom } from "../../src/store/sqlite/backup.js";
import { schemaVersion } from "../../src/store/sqlite/schema.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { BackupError, StoreOpenError } from "../../src/store/store.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * Backup and restore of the SQLite store (docs/operations.md, "Backup and restore"; decision D45: restore never
 * reissues a token). In-process, on temp files; test/cli/backup.test.ts runs the commands
 * against a hub process under load.
 */

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-backup-"));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const T = 1_700_000_000_000;
const open = (file: string) => new SqliteStore({ path: file, synchronous: "full" });
const holder = (agentId: string, project = "p") => ({ agentId, agentName: agentId, project });

/** Grants the lease to `agentId` (taking it over if held); returns the token. */
async function acquire(store: SqliteStore, name: string, agentId: string, project = "p"): Promise<number> {
  const outcome = await store.leases.decideLease({ project, name }, (cur) =>
    decideAcquire(cur && cur.holderAgentId !== agentId ? { ...cur, expiresAtMs: 0 } : cur, {
      name,
      holder: holder(agentId, project),
      ttlMs: 60_000,
      nowMs: T,
    }),
  );
  return outcome.lease.fencingToken;
}

async function release(store: SqliteStore, name: string, agentId: string, fencingToken: number): Promise<void> {
  await store.leases.decideLease({ project: "p", name }, (cur) => decideRelease(cur, { name, holder: holder(agentId), fencingToken }));
}

const sha256 = (file: string) => createHash("sha256").update(fs.readFileSync(file)).digest("hex");

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e instanceof BackupError || e instanceof StoreOpenError, String(e)).toBe(true);
    return (e as BackupError | StoreOpenError).code;
  }
  throw new Error("expected a refusal");
}

async function asyncCodeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e instanceof BackupError || e instanceof StoreOpenError, String(e)).toBe(true);
    return (e as BackupError | StoreOpenError).code;
  }
  throw new Error("expected a refusal");
}

/** A store with leases: a held one, a released floor, one in another project. */
async function seeded(file: string) {
  const store = open(file);
  for (let i = 0; i < 3; i++) await release(store, "released", "a1", await acquire(store, "released", "a1"));
  await acquire(store, "held", "a1");
  await acquire(store, "held", "a2"); // takeover: token 2
  await acquire(store, "main", "b1", "q");
  return store;
}

describe("backupTo", () => {
  it("copies a store that is open and writing, consistently, with its manifest", async () => {
    const live = path.join(dir, "live", "kxm.db");
    const store = await seeded(live); // stays open: the hub is running
    const out = path.join(dir, "backups", "b.db");
    const manifest = await backupTo(live, out, { hubVersion: "9.9.9", nowMs: T });
    await acquire(store, "after", "a1"); // the live store keeps working
    await store.close();

    expect(manifest).toMatchObject({
      format: "kxm-hub-backup/1",
      file: "b.db",
      bytes: fs.statSync(out).size,
      sha256: sha256(out),
      schemaVersion,
      hubVersion: "9.9.9",
      createdAt: new Date(T).toISOString(),
      fenceBase: 0,
      fences: [
        { project: "p", name: "held", fencingToken: 2 },
        { project: "p", name: "released", fencingToken: 3 },
        { project: "q", name: "main", fencingToken: 1 },
      ],
    });
    expect(JSON.parse(fs.readFileSync(manifestPathOf(out), "utf8"))).toEqual(manifest);
    expect(fs.statSync(out).mode & 0o777).toBe(0o600);
    // one self-contained file: nothing of it is left in a -wal
    expect(fs.readdirSync(path.dirname(out)).sort()).toEqual(["b.db", "b.db.manifest.json"]);
    const copy = new Database(out, { readonly: true });
    expect(copy.pragma("journal_mode", { simple: true })).toBe("delete");
    expect(readFences(copy).fences.map((f) => f.name)).toEqual(["held", "released", "main"]);
    copy.close();
  });

  it("never overwrites: an existing file or manifest is backup_exists and stays as it was", async () => {
    const live = path.join(dir, "kxm.db");
    await (await seeded(live)).close();
    const out = path.join(dir, "b.db");
    fs.writeFileSync(out, "precious");
    expect(await asyncCodeOf(backupTo(live, out, { hubVersion: "0", nowMs: T }))).toBe("backup_exists");
    expect(fs.readFileSync(out, "utf8")).toBe("precious");
    const out2 = path.join(dir, "c.db");
    fs.writeFileSync(manifestPathOf(out2), "{}");
    expect(await asyncCodeOf(backupTo(live, out2, { hubVersion: "0", nowMs: T }))).toBe("backup_exists");
    expect(fs.existsSync(out2)).toBe(false);
  });

  it("refuses a source that is missing or not a database, creating nothing", async () => {
    const out = path.join(dir, "b.db");
    expect(await asyncCodeOf(backupTo(path.join(dir, "none.db"), out, { hubVersion: "0", nowMs: T }))).toBe("runtime_path_invalid");
    fs.writeFileSync(path.join(dir, "junk.db"), "x".repeat(4096));
    expect(await asyncCodeOf(backupTo(path.join(dir, "junk.db"), out, { hubVersion: "0", nowMs: T }))).toBe("runtime_store_invalid");
    expect(fs.readdirSync(dir)).toEqual(["junk.db"]);
  });
});

describe("restoreFrom", () => {
  it("raises every floor by the margin and releases every lease: no token is handed out again", async () => {
    const live = path.join(dir, "kxm.db");
    const store = await seeded(live);
    const out = path.join(dir, "b.db");
    await backupTo(live, out, { hubVersion: "0", nowMs: T });
    // after the backup the hub keeps granting, on known resources and on a new one
    const after = new Map<string, number>();
    for (let i = 0; i < 5; i++) {
      const token = await acquire(store, "released", "a1");
      await release(store, "released", "a1", token);
      after.set("released", token);
    }
    after.set("held", await acquire(store, "held", "a3"));
    after.set("new", await acquire(store, "new", "a1"));
    await store.close();

    const summary = restoreFrom({ from: out, dataPath: live, margin: 1_000 });
    // Each floor is the higher of the backup's and the replaced file's (which granted after the
    // backup: "released" up to 8, "held" 3, "new" 1), plus the margin.
    expect(summary).toEqual({
      schemaVersion,
      resources: 4,
      leasesReleased: 2,
      margin: 1_000,
      fenceBase: 1_000,
      highestTokenBefore: 8,
    });

    const restored = open(live);
    expect(await restored.leases.getLease({ project: "p", name: "held" })).toMatchObject({ holderAgentId: null, fencingToken: 1_003 });
    expect(await restored.leases.listLeases({ project: "p", limit: 10, includeExpired: true, nowMs: T })).toEqual([]);
    const next = {
      held: await acquire(restored, "held", "a1"),
      released: await acquire(restored, "released", "a1"),
      new: await acquire(restored, "new", "a1"),
      main: await acquire(restored, "main", "b1", "q"),
      fresh: await acquire(restored, "fresh", "a1"),
    };
    await restored.close();
    expect(next).toEqual({ held: 1_004, released: 1_009, new: 1_002, main: 1_002, fresh: 1_001 });
    for (const [name, token] of after) expect(next[name as keyof typeof next], name).toBeGreaterThan(token);
  });

  it("bumps in one transaction: a failure half-way leaves every token as it was", async () => {
    const live = path.join(dir, "kxm.db");
    await (await seeded(live)).close();
    const db = new Database(live);
    db.exec("DROP TABLE fence_base"); // the second statement of the bump fails
    expect(() => bumpFence(db, 1_000)).toThrow();
    expect(readFences(db).fences.map((f) => f.fencingToken)).toEqual([2, 3, 1]);
    expect(db.prepare("SELECT count(*) AS n FROM leases WHERE holder_agent_id IS NOT NULL").get()).toEqual({ n: 2 });
    db.close();
  });

  it("refuses a tampered backup, a missing manifest and a newer schema, leaving the target untouched", async () => {
    const live = path.join(dir, "kxm.db");
    await (await seeded(live)).close();
    const out = path.join(dir, "b.db");
    await backupTo(live, out, { hubVersion: "0", nowMs: T });
    const target = path.join(dir, "target.db");
    fs.writeFileSync(target, "the target");

    const tampered = path.join(dir, "tampered.db");
    fs.copyFileSync(out, tampered);
    fs.copyFileSync(manifestPathOf(out), manifestPathOf(tampered));
    const bytes = fs.readFileSync(tampered);
    bytes[bytes.length - 1] ^= 0xff;
    fs.writeFileSync(tampered, bytes);
    expect(codeOf(() => restoreFrom({ from: tampered, dataPath: target, margin: 10 }))).toBe("backup_corrupt");

    const bare = path.join(dir, "bare.db");
    fs.copyFileSync(out, bare);
    expect(codeOf(() => restoreFrom({ from: bare, dataPath: target, margin: 10 }))).toBe("backup_corrupt");

    // a backup from a newer release: its file and manifest agree on a schema this one lacks
    const newer = path.join(dir, "newer.db");
    fs.copyFileSync(out, newer);
    const db = new Database(newer);
    db.pragma(`user_version = ${schemaVersion + 1}`);
    db.close();
    const manifest = JSON.parse(fs.readFileSync(manifestPathOf(out), "utf8"));
    fs.writeFileSync(manifestPathOf(newer), JSON.stringify({ ...manifest, schemaVersion: schemaVersion + 1, sha256: sha256(newer) }));
    expect(codeOf(() => restoreFrom({ from: newer, dataPath: target, margin: 10 }))).toBe("runtime_schema_newer");

    expect(fs.readFileSync(target, "utf8")).toBe("the target");
    expect(fs.readdirSync(dir).filter((f) => f.startsWith("target"))).toEqual(["target.db"]);
  });

  it("refuses while a hub holds the target (runtime_store_locked)", async () => {
    const live = path.join(dir, "kxm.db");
    const store = await seeded(live);
    const out = path.join(dir, "b.db");
    await backupTo(live, out, { hubVersion: "0", nowMs: T });
    expect(codeOf(() => restoreFrom({ from: out, dataPath: live, margin: 10 }))).toBe("runtime_store_locked");
    expect(await acquire(store, "held", "a2")).toBe(2); // untouched, still serving
    await store.close();
  });

  it("removes the target's stale -wal and -shm before renaming the restored file into place", async () => {
    const live = path.join(dir, "kxm.db");
    await (await seeded(live)).close();
    const out = path.join(dir, "b.db");
    await backupTo(live, out, { hubVersion: "0", nowMs: T });
    fs.writeFileSync(`${live}-wal`, "stale frames of the old file");
    fs.writeFileSync(`${live}-shm`, "stale index");
    restoreFrom({ from: out, dataPath: live, margin: 10 });
    expect(fs.existsSync(`${live}-wal`)).toBe(false);
    expect(fs.existsSync(`${live}-shm`)).toBe(false);
    expect(fs.readdirSync(dir).sort()).toEqual(["b.db", "b.db.manifest.json", "kxm.db", "kxm.db.lock"]);
    const restored = open(live);
    expect(await acquire(restored, "released", "a1")).toBe(14);
    await restored.close();
  });
});

describe("restoreFrom, what the replaced file had handed out", () => {
  it("never hands a token out again: the same backup restored twice, or an older one after a newer", async () => {
    const live = path.join(dir, "kxm.db");
    const s0 = open(live);
    await acquire(s0, "main", "a1"); // token 1
    const older = path.join(dir, "older.db");
    await backupTo(live, older, { hubVersion: "0", nowMs: T });
    await s0.close();
    restoreFrom({ from: older, dataPath: live, margin: 1_000 });
    const s1 = open(live);
    const first = await acquire(s1, "main", "x"); // 1002
    const other = await acquire(s1, "fresh", "x"); // a resource the backup never saw: above the base
    await s1.close();
    restoreFrom({ from: older, dataPath: live, margin: 1_000 });
    const s2 = open(live);
    expect(await acquire(s2, "main", "y")).toBeGreaterThan(first);
    expect(await acquire(s2, "fresh", "y")).toBeGreaterThan(other);
    await s2.close();
  });

  it("folds the replaced file's WAL into it first: a restore that stops before its rename loses no commit", async () => {
    const live = path.join(dir, "kxm.db");
    const s0 = open(live);
    await acquire(s0, "main", "a1");
    const out = path.join(dir, "b.db");
    await backupTo(live, out, { hubVersion: "0", nowMs: T });
    for (let i = 0; i < 48; i++) await acquire(s0, "main", `a${i + 2}`); // token 49, in the WAL
    // Left as a killed hub leaves it: its last commits only in the WAL.
    (s0 as unknown as { db: Database.Database }).db.pragma("wal_autocheckpoint = 0");
    expect(await acquire(s0, "main", "last")).toBe(50);
    const copy = path.join(dir, "killed.db");
    fs.copyFileSync(live, copy);
    fs.copyFileSync(`${live}-wal`, `${copy}-wal`);
    await s0.close();
    const rename = fs.renameSync;
    fs.renameSync = () => {
      throw Object.assign(new Error("stopped before the rename"), { code: "EIO" });
    };
    try {
      expect(() => restoreFrom({ from: out, dataPath: copy, margin: 1_000 })).toThrow();
    } finally {
      fs.renameSync = rename;
    }
    const after = open(copy);
    expect(await acquire(after, "main", "next")).toBe(51);
    await after.close();
  });

  it("ends every agent's instance: a key rotated away after the backup does not work again", async () => {
    const live = path.join(dir, "kxm.db");
    const s0 = open(live);
    const agent = { id: "agt_m", project: "p", name: "m", purpose: "", keyHash: "a".repeat(64), connectedAtMs: 1, lastSeenAtMs: 1, online: true };
    await s0.agents.decideAgentLeases({ project: "p", nameKey: "m" }, () => ({ write: agent, result: 0 }));
    const out = path.join(dir, "b.db");
    await backupTo(live, out, { hubVersion: "0", nowMs: T });
    await s0.close();
    restoreFrom({ from: out, dataPath: live, margin: 10 });
    const s1 = open(live);
    expect(await s1.agents.getAgent("agt_m")).toMatchObject({ id: "agt_m", online: false });
    expect((await s1.agents.getAgent("agt_m"))!.keyHash).not.toBe(agent.keyHash);
    await s1.close();
  });
});

describe("restoreFrom and the inboxes", () => {
  it("numbers an inbox on from above what the replaced file had given: a reader's cursor from after the backup gets the new messages", async () => {
    const dataPath = path.join(dir, "kxm.db");
    const backup = path.join(dir, "b.db");
    const send = async (h: TestHub, from: Record<string, string>, content: string) =>
      expect((await h.rest("/v1/messages", { json: { target: "bob", content, allowOffline: true }, headers: from })).status).toBeLessThan(300);
    const read = async (h: TestHub, who: Record<string, string>, after?: number) =>
      (await h.rest(`/v1/inbox${after === undefined ? "" : `?afterCursor=${after}`}`, { headers: who })).json() as Promise<{ events: { message?: { content?: string } }[]; nextCursor: string }>;
    const h1 = await startTestHub({ config: { dataPath } });
    const alice = await h1.register("alice");
    const bob = await h1.register("bob");
    await backupTo(dataPath, backup, { hubVersion: "0", nowMs: Date.now() });
    for (const n of [1, 2, 3]) await send(h1, alice.headers, `before-${n}`);
    const cursor = Number((await read(h1, bob.headers)).nextCursor);
    expect(cursor).toBe(3);
    await h1.close();
    restoreFrom({ from: backup, dataPath, margin: 1_000 });
    const h2 = await startTestHub({ config: { dataPath } });
    try {
      // Every agent registers again after a restore (its instance ended), under the same id.
      const alice2 = await h2.register("alice");
      const bob2 = await h2.register("bob");
      expect(bob2.id).toBe(bob.id);
      await send(h2, alice2.headers, "after");
      expect((await read(h2, bob2.headers, cursor)).events.map((e) => e.message?.content)).toEqual(["after"]);
    } finally {
      await h2.close();
    }
  });
});
