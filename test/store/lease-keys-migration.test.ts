import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { AgentCaller } from "../../src/caller.js";
import { createBus } from "../../src/events/bus.js";
import { createLeases, type LeaseChange } from "../../src/lease/leases.js";
import { schemaVersion } from "../../src/store/sqlite/schema.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { StoreOpenError } from "../../src/store/store.js";
import { FakeClock } from "../fixtures/fake-clock.js";

/**
 * Migration 009 (decision D44): leases move from the joined key `<project>/<name>` to the pair
 * (project, name). Under version 8 project `alpha` with lease `repo/main` and project
 * `alpha/repo` with lease `main` were one row, so a version-8 file holds one row for both; after
 * the migration each pair has its own row, each with the old token as its floor, and the holder
 * stays with the pair of its own project.
 */

const migrationsDir = path.resolve(import.meta.dirname, "../../src/store/sqlite/migrations");
const T = Date.UTC(2026, 0, 1, 12, 0, 0);

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-009-"));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A file as hub schema version 8 left it: migrations 006..008 applied, then `sql`. */
function version8(sql: string): string {
  const file = path.join(dir, "kxm.db");
  const db = new Database(file);
  for (const f of fs.readdirSync(migrationsDir).filter((f) => /^00[678]-.*\.sql$/.test(f)).sort()) {
    db.exec(fs.readFileSync(path.join(migrationsDir, f), "utf8"));
  }
  db.pragma("user_version = 8");
  db.exec(sql);
  db.close();
  return file;
}

const agent = (id: string, project: string, name: string) =>
  `INSERT INTO agents (id, project, name, name_key, purpose, key_hash, connected_at, last_seen_at, online)
   VALUES ('${id}', '${project}', '${name}', '${name}', 'testing', '00', ${T}, ${T}, 1);`;
const lease = (resource: string, project: string, name: string, holder: [string, string] | null, token: number, expiresAtMs: number) =>
  `INSERT INTO leases (resource, project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at)
   VALUES ('${resource}', '${project}', '${name}', ${holder ? `'${holder[0]}', '${holder[1]}'` : "NULL, NULL"}, ${token}, ${T - 60_000}, ${expiresAtMs});`;

const builder: AgentCaller = { kind: "agent", agentId: "agt_builder", agentName: "builder", project: "alpha" };
const second: AgentCaller = { kind: "agent", agentId: "agt_second", agentName: "second", project: "alpha" };
const robot: AgentCaller = { kind: "agent", agentId: "agt_robot", agentName: "robot", project: "alpha/repo" };

const fixture = [
  agent("agt_builder", "alpha", "builder"),
  agent("agt_second", "alpha", "second"),
  agent("agt_robot", "alpha/repo", "robot"),
  // alpha's repo/main, held by alpha's builder and lapsed; the same key as alpha/repo's `main`.
  lease("alpha/repo/main", "alpha", "repo/main", ["agt_builder", "builder"], 4, T - 1_000),
  // alpha's released floor.
  lease("alpha/repo/old", "alpha", "repo/old", null, 9, T - 30_000),
  // alpha/repo's own live lease `dev`.
  lease("alpha/repo/dev", "alpha/repo", "dev", ["agt_robot", "robot"], 2, T + 60_000),
  // alpha's repo/ci as version 8 left it after alpha/repo's robot took it over through the alias.
  lease("alpha/repo/ci", "alpha", "repo/ci", ["agt_robot", "robot"], 7, T + 60_000),
  // a holder the file no longer knows stays where it was.
  lease("beta/x", "beta", "x", ["agt_gone", "gone"], 3, T + 60_000),
].join("\n");

type Row = [project: string, name: string, holder: string | null, token: number];

function rows(file: string): Row[] {
  const db = new Database(file, { readonly: true });
  try {
    return (
      db.prepare("SELECT project, name, holder_agent_id, fencing_token FROM leases ORDER BY project, name").all() as {
        project: string;
        name: string;
        holder_agent_id: string | null;
        fencing_token: number;
      }[]
    ).map((r) => [r.project, r.name, r.holder_agent_id, r.fencing_token]);
  } finally {
    db.close();
  }
}

