import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { backupTo, manifestPathOf, type BackupManifest } from "../../src/store/sqlite/backup.js";
import { schemaVersion } from "../../src/store/sqlite/schema.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { ChildHubs } from "../fixtures/child-hub.js";
import { expectRefusal, runCli } from "../fixtures/cli.js";
import { clientFor, hubClients, protocols, withHeaders, type HubClients } from "../fixtures/clients.js";
import { refusalOf } from "../fixtures/rpc.js";
import { jsonOf, startTestHub } from "../fixtures/hub.js";

/**
 * `kxm-hub backup` / `kxm-hub restore` against real hub processes (docs/operations.md, "Backup and
 * restore"; decision D45: restore never reissues a token; one process per data file). Agents acquire and
 * release leases over every protocol while the backup is taken and after it; the restored hub's
 * next grant on every resource must be above every token handed out before the backup AND
 * after it, a resource first leased after the backup included.
 */

const RESOURCES = ["alpha", "beta", "gamma", "delta"];
const LATE = "late"; // first leased after the backup: the backup has no row for it
const WORKERS = 6;

const hubs = new ChildHubs();
const dirs: string[] = [];
afterEach(() => {
  hubs.killAll();
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-backup-cli-"));
  dirs.push(d);
  return d;
}

async function registerAgents(url: string, n: number) {
  const register = clientFor(PresenceService, protocols[0].make(url, []));
  const agents: { name: string; headers: Record<string, string> }[] = [];
  for (let i = 0; i < n; i++) {
    const r = await register.registerAgent({ name: `worker-${i}`, project: "p" });
    agents.push({ name: `worker-${i}`, headers: { "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey } });
  }
  return agents;
}

const connect = (url: string, agents: { headers: Record<string, string> }[]): HubClients[] =>
  agents.map((a, i) => hubClients(protocols[i % protocols.length]!.make(url, [withHeaders(a.headers)])));

/** Workers loop acquire -> release over `resources()` until `stop()`; every token is recorded. */
async function hammer(clients: HubClients[], resources: () => string[], stop: () => boolean, onGrant: (r: string, t: number) => void) {
  await Promise.all(
    clients.map(async (c, w) => {
      for (let i = w; !stop(); i++) {
        const list = resources();
        const name = list[i % list.length]!;
        try {
          const r = await c.leases.acquireLease({ name, ttlMs: 5_000 });
          onGrant(name, Number(r.lease!.fencingToken));
          await c.leases.releaseLease({ name, fencingToken: r.lease!.fencingToken });
        } catch (e) {
          expect(["LEASE_HELD", "LEASE_NOT_FOUND", "LEASE_SUPERSEDED"]).toContain(refusalOf(e).reason);
        }
      }
    }),
  );
}

/** Counts grants; `reach(n)` resolves once n were made (no polling, no sleeps). */
function grantCounter() {
  let count = 0;
  const waiters: { n: number; resolve: () => void }[] = [];
  return {
    get count() {
      return count;
    },
    add() {
      count++;
      for (const w of waiters.filter((x) => x.n <= count)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    },
    reach: (n: number) => (count >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve }))),
  };
}

describe("backup and restore of a running hub", () => {
  it("a backup taken under load restores to a hub that grants above every token handed out before and after it", async () => {
    const dir = tempDir();
    const dataPath = path.join(dir, "state", "kxm.db");
    const out = path.join(dir, "backups", "kxm-backup.db");
    const first = await hubs.start(dir, dataPath);
    const agents = await registerAgents(first.url, WORKERS);

    const highest = new Map<string, number>();
    const grants = grantCounter();
    let late = false;
    let stop = false;
    const load = hammer(
      connect(first.url, agents),
      () => (late ? [...RESOURCES, LATE] : RESOURCES),
      () => stop,
      (name, token) => {
        grants.add();
        highest.set(name, Math.max(highest.get(name) ?? 0, token));
      },
    );
    await grants.reach(100);
    const grantsAtBackup = grants.count;
    const backup = await runCli(["backup", "--data-path", dataPath, "--out", out]);
    const grantsDuringBackup = grants.count - grantsAtBackup;
    late = true;
    await grants.reach(grants.count + 200);
    // the hub holds its file: a restore now is refused, and the hub keeps serving
    const locked = await runCli(["restore", "--from", out, "--data-path", dataPath]);
    stop = true;
    await load;

    expect(backup.code, backup.stderr).toBe(0);
    expect(backup.stdout).toContain(`written to ${out}`);
    expect(grantsDuringBackup, "grants while the backup ran").toBeGreaterThan(0);
    expectRefusal(locked, "runtime_store_locked");
    expect(highest.get(LATE), "grants on a resource the backup does not know").toBeGreaterThan(0);

    const manifest = JSON.parse(fs.readFileSync(manifestPathOf(out), "utf8")) as BackupManifest;
    expect(manifest.schemaVersion).toBe(schemaVersion);
    expect(manifest.fences.map((f) => f.name).sort()).toEqual([...RESOURCES].sort());
    for (const f of manifest.fences) expect(f.fencingToken).toBeLessThanOrEqual(highest.get(f.name)!);

    first.child.kill("SIGTERM");
    await first.exited;
    const restore = await runCli(["restore", "--from", out, "--data-path", dataPath]);
    expect(restore.code, restore.stderr).toBe(0);
    expect(restore.stdout).toContain("every fence raised by 1000000");

    const second = await hubs.start(dir, dataPath);
    // The restore ended every agent's instance: an old key is refused, and the agent registers
    // again (resuming under its name).
    const [old] = connect(second.url, agents);
    expect(refusalOf(await old!.leases.acquireLease({ name: "any", ttlMs: 5_000 }).catch((e: unknown) => e)).reason).toBe("INVALID_AGENT_IDENTITY");
    const [agent] = connect(second.url, await registerAgents(second.url, 1));
    for (const name of [...RESOURCES, LATE]) {
      // every lease was released by the restore: nobody holds one, so the grant is immediate
      const r = await agent!.leases.acquireLease({ name, ttlMs: 5_000 });
      const token = Number(r.lease!.fencingToken);
      expect(token, `${name}: next grant after the restore`).toBeGreaterThan(highest.get(name)!);
      expect(token, name).toBeGreaterThan(1_000_000);
    }
    second.child.kill("SIGTERM");
    await second.exited;
  }, 40_000);

  it("one process per data file: a second hub is refused (runtime_store_locked) and the first keeps serving", async () => {
    const dir = tempDir();
    const dataPath = path.join(dir, "state", "kxm.db");
    const first = await hubs.start(dir, dataPath);
    const second = await runCli([], {
      env: { KXM_PORT: "0", KXM_DATA_PATH: dataPath, KXM_LOG_PATH: path.join(dir, "second.jsonl") },
    });
    expectRefusal(second, "runtime_store_locked");
    expect(fs.existsSync(path.join(dir, "second.jsonl"))).toBe(false);
    expect(await (await fetch(`${first.url}/ready`)).json()).toEqual({ ok: true, storage: "sqlite" });
    const [agent] = await registerAgents(first.url, 1);
    const [c] = connect(first.url, [agent!]);
    expect(Number((await c!.leases.acquireLease({ name: "x", ttlMs: 5_000 })).lease!.fencingToken)).toBe(1);
  });

  it("refuses a tampered backup (backup_corrupt) and one of a newer schema (runtime_schema_newer)", async () => {
    const dir = tempDir();
    const source = path.join(dir, "source.db");
    await new SqliteStore({ path: source, synchronous: "full" }).close();
    const good = path.join(dir, "good.db");
    const manifest = await backupTo(source, good, { hubVersion: "0", nowMs: 0 });

    const tampered = path.join(dir, "tampered.db");
    const bytes = fs.readFileSync(good);
    bytes[100] ^= 1;
    fs.writeFileSync(tampered, bytes);
    fs.copyFileSync(manifestPathOf(good), manifestPathOf(tampered));

    const newer = path.join(dir, "newer.db");
    fs.copyFileSync(good, newer);
    const db = new Database(newer);
    db.pragma(`user_version = ${schemaVersion + 1}`);
    db.close();
    const sha256 = createHash("sha256").update(fs.readFileSync(newer)).digest("hex");
    fs.writeFileSync(manifestPathOf(newer), JSON.stringify({ ...manifest, schemaVersion: schemaVersion + 1, sha256 }));

    const target = path.join(dir, "target", "kxm.db");
    const [corrupt, tooNew, noManifest] = await Promise.all([
      runCli(["restore", "--from", tampered, "--data-path", target]),
      runCli(["restore", "--from", newer, "--data-path", target]),
      runCli(["restore", "--from", source, "--data-path", target]),
    ]);
    expectRefusal(corrupt, "backup_corrupt");
    expectRefusal(tooNew, "runtime_schema_newer");
    expectRefusal(noManifest, "backup_corrupt");
    expect(fs.existsSync(path.dirname(target))).toBe(false);
  });
});

describe("restore against what a backup must not undo (a review)", () => {
  it("a backup taken before a project had a token of its own restores with the project still closed to the admin token", async () => {
    const dir = tempDir();
    const dataPath = path.join(dir, "kxm.db");
    const out = path.join(dir, "before-token.db");
    const ADMIN = "tok-admin-review";
    const admin = { authorization: `Bearer ${ADMIN}` };
    const config = { dataPath, authToken: ADMIN };
    {
      await using t = await startTestHub({ config });
      await t.register("worker", "p", ADMIN);
    }
    expect((await runCli(["backup", "--data-path", dataPath, "--out", out])).code).toBe(0);
    let made: { token: { tokenId: string }; secret: string };
    {
      await using t = await startTestHub({ config });
      made = await jsonOf(await t.rest("/v1/ops/projects/p/tokens", { headers: admin, json: { scope: "agent" } }));
      expect((await t.rest("/v1/agents/register", { headers: admin, json: { name: "intruder", project: "p" } })).status).toBe(401);
    }
    const restored = await runCli(["restore", "--from", out, "--data-path", dataPath]);
    expect(restored.code, restored.stderr).toBe(0);
    await using t = await startTestHub({ config });
    const after = await t.rest("/v1/agents/register", { headers: admin, json: { name: "intruder", project: "p" } });
    expect(after.status, await after.clone().text()).toBe(401);
    // The token made after the backup is kept, revoked: its secret does not work either.
    expect((await t.rest("/v1/agents/register", { headers: { authorization: `Bearer ${made.secret}` }, json: { name: "holder", project: "p" } })).status).toBe(401);
    const audit = await jsonOf(await t.rest("/v1/ops/audit", { headers: admin }));
    expect(audit.events.find((e: { kind: string }) => e.kind === "restore").detail).toMatchObject({ keptRevoked: "1" });
  }, 60_000);

  it("refuses a backup that carries a trigger (no kxm-hub schema has one): it could undo the fence raise", async () => {
    const dir = tempDir();
    const source = path.join(dir, "source.db");
    await new SqliteStore({ path: source, synchronous: "full" }).close();
    const db = new Database(source);
    db.prepare("INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at) VALUES ('p', 'db', NULL, NULL, 7, 0, 0)").run();
    db.exec(`CREATE TRIGGER keep_low AFTER UPDATE OF fencing_token ON leases WHEN NEW.fencing_token > OLD.fencing_token + 1
             BEGIN UPDATE leases SET fencing_token = OLD.fencing_token WHERE project = NEW.project AND name = NEW.name; END`);
    db.close();
    const out = path.join(dir, "hostile.db");
    await backupTo(source, out, { hubVersion: "0", nowMs: 0 });
    const dataPath = path.join(dir, "target.db");
    const r = await runCli(["restore", "--from", out, "--data-path", dataPath]);
    expectRefusal(r, "runtime_schema_shape_invalid");
    expect(r.stderr).toContain("trigger keep_low");
    expect(fs.existsSync(dataPath)).toBe(false);
  });

  it("refuses a backup whose token is so high that no margin fits below 2^53, in one line", async () => {
    const dir = tempDir();
    const source = path.join(dir, "source.db");
    await new SqliteStore({ path: source, synchronous: "full" }).close();
    const db = new Database(source);
    db.prepare("INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at) VALUES ('p', 'db', NULL, NULL, ?, 0, 0)").run(Number.MAX_SAFE_INTEGER - 10);
    db.close();
    const out = path.join(dir, "big.db");
    await backupTo(source, out, { hubVersion: "0", nowMs: 0 });
    expectRefusal(await runCli(["restore", "--from", out, "--data-path", path.join(dir, "target.db")]), "backup_corrupt");
  });

  it("a restore refused for a damaged backup leaves nothing at the target it made", async () => {
    const dir = tempDir();
    const source = path.join(dir, "source.db");
    await new SqliteStore({ path: source, synchronous: "full" }).close();
    const out = path.join(dir, "trunc.db");
    await backupTo(source, out, { hubVersion: "0", nowMs: 0 });
    fs.truncateSync(out, 4096 * 2);
    const m = JSON.parse(fs.readFileSync(manifestPathOf(out), "utf8")) as BackupManifest;
    const bytes = fs.readFileSync(out);
    fs.writeFileSync(manifestPathOf(out), JSON.stringify({ ...m, sha256: createHash("sha256").update(bytes).digest("hex"), bytes: bytes.length }));
    const target = path.join(dir, "fresh", "kxm.db");
    const r = await runCli(["restore", "--from", out, "--data-path", target]);
    expectRefusal(r, "runtime_store_invalid");
    expect(fs.existsSync(path.dirname(target))).toBe(false);
  });

  it("a flag parseArgs refuses is one invalid_config line", async () => {
    expectRefusal(await runCli(["restore", "--from", "/nonexistent.db", "--bump-fence", "-5"]), "invalid_config");
  });
});
