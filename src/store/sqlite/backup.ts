import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { makeDirs } from "../dirs.js";
import { BackupError, StoreOpenError } from "../store.js";
import { lockPathOf, lockStore } from "./lock.js";
import { asOpenRefusal, companionsOf } from "./open.js";
import { checkDataPath, firstSchemaVersion, openSchema, schemaVersion } from "./schema.js";

/**
 * Backup and restore of the SQLite store (docs/operations.md, "Backup and restore"; decision D45).
 *
 * A backup is a consistent copy taken with SQLite's online backup API while the hub runs (a
 * `cp` of a WAL database misses whatever is still in `-wal`), plus a manifest beside it. A
 * restore never lets the restored hub hand out a fencing token again: in one transaction it
 * raises every resource's floor, and the fence base of resources it has no row for, by a margin,
 * and releases every lease, so each holder re-acquires and gets a token above the margin.
 */

export const manifestFormat = "kxm-hub-backup/1";

/** The highest fencing token of one resource (project, name), as the backup holds it. */
export interface FenceEntry {
  project: string;
  name: string;
  fencingToken: number;
}

/** `<backup>.manifest.json`: what restore checks before it touches the target. */
export interface BackupManifest {
  format: typeof manifestFormat;
  /** Base name of the backup file the manifest describes. */
  file: string;
  bytes: number;
  /** Hex sha256 of the backup file. */
  sha256: string;
  schemaVersion: number;
  /** package.json version of the hub that wrote the backup. */
  hubVersion: string;
  /** ISO time the backup was taken. */
  createdAt: string;
  /** Floor of resources without a row (0 unless the source was itself restored). */
  fenceBase: number;
  fences: FenceEntry[];
}

export interface RestoreSummary {
  schemaVersion: number;
  resources: number;
  leasesReleased: number;
  margin: number;
  fenceBase: number;
  highestTokenBefore: number;
}

export const manifestPathOf = (backupFile: string) => `${backupFile}.manifest.json`;

/** Largest margin: tokens must stay exact in a JSON number. */
export const maxFenceMargin = 1_000_000_000_000;

/** sqlite3_backup_step(-1)-like: after the first (empty) step, copy every page in one step. */
const allPages = 0x7fffffff;

function sha256Of(file: string): string {
  const hash = createHash("sha256");
  const fd = fs.openSync(file, "r");
  try {
    const buf = Buffer.allocUnsafe(1 << 20);
    for (let n; (n = fs.readSync(fd, buf, 0, buf.length, null)) > 0; ) hash.update(buf.subarray(0, n));
  } finally {
    fs.closeSync(fd);
  }
  return hash.digest("hex");
}