const open = (file: string, clock?: FakeClock) => new SqliteStore({ path: file, synchronous: "full", ...(clock && { clock }) });

describe("migration 009: leases keyed by (project, name)", () => {
  it("gives every pair an old key stood for its own row and token; holders stay with their own project", async () => {
    const file = version8(fixture);
    await open(file).close();
    expect(rows(file)).toEqual<Row[]>([
      ["alpha", "repo/ci", null, 7],
      ["alpha", "repo/dev", null, 2],
      ["alpha", "repo/main", "agt_builder", 4],
      ["alpha", "repo/old", null, 9],
      ["alpha/repo", "ci", "agt_robot", 7],
      ["alpha/repo", "dev", "agt_robot", 2],
      ["alpha/repo", "main", null, 4],
      ["alpha/repo", "old", null, 9],
      ["beta", "x", "agt_gone", 3],
    ]);
    const db = new Database(file, { readonly: true });
    expect(db.pragma("user_version", { simple: true })).toBe(schemaVersion);
    const columns = db.prepare("SELECT name, pk FROM pragma_table_info('leases') ORDER BY cid").all();
    expect(columns).not.toContainEqual(expect.objectContaining({ name: "resource" }));
    expect(columns.filter((c) => (c as { pk: number }).pk > 0)).toEqual([
      { name: "project", pk: 1 },
      { name: "name", pk: 2 },
    ]);
    expect(db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'leases_expires'").all()).toHaveLength(1);
    db.close();
  });

  it("the next grant on each pair is its floor + 1, and each holder keeps its own lease", async () => {
    const clock = new FakeClock(T);
    const store = open(version8(fixture), clock);
    const leases = createLeases({ store, clock, observer: { log: () => {}, count: () => {} }, bus: createBus<LeaseChange>((c) => c.project) });
    const token = async (caller: AgentCaller, name: string) => (await leases.acquire(caller, { name })).lease;

    // alpha's lapsed repo/main is taken over above its token; alpha/repo's `main` starts above it too.
    expect(await token(second, "repo/main")).toMatchObject({ resource: "alpha/repo/main", project: "alpha", fencingToken: 5 });
    expect(await token(robot, "main")).toMatchObject({ resource: "alpha/repo/main", project: "alpha/repo", fencingToken: 5 });
    expect((await leases.get(builder, { name: "repo/main" })).lease.holderAgentId).toBe("agt_second");
    expect((await leases.get(robot, { name: "main" })).lease.holderAgentId).toBe("agt_robot");

    // the released floor is a floor for both pairs.
    expect((await token(builder, "repo/old")).fencingToken).toBe(10);
    expect((await token(robot, "old")).fencingToken).toBe(10);

    // the robot still holds what it believed it held (ci through the alias, and its own dev)...
    expect((await leases.renew(robot, { name: "ci", fencingToken: 7 })).lease.fencingToken).toBe(7);
    expect((await leases.renew(robot, { name: "dev", fencingToken: 2 })).lease.fencingToken).toBe(2);
    // ...and alpha gets its repo/ci and repo/dev back above every token handed out for them.
    expect((await token(builder, "repo/ci")).fencingToken).toBe(8);
    expect((await token(builder, "repo/dev")).fencingToken).toBe(3);
    // the unknown holder is untouched.
    expect(await store.leases.getLease({ project: "beta", name: "x" })).toMatchObject({ holderAgentId: "agt_gone", fencingToken: 3 });
    await store.close();
  });

  it("refuses a hand-edited file where two rows claim one pair, and leaves it at version 8", () => {
    const file = version8(
      lease("alpha/repo/main", "alpha", "repo/main", null, 4, T) + lease("not-the-join", "alpha", "repo/main", null, 6, T),
    );
    let code: string | undefined;
    try {
      open(file);
    } catch (e) {
      expect(e).toBeInstanceOf(StoreOpenError);
      code = (e as StoreOpenError).code;
    }
    expect(code).toBe("runtime_schema_shape_invalid");
    const db = new Database(file, { readonly: true });
    expect(db.pragma("user_version", { simple: true })).toBe(8);
    expect(db.prepare("SELECT count(*) AS n FROM leases").get()).toEqual({ n: 2 });
    db.close();
  });
});
