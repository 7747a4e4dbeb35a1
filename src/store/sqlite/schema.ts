import fs from "node:fs";
import path from "node:path";
import type Database from "better-sqlite3";
import { StoreOpenError } from "../store.js";
import { packagePath } from "../../package-root.js";

/**
 * Schema versions live in `PRAGMA user_version`. Files `migrations/NNN-*.sql` each bring the
 * schema to version NNN; the newest one is the hub's version. Versions below the first
 * migration are other layouts (the reference hub's 1..5) and are refused, never converted.
 */
const migrationsDir = packagePath("src", "store", "sqlite", "migrations");

interface Migration {
  version: number;
  sql: string;
}

function loadMigrations(): Migration[] {
  return fs
    .readdirSync(migrationsDir)
    .filter((f) => /^\d{3}-.*\.sql$/.test(f))
    .sort()
    .map((f) => ({ version: Number(f.slice(0, 3)), sql: fs.readFileSync(path.join(migrationsDir, f), "utf8") }));
}

const migrations = loadMigrations();
export const firstSchemaVersion = migrations[0]!.version;
export const schemaVersion = migrations[migrations.length - 1]!.version;

/** Tables and columns the current version must have; checked on every open. */
const expectedShape: Record<string, string[]> = {
  agents: ["id", "project", "name", "name_key", "purpose", "model", "host", "key_hash", "connected_at", "last_seen_at", "online"],
  leases: ["project", "name", "holder_agent_id", "holder_agent_name", "fencing_token", "acquired_at", "expires_at"],
  runtime_presence: ["project", "runtime_id", "host", "registered_at", "heartbeat_at", "expiry_noted"],
  messages: [
    "id", "project", "from_id", "from_name", "to_id", "to_name", "content", "delivery", "hops", "max_hops", "seq",
    "correlation_id", "reply_to", "idempotency_key", "created_at", "expires_at", "delivered_at", "replied_at",
    "cancelled_at", "status", "reply_content", "reply_created_at", "error",
  ],
  inbox_events: ["agent_id", "seq", "kind", "message_id", "created_at"],
  inbox_streams: ["agent_id", "next_seq", "acked_cursor", "purged_through"],
  sync_events: [
    "project_id", "run_id", "sequence", "hub_project", "home_runtime_id", "event_type", "content_hash", "received_at",
    "occurred_at", "run_status", "workflow_id", "display_title", "record",
  ],
  sync_projects: ["project_id", "hub_project"],
  sync_runs: ["project_id", "run_id", "hub_project", "home_runtime_id", "cursor", "stored"],
  fence_base: ["id", "floor"],
  watch_heads: ["project", "stream", "head"],
  watch_changes: ["project", "stream", "seq", "at_ms", "body"],
  lease_waiters: ["project", "name", "seq", "id", "agent_id", "agent_name", "ttl_ms", "deadline_ms", "since_ms"],
  project_tokens: ["id", "project", "scope", "label", "hash", "created_at", "expires_at", "revoked_at", "expiry_noted"],
  audit_events: ["seq", "at_ms", "project", "kind", "detail"],
};

/**
 * Primary keys the current version must have, column by column. A key that pairs a project with
 * a name is two columns, never one joined string (decision D44; migration 009 for leases).
 */
const expectedKeys: Record<string, string[]> = {
  leases: ["project", "name"],
  agents: ["id"],
  runtime_presence: ["project", "runtime_id"],
  watch_heads: ["project", "stream"],
  watch_changes: ["project", "stream", "seq"],
};

/**
 * Refuses a path that is, or whose WAL/SHM companions are, a symlink, a file of several names (hard
 * links) or not a regular file.
 * Creates nothing (open.ts makes the directory).
 */
export function checkDataPath(file: string): void {
  for (const p of [file, `${file}-wal`, `${file}-shm`]) {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(p);
    } catch {
      continue;
    }
    if (st.isSymbolicLink() || !st.isFile()) {
      throw new StoreOpenError("runtime_path_invalid", `${p} must be a regular file, not a link or directory`);
    }
    // The lock and SQLite's WAL are named after the path: through a second name (a hard link)
    // another hub would take its own lock and WAL on the same file, and both would decide.
    if (st.nlink > 1) {
      throw new StoreOpenError("runtime_path_invalid", `${p} must have one name, not ${st.nlink} (hard links): a hub on another of its names would share it unlocked`);
    }
  }
}

/** Applies the open rules in one IMMEDIATE transaction; throws StoreOpenError. */
export function openSchema(db: Database.Database): void {
  db.transaction(() => {
    const version = db.pragma("user_version", { simple: true }) as number;
    const tables = (
      db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as {
        name: string;
      }[]
    ).map((r) => r.name);
    if (version > schemaVersion) {
      throw new StoreOpenError(
        "runtime_schema_newer",
        `store schema ${version} is newer than this hub's ${schemaVersion}; upgrade the hub`,
      );
    }
    if (version === 0) {
      if (tables.length > 0) {
        throw new StoreOpenError("runtime_schema_shape_invalid", "store has tables but no schema version");
      }
    } else if (version < firstSchemaVersion) {
      throw new StoreOpenError(
        "runtime_schema_outdated",
        `store schema ${version} is outdated and cannot be upgraded in place; move the file away to start afresh`,
      );
    }
    for (const m of migrations) {
      if (m.version > version) {
        try {
          db.exec(m.sql);
        } catch (e) {
          // The surrounding transaction rolls back: the file stays at its version, untouched.
          throw new StoreOpenError(
            "runtime_schema_shape_invalid",
            `store schema ${version} cannot be migrated to ${m.version}: ${(e as Error).message}`,
          );
        }
        db.pragma(`user_version = ${m.version}`);
      }
    }
    for (const [table, columns] of Object.entries(expectedShape)) {
      const info = db.prepare(`PRAGMA table_info(${table})`).all() as { name: string; pk: number }[];
      const have = new Set(info.map((c) => c.name));
      const missing = columns.filter((c) => !have.has(c));
      if (missing.length > 0) {
        throw new StoreOpenError(
          "runtime_schema_shape_invalid",
          have.size === 0 ? `store is missing table ${table}` : `table ${table} is missing ${missing.join(", ")}`,
        );
      }
      const key = info.filter((c) => c.pk > 0).sort((x, y) => x.pk - y.pk).map((c) => c.name);
      const wanted = expectedKeys[table];
      if (wanted && JSON.stringify(key) !== JSON.stringify(wanted)) {
        throw new StoreOpenError("runtime_schema_shape_invalid", `table ${table} must be keyed by (${wanted.join(", ")})`);
      }
    }
    // The store defines no trigger or view: one in a file (a restored backup) would act on the
    // hub's own writes, undoing a fence raise or a key rotation unseen.
    const foreign = db.prepare("SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')").all() as { type: string; name: string }[];
    if (foreign.length > 0) {
      throw new StoreOpenError("runtime_schema_shape_invalid", `store holds ${foreign.map((f) => `${f.type} ${f.name}`).join(", ")}, which no kxm-hub schema has`);
    }
  }).immediate();
}
