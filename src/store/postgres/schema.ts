import fs from "node:fs";
import path from "node:path";
import type pg from "pg";
import { StoreOpenError } from "../store.js";
import { packagePath } from "../../package-root.js";

/**
 * The PostgreSQL schema's version lives in `kxm_schema` (one row). Files `migrations/NNN-*.sql`
 * each bring the schema to version NNN; the newest is this release's. Every replica migrates on
 * open under one advisory lock, so N hubs starting together migrate once; a database of a newer
 * release is refused with the same code as a newer SQLite file.
 */
const migrationsDir = packagePath("src", "store", "postgres", "migrations");

const migrations = fs
  .readdirSync(migrationsDir)
  .filter((f) => /^\d{3}-.*\.sql$/.test(f))
  .sort()
  .map((f) => ({ version: Number(f.slice(0, 3)), sql: fs.readFileSync(path.join(migrationsDir, f), "utf8") }));

export const schemaVersion = migrations[migrations.length - 1]!.version;

/** Any constant that no other user of the database would pick for pg_advisory_xact_lock. */
const migrationLock = 0x6b786d01; // "kxm" 1

/** Brings the database to `schemaVersion`, or refuses it (StoreOpenError). */
/**
 * A migration that PostgreSQL refused for what the database already holds (a table of that name
 * that is not ours: SQLSTATE class 42, duplicate or undefined objects, wrong columns) is the
 * database's shape, as the SQLite store says of a file it did not make: one refusal line, not an
 * internal error with the driver's trace. Anything else (a lost connection) passes through.
 */
function shapeRefusal(e: unknown, version: number): unknown {
  const code = (e as { code?: unknown }).code;
  if (typeof code !== "string" || !code.startsWith("42")) return e;
  return new StoreOpenError(
    "runtime_schema_shape_invalid",
    `the database holds objects kxm-hub did not make (migration ${version}: ${(e as Error).message}): give kxm-hub a database of its own`,
  );
}

export async function migrate(client: pg.ClientBase): Promise<void> {
  await client.query("BEGIN");
  try {
    await client.query("SELECT pg_advisory_xact_lock($1)", [migrationLock]);
    await client.query("CREATE TABLE IF NOT EXISTS kxm_schema (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL)");
    const row = (await client.query<{ version: number }>("SELECT version FROM kxm_schema WHERE id = 1")).rows[0];
    const current = row?.version ?? 0;
    if (current > schemaVersion) {
      throw new StoreOpenError(
        "runtime_schema_newer",
        `the database has schema version ${current}, newer than this hub's ${schemaVersion}: run a newer kxm-hub`,
      );
    }
    for (const m of migrations) {
      if (m.version <= current) continue;
      await client.query(m.sql).catch((e: unknown) => {
        throw shapeRefusal(e, m.version);
      });
    }
    if (current < schemaVersion) {
      await client.query(
        "INSERT INTO kxm_schema (id, version) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET version = excluded.version",
        [schemaVersion],
      );
    }
    await client.query("COMMIT");
  } catch (e) {
    await client.query("ROLLBACK").catch(() => {});
    throw e;
  }
}
