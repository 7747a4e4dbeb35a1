import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { JsonObject } from "@bufbuild/protobuf";
import type { HubConfig } from "../../src/config.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { createDatabase } from "../fixtures/postgres.js";
import { syncEvent } from "../sync/fixtures.js";
import {
  ADMIN,
  MANAGED,
  PROJECTS,
  TARGET,
  type AuthEnv,
  type Creds,
  type Json,
  type ManagedName,
  type Seed,
  type SeedAgent,
  type SeedProject,
  type SeedToken,
} from "./matrix.cases.js";

/** The matrix's hubs: configuration, seed, state fingerprints, and the live changes streams are probed with. */

export const KEEPALIVE_MS = 1_000;

/** A seeded hub, its configuration as the model sees it, and the state every case starts from. */
export interface MatrixHub {
  t: TestHub;
  seed: Seed;
  auth: AuthEnv;
  baseline: Map<string, string[]>;
}

/**
 * One hub reused while cases leave it untouched; a case that changed anything discards it, and the
 * next case gets a fresh hub in the seeded state. The state is seeded over the API once per file
 * (and configuration) and then copied: the seeded store (a SQLite file on tmpfs, or on PostgreSQL
 * a database that then serves as the template of the next ones) is restored under a new hub whose
 * clock reads the seed's time. Seeding anew each time was two thirds of the matrix's time.
 */
export class HubPool {
  private hub?: Promise<MatrixHub>;
  private restored?: { close(): Promise<void> };
  constructor(private readonly withAdmin = true) {}
  get(): Promise<MatrixHub> {
    return (this.hub ??= restore(this.withAdmin).then((r) => ((this.restored = r), r.hub)));
  }
  async discard(): Promise<void> {
    const h = this.hub;
    this.hub = undefined;
    if (!h) return;
    await h.catch(() => undefined);
    const r = this.restored;
    this.restored = undefined;
    await r?.close();
  }
}

/** The seeded state a file's pools restore, by configuration; `dropMatrixSeeds` (afterAll) removes them. */
interface SeededState {
  config: Partial<HubConfig>;
  seed: Seed;
  auth: AuthEnv;
  nowMs: number;
  /** A SQLite file to copy, or a PostgreSQL database to use as a template. */
  file?: string;
  database?: { server: string; name: string };
}
const seeded = new Map<boolean, Promise<SeededState>>();
const scratch = fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir();
let dir: string | undefined;
let copies = 0;
const workDir = () => (dir ??= fs.mkdtempSync(path.join(scratch, "kxm-matrix-")));

export async function dropMatrixSeeds(): Promise<void> {
  seeded.clear();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
  dir = undefined;
}

const tokenOf = (seed: Seed, project: string, auth: AuthEnv) => seed.projects[project]?.token ?? auth.admin;

async function seedOnce(withAdmin: boolean): Promise<SeededState> {
  const tokens: Record<string, string> = {};
  for (const p of PROJECTS) if ("token" in p) tokens[p.name] = p.token;
  const auth: AuthEnv = { tokens, loopback: true, ...(withAdmin && { admin: ADMIN }) };
  const config: Partial<HubConfig> = { projectTokens: tokens, authToken: auth.admin, streamKeepAliveMs: KEEPALIVE_MS, shutdownGraceMs: 200 };
  const server = process.env.KXM_TEST_POSTGRES_URL;
  const id = `matrix_${process.pid}_${++copies}`;
  const database = server ? { server, name: id } : undefined;
  const file = server ? undefined : path.join(workDir(), `${id}.db`);
  const where = database ? { databaseUrl: await createDatabase(server!, database.name) } : { dataPath: file };
  const t = await startTestHub({ config: { ...config, ...where } });
  const seed = await seedHub(t, auth);
  const nowMs = t.clock.now();
  await t.close();
  return { config, seed, auth, nowMs, file, database };
}

