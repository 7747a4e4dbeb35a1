import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { StoreOpenError } from "../../src/store/store.js";
import { firstSchemaVersion, schemaVersion } from "../../src/store/sqlite/schema.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";

/** Open refusals of the SQLite store (reference-hub.md §1.8), on files crafted with better-sqlite3. */

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-schema-"));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const open = (file: string) => new SqliteStore({ path: file, synchronous: "full" });

/** The StoreOpenError code of opening `file`; fails if it opens. */
function refusal(file: string): string {
  try {
    const s = open(file);
    void s.close();
  } catch (e) {
    expect(e).toBeInstanceOf(StoreOpenError);
    return (e as StoreOpenError).code;
  }
  throw new Error(`${file} opened, expected a refusal`);
}

/** Writes a database with `sql` and `user_version`. */
function craft(name: string, version: number, sql = ""): string {
  const file = path.join(dir, name);
  const db = new Database(file);
  if (sql) db.exec(sql);
  db.pragma(`user_version = ${version}`);
  db.close();
  return file;
}

const version = (file: string) => {
  const db = new Database(file, { readonly: true });
  try {
    return db.pragma("user_version", { simple: true }) as number;
  } finally {
    db.close();
  }
};

/** The reference hub's v3/v5 layout (record-in-JSON tables). */
const referenceLayout = `
  CREATE TABLE agents (id TEXT PRIMARY KEY, record TEXT NOT NULL);
  CREATE TABLE messages (id TEXT PRIMARY KEY, record TEXT NOT NULL);
  CREATE TABLE leases (resource TEXT PRIMARY KEY, holder_agent_id TEXT, fencing_token INTEGER, expires_at TEXT, record TEXT);`;

describe("SqliteStore open rules", () => {
  it("the hub's schema version is above the reference hub's 1..5", () => {
    expect(firstSchemaVersion).toBeGreaterThan(5);
    expect(schemaVersion).toBeGreaterThanOrEqual(firstSchemaVersion);
  });

  it("creates a fresh file, its parent directory with mode 0700, and keeps data across reopen", async () => {
    const file = path.join(dir, "nested", "state", "kxm.db");
    const s = open(file);
    expect(s.storage).toBe("sqlite");
    expect(await s.ready()).toBe(true);
    await s.leases.decideLease({ project: "p", name: "db" }, () => ({
      write: { project: "p", name: "db", holderAgentId: null, holderAgentName: null, fencingToken: 7, acquiredAtMs: 1, expiresAtMs: 2 },
      result: undefined,
    }));
    await s.close();
    expect(fs.statSync(path.join(dir, "nested", "state")).mode & 0o777).toBe(0o700);
    expect(fs.statSync(path.join(dir, "nested")).mode & 0o777).toBe(0o700);
    expect(version(file)).toBe(schemaVersion);
    const again = open(file);
    expect((await again.leases.getLease({ project: "p", name: "db" }))?.fencingToken).toBe(7);
    await again.close();
  });

  it("opens an empty version-0 file (created by someone else) and stamps it", async () => {
    const file = craft("empty.db", 0);
    await open(file).close();
    expect(version(file)).toBe(schemaVersion);
  });

  it("refuses a newer schema version: runtime_schema_newer, file untouched", () => {
    const file = craft("newer.db", schemaVersion + 1, "CREATE TABLE future (x TEXT);");
    expect(refusal(file)).toBe("runtime_schema_newer");
    expect(version(file)).toBe(schemaVersion + 1);
  });

  it("refuses version 0 with a user table: runtime_schema_shape_invalid, not stamped", () => {
    const file = craft("unversioned.db", 0, "CREATE TABLE notes (body TEXT);");
    expect(refusal(file)).toBe("runtime_schema_shape_invalid");
    expect(version(file)).toBe(0);
  });

  it.each([1, 3, 5])("refuses reference-hub layout version %i: runtime_schema_outdated, never migrated", (v) => {
    const file = craft(`ref-v${v}.db`, v, referenceLayout);
    expect(refusal(file)).toBe("runtime_schema_outdated");
    expect(version(file)).toBe(v);
    const db = new Database(file, { readonly: true });
    expect(db.prepare("SELECT name FROM pragma_table_info('agents')").all()).toEqual([{ name: "id" }, { name: "record" }]);
    db.close();
  });

  it("refuses the current version with a missing column: runtime_schema_shape_invalid", async () => {
    const file = path.join(dir, "kxm.db");
    await open(file).close();
    const db = new Database(file);
    db.exec("ALTER TABLE leases DROP COLUMN acquired_at");
    db.close();
    expect(refusal(file)).toBe("runtime_schema_shape_invalid");
  });

  it("refuses the current version with leases keyed by anything but (project, name): runtime_schema_shape_invalid", async () => {
    const file = path.join(dir, "kxm.db");
    await open(file).close();
    const db = new Database(file);
    db.exec(`CREATE TABLE joined AS SELECT * FROM leases; DROP TABLE leases;
      CREATE TABLE leases (project TEXT NOT NULL, name TEXT NOT NULL, holder_agent_id TEXT, holder_agent_name TEXT,
        fencing_token INTEGER NOT NULL, acquired_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (name));
      DROP TABLE joined;`);
    db.close();
    expect(refusal(file)).toBe("runtime_schema_shape_invalid");
  });

  it("refuses the current version with a missing table: runtime_schema_shape_invalid", async () => {
    const file = path.join(dir, "kxm.db");
    await open(file).close();
    const db = new Database(file);
    db.exec("DROP TABLE runtime_presence");
    db.close();
    expect(refusal(file)).toBe("runtime_schema_shape_invalid");
  });

  it("refuses a symlinked database path: runtime_path_invalid", async () => {
    const real = path.join(dir, "real.db");
    await open(real).close();
    const link = path.join(dir, "link.db");
    fs.symlinkSync(real, link);
    expect(refusal(link)).toBe("runtime_path_invalid");
    // a dangling link too
    const dangling = path.join(dir, "dangling.db");
    fs.symlinkSync(path.join(dir, "nowhere.db"), dangling);
    expect(refusal(dangling)).toBe("runtime_path_invalid");
    expect(fs.existsSync(path.join(dir, "nowhere.db"))).toBe(false);
  });

  it.each(["-wal", "-shm"])("refuses a symlinked %s companion: runtime_path_invalid", async (suffix) => {
    const file = path.join(dir, "kxm.db");
    await open(file).close();
    const target = path.join(dir, `elsewhere${suffix}`);
    fs.writeFileSync(target, "");
    fs.symlinkSync(target, `${file}${suffix}`);
    expect(refusal(file)).toBe("runtime_path_invalid");
  });

  it("refuses a directory at the path: runtime_path_invalid", () => {
    const file = path.join(dir, "kxm.db");
    fs.mkdirSync(file);
    expect(refusal(file)).toBe("runtime_path_invalid");
  });

  it("the CLI refuses to start on a newer file: non-zero exit, the code on stderr", async () => {
    const file = craft("newer.db", schemaVersion + 1);
    const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_")));
    Object.assign(env, { KXM_PORT: "0", KXM_DATA_PATH: file, KXM_LOG_PATH: path.join(dir, "hub.jsonl") });
    const child = spawn(process.execPath, ["bin/kxm-hub.mjs"], {
      cwd: path.resolve(import.meta.dirname, "../.."),
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code).not.toBe(0);
    expect(stderr).toContain("runtime_schema_newer");
    expect(stdout).not.toContain("listening");
    expect(version(file)).toBe(schemaVersion + 1);
  }, 20_000);
});