function fsyncFile(file: string): void {
  const fd = fs.openSync(file, "r+");
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

function fsyncDir(dir: string): void {
  try {
    const fd = fs.openSync(dir, "r");
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    // not every platform can fsync a directory; the rename is still atomic
  }
}

/** Refuses a file whose schema this release cannot describe; returns its version. */
function checkVersion(db: Database.Database, what: string): number {
  const version = db.pragma("user_version", { simple: true }) as number;
  if (version > schemaVersion) {
    throw new StoreOpenError("runtime_schema_newer", `${what} has schema ${version}, newer than this hub's ${schemaVersion}; use a newer kxm-hub`);
  }
  if (version < firstSchemaVersion) {
    throw new StoreOpenError(
      version === 0 ? "runtime_schema_shape_invalid" : "runtime_schema_outdated",
      `${what} has schema ${version}, not a kxm-hub store this release can read`,
    );
  }
  return version;
}

/** Every resource's highest token, and the fence base (absent before schema 10). */
export function readFences(db: Database.Database): { fences: FenceEntry[]; fenceBase: number } {
  const fences = db
    .prepare<[], FenceEntry>("SELECT project, name, fencing_token AS fencingToken FROM leases ORDER BY project, name")
    .all();
  const hasBase = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'fence_base'").get();
  const fenceBase = hasBase
    ? db.prepare<[], { floor: number }>("SELECT coalesce(max(floor), 0) AS floor FROM fence_base").get()!.floor
    : 0;
  return { fences, fenceBase };
}

/**
 * The restore step, in ONE transaction: every resource's fence floor and the fence base go up
 * by `margin`, and every lease is released (holder NULL). A holder's next call finds no lease
 * (`lease_not_found`); it re-acquires and gets a token above anything handed out before or after
 * the backup, unless more than `margin` grants were made on one resource after it (decision D45).
 * Watch changes go the same way: every stream's numbers (and the base new streams start from)
 * go up by `margin` and the stored changes are dropped, so a watcher's cursor from before the
 * restore, or from after the backup, is cursor_expired and never taken for a restored change.
 * The same transaction adds the `restore` entry of the audit trail, with `detail` (never a secret).
 */
export function bumpFence(
  db: Database.Database,
  margin: number,
  detail: Record<string, unknown> = {},
): { resources: number; leasesReleased: number } {
  return db
    .transaction(() => {
      const held = db.prepare<[], { n: number }>("SELECT count(*) AS n FROM leases WHERE holder_agent_id IS NOT NULL").get()!.n;
      const bumped = db
        .prepare("UPDATE leases SET fencing_token = fencing_token + ?, holder_agent_id = NULL, holder_agent_name = NULL")
        .run(margin);
      db.prepare("UPDATE fence_base SET floor = floor + ?").run(margin);
      db.prepare("UPDATE watch_heads SET head = head + ?").run(margin);
      // Inboxes number on from above anything handed out: a reader's cursor from after the
      // backup is ahead of the restored head (cursor_expired), never passed by new events.
      db.prepare("UPDATE inbox_streams SET next_seq = next_seq + ?").run(margin);
      db.prepare("DELETE FROM watch_changes").run();
      db.prepare("DELETE FROM lease_waiters").run();
      const summary = { resources: bumped.changes, leasesReleased: held };
      db.prepare("INSERT INTO audit_events (at_ms, project, kind, detail) VALUES (?, '', 'restore', ?)").run(
        Date.now(),
        JSON.stringify({ ...detail, margin, ...summary }),
      );
      return summary;
    })
    .immediate();
}

/**
 * Keeps in the restored copy `db` what the replaced file knew of project tokens (the copy is not
 * live until the restore's rename): a token revoked there is revoked in the copy, and a token the
 * backup does not hold (made after it) is added, revoked at `nowMs` unless it already was: its
 * secret does not work, and its project, closed since it had a token of its own, stays closed
 * (docs/security.md). Answers how many rows it revoked or added.
 */
function keepTokens(db: Database.Database, tokens: Record<string, unknown>[], nowMs: number): number {
  if (tokens.length === 0) return 0;
  const columns = new Set((db.prepare("PRAGMA table_info(project_tokens)").all() as { name: string }[]).map((c) => c.name));
  const revoke = db.prepare("UPDATE project_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
  let kept = 0;
  db.transaction(() => {
    for (const row of tokens) {
      const revokedAt = typeof row.revoked_at === "number" ? row.revoked_at : nowMs;
      const known = db.prepare("SELECT 1 FROM project_tokens WHERE id = ?").get(row.id) !== undefined;
      if (known) {
        if (typeof row.revoked_at === "number") kept += revoke.run(revokedAt, row.id).changes;
        continue;
      }
      const names = Object.keys(row).filter((k) => columns.has(k));
      const values = names.map((k) => (k === "revoked_at" ? revokedAt : row[k]));
      if (!names.includes("revoked_at")) {
        names.push("revoked_at");
        values.push(revokedAt);
      }
      db.prepare(`INSERT INTO project_tokens (${names.join(", ")}) VALUES (${names.map(() => "?").join(", ")})`).run(...values);
      kept++;
    }
  })();
  return kept;
}

/** What a restore keeps of the file it replaces (`targetFacts`). */
interface TargetFacts {
  /**
   * Project tokens there (their rows): one revoked there stays revoked (a backup taken before a
   * revocation must not bring a revoked secret back), and one the backup does not hold is kept,
   * revoked, so that a project that had a token of its own stays closed.
   */
  tokens: Record<string, unknown>[];
  /** Every resource's token there, and its fence base: what it handed out, maybe after the backup. */
  fences: FenceEntry[];
  fenceBase: number;
  /** Every watch stream's head there. */
  heads: { project: string; stream: string; head: number }[];
  /** Every inbox's numbering there. */
  inboxes: { agent_id: string; next_seq: number }[];
  /** Its audit trail: what an operator is asked about later happened there, after the backup too. */
  audit: AuditRow[];
}

interface AuditRow {
  seq: number;
  at_ms: number;
  project: string;
  kind: string;
  detail: string;
}

const hasTable = (db: Database.Database, name: string) => db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) !== undefined;

/**
 * What the file at `dataPath` holds that a restore must not go back on, when it is a store: its
 * revoked tokens, and the tokens and numbers it handed out (a backup restored twice, or an older
 * one after a newer, must not hand them out again). Its WAL is folded into it first, so that the
 * restore removing the WAL can lose nothing should it stop before its rename. A file that is no
 * such store (missing, another layout) has none.
 */
function targetFacts(dataPath: string): TargetFacts {
  const none: TargetFacts = { tokens: [], fences: [], fenceBase: 0, heads: [], inboxes: [], audit: [] };
  if (!fs.existsSync(dataPath)) return none;
  let db: Database.Database | undefined;
  try {
    db = new Database(dataPath, { fileMustExist: true });
  } catch {
    return none;
  }
  try {
    if (!hasTable(db, "leases")) return none;
    db.pragma("wal_checkpoint(TRUNCATE)");
    const { fences, fenceBase } = readFences(db);
    return {
      tokens: hasTable(db, "project_tokens") ? (db.prepare("SELECT * FROM project_tokens").all() as TargetFacts["tokens"]) : [],
      fences,
      fenceBase,
      heads: hasTable(db, "watch_heads") ? (db.prepare("SELECT project, stream, head FROM watch_heads").all() as TargetFacts["heads"]) : [],
      inboxes: hasTable(db, "inbox_streams") ? (db.prepare("SELECT agent_id, next_seq FROM inbox_streams").all() as TargetFacts["inboxes"]) : [],
      audit: hasTable(db, "audit_events") ? (db.prepare("SELECT seq, at_ms, project, kind, detail FROM audit_events ORDER BY seq").all() as AuditRow[]) : [],
    };
  } catch {
    return none;
  } finally {
    db.close();
  }
}

/**
 * Raises what the restored copy `db` numbers from to at least what the replaced file had reached
 * (`target`): each resource's token and the fence base, each watch stream's head, each inbox's
 * next number. bumpFence then adds the margin on top. And ends every agent's instance: offline,
 * its key rotated to one nobody holds, as an eviction does, so that a key rotated away after the
 * backup (an eviction, an unregistering) does not work again; agents register again (resuming,
 * the same id). And keeps the replaced file's audit entries the backup does not hold.
 */
function keepAhead(db: Database.Database, target: TargetFacts): void {
  db.transaction(() => {
    const floor = db.prepare(
      `INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at)
       VALUES (?, ?, NULL, NULL, ?, 0, 0)
       ON CONFLICT (project, name) DO UPDATE SET fencing_token = max(fencing_token, excluded.fencing_token)`,
    );
    for (const f of target.fences) floor.run(f.project, f.name, f.fencingToken);
    db.prepare("UPDATE fence_base SET floor = max(floor, ?)").run(target.fenceBase);
    const head = db.prepare("INSERT INTO watch_heads (project, stream, head) VALUES (?, ?, ?) ON CONFLICT (project, stream) DO UPDATE SET head = max(head, excluded.head)");
    for (const h of target.heads) head.run(h.project, h.stream, h.head);
    // An inbox the backup had not numbered yet starts where the replaced file's was, with nothing
    // below it to read (for an agent the backup knows).
    const inbox = db.prepare(
      `INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through)
       SELECT @agent, @next, 0, @next - 1 WHERE EXISTS (SELECT 1 FROM agents WHERE id = @agent)
       ON CONFLICT (agent_id) DO UPDATE SET next_seq = max(next_seq, excluded.next_seq)`,
    );
    for (const i of target.inboxes) inbox.run({ agent: i.agent_id, next: i.next_seq });
    db.prepare("UPDATE agents SET online = 0, key_hash = lower(hex(randomblob(32)))").run();
    // The replaced file's audit entries the backup does not hold (those written after it: a
    // revocation, an earlier restore, alerts) are kept, after the backup's own, in their order.
    const known = db.prepare("SELECT 1 FROM audit_events WHERE seq = ? AND at_ms = ? AND kind = ? AND detail = ?");
    const keep = db.prepare("INSERT INTO audit_events (at_ms, project, kind, detail) VALUES (?, ?, ?, ?)");
    for (const a of target.audit) if (known.get(a.seq, a.at_ms, a.kind, a.detail) === undefined) keep.run(a.at_ms, a.project, a.kind, a.detail);
  })();
}

const errnoOf = (e: unknown) => (e as { code?: string }).code ?? "";

/**
 * A file-system failure (ENOSPC, EACCES, ..., or SQLite's CANTOPEN, FULL, IOERR) as the refusal
 * `runtime_path_invalid`; refusals and anything else pass through.
 */
function writeRefusal(e: unknown, what: string): unknown {
  if (e instanceof StoreOpenError || e instanceof BackupError) return e;
  if (/^(E[A-Z]+|SQLITE_(CANTOPEN|FULL|IOERR|READONLY|PERM)\w*)$/.test(errnoOf(e))) {
    return new StoreOpenError("runtime_path_invalid", `${what}: ${(e as Error).message}`);
  }
  return e;
}

/**
 * Gives the finished file `from` the name `to`, never replacing an existing `to` (backup_exists):
 * link() refuses an existing name atomically where rename() would replace it; on a file system
 * without hard links, an exclusive copy does the same.
 */
function placeNew(from: string, to: string): void {
  const exists = () => new BackupError("backup_exists", `${to} appeared while the backup was written; nothing overwritten`);
  try {
    fs.linkSync(from, to);
  } catch (e) {
    if (errnoOf(e) === "EEXIST") throw exists();
    if (!["EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS", "EXDEV"].includes(errnoOf(e))) throw e;
    try {
      fs.copyFileSync(from, to, fs.constants.COPYFILE_EXCL);
    } catch (e2) {
      throw errnoOf(e2) === "EEXIST" ? exists() : e2;
    }
  }
}

/** The manifest as JSON: one line per field, and one per resource. */
function manifestText({ fences, ...head }: BackupManifest): string {
  const lines = fences.map((f) => `    ${JSON.stringify(f)}`).join(",\n");
  const list = fences.length === 0 ? "[]" : `[\n${lines}\n  ]`;
  return `${JSON.stringify(head, null, 2).slice(0, -2)},\n  "fences": ${list}\n}\n`;
}

/**
 * Writes a consistent copy of the store at `dbPath` to `out` while a hub may be writing it, and
 * `<out>.manifest.json` beside it (written last: a backup without its manifest is incomplete).
 * Throws BackupError `backup_exists` when either is already there (nothing is overwritten, also
 * against a concurrent backup to the same name), StoreOpenError when the source is not a store
 * this release can read. The copy is a single file in rollback-journal mode.
 */
export async function backupTo(
  dbPath: string,
  out: string,
  meta: { hubVersion: string; nowMs: number },
): Promise<BackupManifest> {
  const manifestPath = manifestPathOf(out);
  for (const p of [out, manifestPath]) {
    if (fs.existsSync(p)) throw new BackupError("backup_exists", `${p} already exists; backups are never overwritten`);
  }
  if (dbPath === ":memory:" || !fs.existsSync(dbPath)) {
    throw new StoreOpenError("runtime_path_invalid", `no store at ${dbPath}`);
  }
  checkDataPath(dbPath);
  try {
    makeDirs(path.dirname(path.resolve(out)));
  } catch (e) {
    throw new StoreOpenError("runtime_path_invalid", `cannot create the directory of ${out}: ${(e as Error).message}`);
  }
  const tmp = `${out}.tmp-${process.pid}`;
  const tmpManifest = `${manifestPath}.tmp-${process.pid}`;
  try {
    let source: Database.Database | undefined;
    try {
      try {
        // Read-write (a read-only connection cannot always join a WAL database), but never written.
        source = new Database(dbPath, { fileMustExist: true });
        checkVersion(source, dbPath);
      } catch (e) {
        throw asOpenRefusal(e, dbPath);
      }
      // The copy holds every digest: it is the operator's alone from its first byte (SQLite
      // would create it under the umask), and never a file someone else placed there.
      fs.rmSync(tmp, { force: true });
      fs.writeFileSync(tmp, "", { mode: 0o600, flag: "wx" });
      await source.backup(tmp, { progress: () => allPages });
    } finally {
      source?.close();
    }
    const copy = new Database(tmp);
    let version: number;
    let fences: ReturnType<typeof readFences>;
    try {
      copy.pragma("journal_mode = DELETE"); // one self-contained file
      version = checkVersion(copy, tmp);
      const check = copy.pragma("quick_check", { simple: true });
      if (check !== "ok") throw new StoreOpenError("runtime_store_invalid", `the copy of ${dbPath} fails quick_check: ${String(check)}`);
      fences = readFences(copy);
    } finally {
      copy.close();
    }
    fs.chmodSync(tmp, 0o600); // agent key digests and tokens: readable by the operator only
    fsyncFile(tmp);
    const manifest: BackupManifest = {
      format: manifestFormat,
      file: path.basename(out),
      bytes: fs.statSync(tmp).size,
      sha256: sha256Of(tmp),
      schemaVersion: version,
      hubVersion: meta.hubVersion,
      createdAt: new Date(meta.nowMs).toISOString(),
      fenceBase: fences.fenceBase,
      fences: fences.fences,
    };
    fs.writeFileSync(tmpManifest, manifestText(manifest), { mode: 0o600 });
    fsyncFile(tmpManifest);
    placeNew(tmp, out);
    try {
      placeNew(tmpManifest, manifestPath); // last: a backup without its manifest is incomplete
    } catch (e) {
      fs.rmSync(out, { force: true }); // ours: placeNew made it
      throw e;
    }
    fsyncDir(path.dirname(path.resolve(out)));
    return manifest;
  } catch (e) {
    throw writeRefusal(e, `cannot write the backup ${out}`);
  } finally {
    for (const p of [tmp, ...companionsOf(tmp), tmpManifest]) fs.rmSync(p, { force: true });
  }
}

/** Reads and checks the manifest and the file's hash; throws BackupError `backup_corrupt`. */
export function readManifest(from: string): BackupManifest {
  const manifestPath = manifestPathOf(from);
  let manifest: BackupManifest;
  try {
    manifest = JSON.parse(fs.readFileSync(manifestPath, "utf8")) as BackupManifest;
  } catch (e) {
    throw new BackupError("backup_corrupt", `cannot read the manifest ${manifestPath}: ${(e as Error).message}`);
  }
  if (manifest?.format !== manifestFormat || typeof manifest.sha256 !== "string" || !Number.isInteger(manifest.schemaVersion)) {
    throw new BackupError("backup_corrupt", `${manifestPath} is not a ${manifestFormat} manifest`);
  }
  let actual: string;
  try {
    actual = sha256Of(from);
  } catch (e) {
    throw new BackupError("backup_corrupt", `cannot read the backup ${from}: ${(e as Error).message}`);
  }
  if (actual !== manifest.sha256) {
    throw new BackupError("backup_corrupt", `${from} does not match its manifest (sha256 ${actual}, manifest says ${manifest.sha256})`);
  }
  return manifest;
}

/**
 * Restores the backup `from` into `dataPath`, for a hub that is not running there. Checks the
 * manifest and hash (`backup_corrupt`) and the schema (`runtime_schema_newer`), takes the data
 * file's process lock (`runtime_store_locked` while a hub holds it), prepares a copy beside the
 * target (migrated to this release's schema, fence bumped by `margin`, leases released), removes
 * the target's stale `-wal`/`-shm`, and renames the copy into place. Until that rename the
 * target is only read: the project tokens it holds as revoked stay revoked in the copy.
 */
export function restoreFrom(options: { from: string; dataPath: string; margin: number }): RestoreSummary {
  const { from, dataPath, margin } = options;
  if (!Number.isSafeInteger(margin) || margin < 1 || margin > maxFenceMargin) {
    throw new RangeError(`fence margin must be an integer in 1..${maxFenceMargin}`);
  }
  if (dataPath === ":memory:") throw new StoreOpenError("runtime_path_invalid", "cannot restore into :memory:");
  const manifest = readManifest(from);
  if (manifest.schemaVersion > schemaVersion) {
    throw new StoreOpenError(
      "runtime_schema_newer",
      `${from} has schema ${manifest.schemaVersion}, newer than this hub's ${schemaVersion}; restore it with a newer kxm-hub`,
    );
  }
  checkDataPath(dataPath);
  // What a refused restore made, to take away again: a restore that changes nothing leaves nothing.
  const dir = path.dirname(path.resolve(dataPath));
  const madeDir = !fs.existsSync(dir);
  const hadLock = fs.existsSync(lockPathOf(dataPath));
  try {
    makeDirs(dir);
  } catch (e) {
    throw new StoreOpenError("runtime_path_invalid", `cannot create the directory of ${dataPath}: ${(e as Error).message}`);
  }
  const lock = lockStore(dataPath);
  let restored = false;
  const tmp = `${dataPath}.restore-${process.pid}`;
  const target = targetFacts(dataPath);
  try {
    // What a restore stopped hard (SIGKILL, a power loss) left under this name: its hot rollback
    // journal would be rolled into the fresh copy, refused then as damaged or, worse, mixed in.
    // The store's lock is held: no other restore uses the name.
    for (const p of [tmp, ...companionsOf(tmp)]) fs.rmSync(p, { force: true });
    fs.copyFileSync(from, tmp);
    if (sha256Of(tmp) !== manifest.sha256) throw new BackupError("backup_corrupt", `${from} changed while it was copied`);
    let summary: RestoreSummary;
    const db = new Database(tmp);
    try {
      db.pragma("journal_mode = DELETE");
      const version = checkVersion(db, from);
      openSchema(db); // migrates an older backup and checks its shape
      // Never below what the replaced file had handed out (a backup restored twice, or an older
      // one after a newer), then the margin above that.
      keepAhead(db, target);
      const before = readFences(db);
      const highest = before.fences.reduce((m, f) => Math.max(m, f.fencingToken), before.fenceBase);
      if (highest + margin > Number.MAX_SAFE_INTEGER) {
        throw new BackupError("backup_corrupt", `${from} holds token ${highest}, and a margin of ${margin} above it would pass ${Number.MAX_SAFE_INTEGER}: no token could be handed out safely`);
      }
      const keptRevoked = keepTokens(db, target.tokens, Date.now());
      const bumped = bumpFence(db, margin, { backup: path.basename(from), highestTokenBefore: highest, keptRevoked });
      summary = {
        schemaVersion: version,
        resources: bumped.resources,
        leasesReleased: bumped.leasesReleased,
        margin,
        fenceBase: before.fenceBase + margin,
        highestTokenBefore: highest,
      };
    } catch (e) {
      throw asOpenRefusal(e, from);
    } finally {
      db.close();
    }
    fsyncFile(tmp);
    // The old file's WAL must not be replayed onto the restored one: remove it before the rename.
    for (const p of companionsOf(dataPath)) fs.rmSync(p, { force: true });
    fs.renameSync(tmp, dataPath);
    restored = true;
    fsyncDir(path.dirname(path.resolve(dataPath)));
    return summary;
  } catch (e) {
    throw writeRefusal(e, `cannot restore into ${dataPath}`);
  } finally {
    for (const p of [tmp, ...companionsOf(tmp)]) fs.rmSync(p, { force: true });
    lock.release();
    if (!restored && !fs.existsSync(dataPath)) {
      if (!hadLock) fs.rmSync(lockPathOf(dataPath), { force: true });
      if (madeDir) {
        try {
          fs.rmdirSync(dir); // only when empty
        } catch {
          // Something else is in it now: it stays.
        }
      }
    }
  }
}