/** A hub on a copy of the seeded state, and how to close it and remove the copy. */
async function restore(withAdmin: boolean): Promise<{ hub: MatrixHub; close(): Promise<void> }> {
  let state = seeded.get(withAdmin);
  if (!state) seeded.set(withAdmin, (state = seedOnce(withAdmin)));
  const { config, seed, auth, nowMs, file, database } = await state;
  const id = `matrix_${process.pid}_${++copies}`;
  let where: Partial<HubConfig>;
  let copy: string | undefined;
  if (database) where = { databaseUrl: await createDatabase(database.server, id, database.name) };
  else {
    copy = path.join(workDir(), `${id}.db`);
    // Closed, the seeding hub checkpointed its log into the file; a log left beside it goes along.
    fs.copyFileSync(file!, copy);
    if (fs.existsSync(`${file}-wal`)) fs.copyFileSync(`${file}-wal`, `${copy}-wal`);
    where = { dataPath: copy };
  }
  const t = await startTestHub({ clock: new FakeClock(nowMs), config: { ...config, ...where } });
  // A SQLite hub's start takes every agent offline (nobody is connected yet): the seeded agents
  // call again, and 5 s pass, so any activity write shows, as after the seed.
  if (!database) {
    const live = [...seed.agents.values()].filter((a) => a.live);
    await Promise.all(
      live.map(async (a) => {
        const headers = { ...bearerHeader(tokenOf(seed, a.project, auth)), "x-kxm-agent-id": a.id, "x-kxm-agent-key": a.key };
        const res = await t.rest(`/v1/agents/${a.id}/heartbeat`, { json: {}, headers });
        if (!res.ok) throw new Error(`restore: heartbeat of ${a.name}: ${res.status} ${await res.text()}`);
      }),
    );
    t.clock.advance(5_000);
  }
  const hub = { t, seed, auth, baseline: await fingerprint(t, seed) };
  return {
    hub,
    close: async () => {
      await t.close();
      if (copy) for (const f of [copy, `${copy}-wal`, `${copy}-shm`]) fs.rmSync(f, { force: true });
    },
  };
}

const bearerHeader = (b: string | undefined): Record<string, string> => (b ? { authorization: `Bearer ${b}` } : {});
export const headersOf = (c: Creds): Record<string, string> => ({
  ...bearerHeader(c.bearer),
  ...(c.agentId !== undefined && { "x-kxm-agent-id": c.agentId }),
  ...(c.agentKey !== undefined && { "x-kxm-agent-key": c.agentKey }),
});

/**
 * Per project: agents `one` and `two` (alpha also an unregistered `gone`), `one` holding `main`
 * (alpha's `one` also `repo/main`, fencing token 2, which alpha/repo's `main` collides with under
 * a joined key), a message from `two` to `one` in flight (alpha also one from `one` to `two`), a
 * runtime heartbeat and one sync event. Then the managed project tokens (MANAGED), made through
 * OpsService as the admin (a loopback hub without an admin token takes every caller as admin),
 * their secrets, ids and labels counted as their project's. Then 5 s pass, so any activity write
 * shows.
 */
async function seedHub(t: TestHub, auth: AuthEnv): Promise<Seed> {
  const problems: string[] = [];
  const call = async (what: string, path: string, init: Parameters<TestHub["rest"]>[1]): Promise<Json> => {
    const res = await t.rest(path, init);
    const text = await res.text();
    if (!res.ok) problems.push(`${what}: ${res.status} ${text}`);
    return res.ok && text ? JSON.parse(text) : {};
  };
  const projects: Record<string, SeedProject> = {};
  const agents = new Map<string, SeedAgent>();
  let gone: SeedAgent | undefined;
  let sentByOne = "";
  for (const p of PROJECTS) {
    const token = "token" in p ? p.token : auth.admin;
    const h = bearerHeader(token);
    const register = async (suffix: string): Promise<SeedAgent> => {
      const name = `${p.code}-${suffix}`;
      const body = await call(`register ${name}`, "/v1/agents/register", { json: { name, project: p.name }, headers: h });
      if (!body.agent) throw new Error(`seed: ${problems.join("; ")}`);
      const a = { id: body.agent.id, key: body.agentKey, name, project: p.name, live: true };
      agents.set(a.id, a);
      return a;
    };
    const ah = (a: SeedAgent) => ({ ...h, "x-kxm-agent-id": a.id, "x-kxm-agent-key": a.key });
    const one = await register("one");
    const two = await register("two");
    const lease = (a: SeedAgent, name: string, verb: string, json: JsonObject) =>
      call(`${p.name}: ${verb} ${name}`, `/v1/leases/${encodeURIComponent(name)}/${verb}`, { json, headers: ah(a) });
    if (p.name === TARGET) {
      await lease(one, "repo/main", "acquire", { ttlMs: 60_000 });
      await lease(one, "repo/main", "release", { fencingToken: 1 });
      const again = await lease(one, "repo/main", "acquire", { ttlMs: 60_000 });
      if (again.lease?.fencingToken !== 2) problems.push(`alpha: repo/main granted token ${again.lease?.fencingToken}, want 2`);
    }
    const main = await lease(one, "main", "acquire", { ttlMs: 60_000 });
    if (main.lease && (main.lease.fencingToken !== 1 || main.lease.project !== p.name)) {
      problems.push(`${p.name}: main granted as ${JSON.stringify(main.lease)}`);
    }
    const m1 = await call(`${p.name}: send`, "/v1/messages", { json: { target: one.id, content: `secret-${p.code}-m1` }, headers: ah(two) });
    if (p.name === TARGET) {
      const m2 = await call(`${p.name}: send 2`, "/v1/messages", { json: { target: two.id, content: `secret-${p.code}-m2` }, headers: ah(one) });
      sentByOne = m2.message?.id ?? "";
      const g = await register("gone");
      await call("unregister gone", `/v1/agents/${g.id}`, { method: "DELETE", headers: ah(g) });
      gone = { ...g, live: false };
      agents.set(g.id, gone);
    }
    const runtimeId = `rtm_${p.code}runtime`;
    const syncProjectId = `prj_${p.code}project`;
    const runId = `run_${p.code}run001`;
    await call(`${p.name}: runtime`, "/v1/runtime/presence", { json: { project: p.name, runtimeId }, headers: h });
    const event = syncEvent({ projectId: syncProjectId, runId, homeRuntimeId: runtimeId, sourceEventId: `evt_${p.code}event1` });
    const pushed = await call(`${p.name}: push`, "/v1/sync/events", { json: { project: p.name, runtimeId, events: [event] }, headers: h });
    if (pushed.results?.[0]?.outcome !== "accepted") problems.push(`${p.name}: push answered ${JSON.stringify(pushed)}`);
    const message = m1.message?.id ?? "";
    const secrets = [one, two, ...(p.name === TARGET && gone ? [gone] : [])].flatMap((a) => [a.id, a.key, a.name]);
    secrets.push(message, `secret-${p.code}-m1`, runtimeId, syncProjectId, runId);
    if (p.name === TARGET) secrets.push(sentByOne, `secret-${p.code}-m2`, "xa-probe", "secret-xa-probe");
    projects[p.name] = { name: p.name, code: p.code, ...("token" in p && { token: p.token }), one, two, message, runtimeId, syncProjectId, runId, secrets, hidden: [] };
  }
  const admin = bearerHeader(auth.admin);
  const managed = {} as Record<ManagedName, SeedToken>;
  for (const m of MANAGED) {
    const tokens = `/v1/ops/projects/${encodeURIComponent(m.project)}/tokens`;
    const made = await call(`${m.name}: create`, tokens, { json: { scope: m.scope, label: m.label }, headers: admin });
    if (!made.secret || !made.token?.tokenId) throw new Error(`seed: ${problems.join("; ")}`);
    const revoked = "revoked" in m && m.revoked;
    if (revoked) {
      const r = await call(`${m.name}: revoke`, `${tokens}/${made.token.tokenId}`, { method: "DELETE", headers: admin });
      if (r.token?.state !== "revoked") problems.push(`${m.name}: revoke answered ${JSON.stringify(r)}`);
    }
    const hash = createHash("sha256").update(made.secret, "utf8").digest("hex");
    managed[m.name] = { name: m.name, id: made.token.tokenId, secret: made.secret, hash, project: m.project, scope: m.scope, label: m.label, live: !revoked };
    projects[m.project]!.secrets.push(made.token.tokenId, m.label, made.secret, hash);
    projects[m.project]!.hidden.push(made.secret, hash);
  }
  t.clock.advance(5_000);
  return { projects, gone: gone!, sentByOne, agents, managed, problems };
}

// --- state fingerprint ------------------------------------------------------------------------

interface RawDb {
  prepare(sql: string): { all(): Record<string, unknown>[] };
}

/**
 * Everything the hub stores, per project: every SQLite row (partitioned by its `project`,
 * `hub_project` or agent's project; managed tokens and audit entries by their project), and what
 * the HubStore answers for the project (agents with their online flag and lastSeen, leases with
 * tokens, each agent's messages, stream events and cursors, sync runs and cursors, its managed
 * tokens and audit entries). Rows of no project (or of the hub as a whole, an empty `project`)
 * go under "(unscoped)".
 */
/**
 * Audit entries the hub writes by design, without holding up the call that raised them (the
 * write lands a moment after the answer, so whether a snapshot sees it is timing, not the call):
 * - `auth_refusals`: a burst of refused authentications from one address (docs/security.md, the
 *   audit trail); the matrix's refused cases all come from 127.0.0.1; it is the hub's own, of no
 *   project, and names none;
 * - `sync_conflict`: a push that conflicts with a run, alerted to the run's own project.
 */
const alertByDesign = (kind: unknown) => kind === "auth_refusals" || kind === "sync_conflict";

export async function fingerprint(t: TestHub, seed: Seed): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  /** One entry per row or list element, so a diff names exactly what changed. */
  const add = (project: string, what: string, v: unknown) => {
    if (!out.has(project)) out.set(project, []);
    const items = Array.isArray(v) ? (v.length ? v : ["(none)"]) : [v];
    out.get(project)!.push(...items.map((x) => `${what} ${JSON.stringify(x)}`));
  };
  const store = t.hub.store;
  const db = (store as unknown as { db?: RawDb }).db;
  const names = new Set<string>(PROJECTS.map((p) => p.name));
  if (db && typeof db.prepare === "function") {
    const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all();
    const ownerOf = new Map(db.prepare("SELECT id, project FROM agents").all().map((r) => [r.id, r.project as string]));
    for (const { name } of tables) {
      const rows = db.prepare(`SELECT * FROM "${String(name)}"`).all();
      for (const r of rows) {
        // Alerts the hub raises by design (alertByDesign).
        if (name === "audit_events" && alertByDesign(r.kind)) continue;
        const project = ((r.project === "" ? undefined : r.project) ?? r.hub_project ?? ownerOf.get(r.agent_id) ?? "(unscoped)") as string;
        names.add(project);
        add(project, `row ${String(name)}`, r);
      }
    }
  }
  const nowMs = t.clock.now();
  const runs = Object.values(seed.projects).map((p) => [p.syncProjectId, p.runId] as const);
  for (const p of [...names].filter((n) => n !== "(unscoped)")) {
    const agents = await store.agents.listAgents(p);
    add(p, "agents", agents);
    add(p, "runtimes", await store.agents.listRuntimes(p));
    add(p, "leases", await store.leases.listLeases({ project: p, limit: 1_000, includeExpired: true, nowMs }));
    for (const a of agents) {
      add(p, `inbox state ${a.id}`, await store.messages.inboxState(a.id));
      add(p, `inbox events ${a.id}`, await store.messages.readInbox(a.id, 0, 1_000));
      for (const box of ["inbox", "outbox"] as const) {
        add(p, `${box} ${a.id}`, await store.messages.listMessages({ agentId: a.id, box, statuses: [], limit: 1_000 }));
      }
    }
    add(p, "sync runs", await store.sync.listSyncRuns(p));
    add(p, "tokens", await store.tokens.listTokens(p, 1_000));
    add(p, "audit", (await store.tokens.listAudit({ project: p, limit: 1_000 })).filter((e) => !alertByDesign(e.kind)));
    for (const [projectId, runId] of runs) add(p, `cursor ${projectId}/${runId}`, await store.sync.getSyncCursor(p, projectId, runId));
  }
  for (const v of out.values()) v.sort();
  return out;
}

/** Projects whose state differs, except `allowed`; each with what was removed and added. */
export function changes(before: Map<string, string[]>, after: Map<string, string[]>, allowed: string[]): string[] {
  const out: string[] = [];
  for (const p of new Set([...before.keys(), ...after.keys()])) {
    if (allowed.includes(p)) continue;
    const b = before.get(p) ?? [];
    const a = after.get(p) ?? [];
    const removed = b.filter((x) => !a.includes(x));
    const added = a.filter((x) => !b.includes(x));
    if (removed.length || added.length) out.push(`${p}: -${cut(removed.join(" | "))} +${cut(added.join(" | "))}`);
  }
  return out;
}

export const cut = (s: string, n = 400) => (s.length > n ? `${s.slice(0, n)}…` : s);
export const sameState = (a: Map<string, string[]>, b: Map<string, string[]>) => changes(a, b, []).length === 0;

/**
 * Changes in alpha while a stream is open: a lease, a new agent, a message to alpha's `one`.
 * Only alpha's streams may show them.
 */
export async function probeAlpha(h: MatrixHub): Promise<void> {
  const a = h.seed.projects[TARGET]!;
  const auth = { authorization: "Bearer tok-alpha" };
  const two = { ...auth, "x-kxm-agent-id": a.two.id, "x-kxm-agent-key": a.two.key };
  for (const [path, json, headers] of [
    ["/v1/leases/probe/acquire", { ttlMs: 60_000 }, two],
    ["/v1/agents/register", { name: "xa-probe", project: TARGET }, auth],
    ["/v1/messages", { target: a.one.id, content: "secret-xa-probe" }, two],
  ] as const) {
    const res = await h.t.rest(path, { json, headers });
    if (!res.ok) throw new Error(`probe ${path}: ${res.status} ${await res.text()}`);
  }
}
