import type { JsonObject } from "@bufbuild/protobuf";
import { syncEvent } from "../sync/fixtures.js";

/**
 * The authorization matrix (docs/security.md; decisions D38, D44, D46): every RPC and
 * REST route × every class of caller, against a hub seeded with look-alike projects and managed
 * project tokens of every scope. This file holds the tables and the model of the documented rules
 * that computes each expected answer; matrix.harness.ts runs a case, matrix.{rpc,rest}.test.ts
 * run the tables over each face.
 */

export const ADMIN = "tok-admin";

/** The projects every hub of the matrix is seeded with; `alpha` is the target of every request. */
export const PROJECTS = [
  { name: "alpha", code: "xa", token: "tok-alpha" },
  { name: "alpha/repo", code: "xr", token: "tok-alpha-repo" }, // `/`-extension of alpha
  { name: "beta", code: "xb", token: "tok-beta" },
  { name: "alph", code: "xp" }, // prefix of alpha, no token of its own (the admin token is its token)
  { name: "alpha2", code: "x2" }, // alpha is its prefix, no token of its own
] as const;

export type ProjectName = (typeof PROJECTS)[number]["name"];
export const TARGET: ProjectName = "alpha";

/** What a managed project token may do: each scope allows what the ones after it allow. */
export type Scope = "agent" | "read" | "check";

/**
 * A documented auth rule (mirrors src/auth/rules.ts; matrix.rpc.test.ts checks they agree).
 * `scope`: what a managed token must allow for the call made without an agent (see needs).
 */
export type Rule = (
  | { kind: "agent"; idField?: string; checkedAgain?: true }
  | { kind: "project"; projectField: string }
  | { kind: "agentOrProject"; projectField: string }
  | { kind: "agentOrOperator"; projectField: string }
  | { kind: "operator"; projectField: string }
  | { kind: "adminConfigured" }
  | { kind: "public" }
) & { scope?: Scope };

/**
 * The managed project tokens the seed creates (OpsService, as the admin) once the rest is seeded:
 * in alpha one of each scope, one revoked, and a spare that RevokeProjectToken's row revokes; in
 * beta one of scope agent. Each label is a string only its project's members may see.
 */
export const MANAGED = [
  { name: "alpha agent", project: "alpha", scope: "agent", label: "xa-agent-token" },
  { name: "alpha read", project: "alpha", scope: "read", label: "xa-read-token" },
  { name: "alpha check", project: "alpha", scope: "check", label: "xa-check-token" },
  { name: "alpha revoked", project: "alpha", scope: "agent", label: "xa-revoked-token", revoked: true },
  { name: "alpha spare", project: "alpha", scope: "agent", label: "xa-spare-token" },
  { name: "beta agent", project: "beta", scope: "agent", label: "xb-agent-token" },
] as const satisfies readonly { name: string; project: ProjectName; scope: Scope; label: string; revoked?: boolean }[];

export type ManagedName = (typeof MANAGED)[number]["name"];

/** The form of a managed token's secret: `kxmpt_`, its id's 16 hex digits, `_`, 43 base64url characters. */
export const MANAGED_SECRET = /^kxmpt_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$/;

export interface SeedAgent {
  id: string;
  key: string;
  name: string;
  project: string;
  /** False once unregistered (its key rotated away). */
  live: boolean;
}

export interface SeedProject {
  name: string;
  code: string;
  token?: string;
  one: SeedAgent;
  two: SeedAgent;
  /** `one` holds `main` (token 1); in alpha it also holds `repo/main` (token 2). */
  message: string;
  runtimeId: string;
  syncProjectId: string;
  runId: string;
  /** Strings only this project's members may ever see. */
  secrets: string[];
  /** Strings no answer may carry, to anyone (its managed tokens' secrets and their hashes); also in `secrets`. */
  hidden: string[];
}

export interface SeedToken {
  name: ManagedName;
  /** `pt_` and 16 hex digits. */
  id: string;
  secret: string;
  /** SHA-256 of the secret (hex), what the hub stores. */
  hash: string;
  project: string;
  scope: Scope;
  label: string;
  /** False once revoked. */
  live: boolean;
}

export interface Seed {
  projects: Record<string, SeedProject>;
  /** alpha's unregistered agent (old key). */
  gone: SeedAgent;
  /** alpha: a message `one` sent to `two` (in flight; one may cancel it). */
  sentByOne: string;
  agents: Map<string, SeedAgent>;
  /** The managed project tokens, by name (MANAGED). */
  managed: Record<ManagedName, SeedToken>;
  /** Seeding steps the hub refused (expected none). */
  problems: string[];
}

/** What the hub is configured with, for the model. */
export interface AuthEnv {
  admin?: string;
  tokens: Record<string, string>;
  loopback: boolean;
}

export interface Creds {
  bearer?: string;
  agentId?: string;
  agentKey?: string;
}

// --- callers ----------------------------------------------------------------------------------

export interface CallerClass {
  name: string;
  /** The project the caller belongs to (own-project variants and the lease alias use it). */
  home: string;
  creds(s: Seed, env: AuthEnv): Creds;
}

const as = (a: SeedAgent) => ({ agentId: a.id, agentKey: a.key });
const tokenOf = (s: Seed, p: string, env: AuthEnv) => s.projects[p]!.token ?? env.admin;
const managed = (s: Seed, name: ManagedName) => s.managed[name].secret;

export const callers: CallerClass[] = [
  { name: "owner (alpha token + alpha agent)", home: "alpha", creds: (s) => ({ bearer: "tok-alpha", ...as(s.projects.alpha!.one) }) },
  { name: "no credentials", home: "alpha", creds: () => ({}) },
  { name: "wrong token + alpha agent", home: "alpha", creds: (s) => ({ bearer: "tok-wrong", ...as(s.projects.alpha!.one) }) },
  { name: "beta token + alpha agent", home: "beta", creds: (s) => ({ bearer: "tok-beta", ...as(s.projects.alpha!.one) }) },
  { name: "alpha token + beta agent", home: "alpha", creds: (s) => ({ bearer: "tok-alpha", ...as(s.projects.beta!.one) }) },
  {
    name: "alpha token + alpha agent id, wrong key",
    home: "alpha",
    creds: (s) => ({ bearer: "tok-alpha", agentId: s.projects.alpha!.one.id, agentKey: `key_${"0".repeat(32)}` }),
  },
  { name: "alpha token + unregistered agent's old key", home: "alpha", creds: (s) => ({ bearer: "tok-alpha", ...as(s.gone) }) },
  { name: "admin token", home: "alph", creds: (_s, env) => ({ bearer: env.admin }) },
  { name: "admin token + alpha agent", home: "alpha", creds: (s, env) => ({ bearer: env.admin, ...as(s.projects.alpha!.one) }) },
  { name: "beta identity", home: "beta", creds: (s, env) => ({ bearer: tokenOf(s, "beta", env), ...as(s.projects.beta!.one) }) },
  { name: "alpha2 identity (prefix)", home: "alpha2", creds: (s, env) => ({ bearer: tokenOf(s, "alpha2", env), ...as(s.projects.alpha2!.one) }) },
  { name: "alph identity (prefix)", home: "alph", creds: (s, env) => ({ bearer: tokenOf(s, "alph", env), ...as(s.projects.alph!.one) }) },
  {
    name: "alpha/repo identity (extension)",
    home: "alpha/repo",
    creds: (s, env) => ({ bearer: tokenOf(s, "alpha/repo", env), ...as(s.projects["alpha/repo"]!.one) }),
  },
  { name: "alpha/repo token only", home: "alpha/repo", creds: () => ({ bearer: "tok-alpha-repo" }) },
  // Managed project tokens (OpsService): scope agent does what the project's own token does,
  // read the operator's reads and watches and CheckFence, check CheckFence only.
  {
    name: "alpha managed agent token + alpha agent",
    home: "alpha",
    creds: (s) => ({ bearer: managed(s, "alpha agent"), ...as(s.projects.alpha!.one) }),
  },
  { name: "alpha managed agent token", home: "alpha", creds: (s) => ({ bearer: managed(s, "alpha agent") }) },
  { name: "alpha managed read token", home: "alpha", creds: (s) => ({ bearer: managed(s, "alpha read") }) },
  {
    name: "alpha managed read token + alpha agent",
    home: "alpha",
    creds: (s) => ({ bearer: managed(s, "alpha read"), ...as(s.projects.alpha!.one) }),
  },
  { name: "alpha managed check token", home: "alpha", creds: (s) => ({ bearer: managed(s, "alpha check") }) },
  { name: "alpha revoked managed token", home: "alpha", creds: (s) => ({ bearer: managed(s, "alpha revoked") }) },
  { name: "beta managed agent token", home: "beta", creds: (s) => ({ bearer: managed(s, "beta agent") }) },
];

// --- the model of the documented rules ------------------------------------------------------------

/** Who the hub must take the caller for: an agent, a project's operator, or the admin. */
export type As = { kind: "agent"; project: string; agentId: string } | { kind: "project"; project: string } | { kind: "admin" };
export type Authn = { as: As } | { refused: string };

/** Scopes from the least to the most a token may do. */
const scopeOrder: Scope[] = ["check", "read", "agent"];
const allows = (have: Scope, need: Scope) => scopeOrder.indexOf(have) >= scopeOrder.indexOf(need);

/**
 * The scope a managed token needs for a call under `rule` made without an agent: the rule's own,
 * else `read` for the reads and watches (agentOrProject, agentOrOperator), else `agent`. An
 * agent's calls (its id and key) always need `agent`.
 */
export const needs = (rule: Rule): Scope => rule.scope ?? (rule.kind === "agentOrProject" || rule.kind === "agentOrOperator" ? "read" : "agent");

/**
 * The bearer checked as `project`'s token for a call that needs `need`: "ok" or the refusal.
 * The project's configured token; else a bearer of the managed form must be a live managed token
 * of that project (invalid_auth) whose scope allows the call (token_scope_insufficient); else a
 * project with a token of its own (configured, or managed now or ever) takes nothing more; else
 * the admin token, and neither configured means open (docs/security.md).
 */
export function tokenCheck(env: AuthEnv, managed: SeedToken[], project: string, bearer: string | undefined, need: Scope): string {
  const own = Object.hasOwn(env.tokens, project) ? env.tokens[project] : undefined;
  if (own !== undefined && bearer === own) return "ok";
  if (bearer !== undefined && MANAGED_SECRET.test(bearer)) {
    const t = managed.find((m) => m.secret === bearer);
    if (!t || !t.live || t.project !== project) return "invalid_auth";
    return allows(t.scope, need) ? "ok" : "token_scope_insufficient";
  }
  if (own !== undefined || managed.some((m) => m.project === project)) return "invalid_auth";
  return env.admin === undefined || bearer === env.admin ? "ok" : "invalid_auth";
}

/** A project's own token, else the admin token; neither configured means open (docs/security.md). `managed`: the hub's managed tokens. */
export const accepts = (env: AuthEnv, project: string, bearer: string | undefined, managed: SeedToken[] = []): boolean =>
  tokenCheck(env, managed, project, bearer, "agent") === "ok";

export function authenticate(rule: Rule, env: AuthEnv, s: Pick<Seed, "agents" | "managed">, c: Creds, req: JsonObject): Authn {
  const managed = Object.values(s.managed);
  const agent = (id: string | undefined): Authn => {
    const a = id ? s.agents.get(id) : undefined;
    if (!a || !a.live || a.key !== c.agentKey) return { refused: "invalid_agent_identity" };
    const token = tokenCheck(env, managed, a.project, c.bearer, "agent");
    return token === "ok" ? { as: { kind: "agent", project: a.project, agentId: a.id } } : { refused: token };
  };
  /** The project's operator, by its token (the scope the rule needs). */
  const operator = (named: string): Authn => {
    const token = tokenCheck(env, managed, named, c.bearer, needs(rule));
    return token === "ok" ? { as: { kind: "project", project: named } } : { refused: token };
  };
  const project = (field: string) => String(req[field] ?? "");
  switch (rule.kind) {
    case "agent":
      return agent(rule.idField ? String(req[rule.idField] ?? "") : c.agentId);
    case "project":
      return operator(project(rule.projectField));
    case "agentOrProject":
      if (c.agentId !== undefined) return agent(c.agentId);
      // Decision D46: the admin (a configured admin token) may watch any named project.
      if (env.admin !== undefined && c.bearer === env.admin) return { as: { kind: "project", project: project(rule.projectField) } };
      return operator(project(rule.projectField));
    case "agentOrOperator": {
      // An operator read: an agent (or no project named) reads its own project; else the admin
      // (a loopback hub without an admin token takes every caller as admin) or the project's token.
      const named = project(rule.projectField);
      if (c.agentId !== undefined || named === "") return agent(c.agentId);
      const admin = env.admin === undefined ? env.loopback : c.bearer === env.admin;
      return admin ? { as: { kind: "project", project: named } } : operator(named);
    }
    case "operator": {
      // The operator's live views: the admin (as above) or the project's token, never an agent.
      const named = project(rule.projectField);
      const admin = env.admin === undefined ? env.loopback : c.bearer === env.admin;
      return admin ? { as: { kind: "project", project: named } } : operator(named);
    }
    case "adminConfigured":
      // Decision D46: a loopback hub without an admin token takes every caller as admin.
      if (env.admin === undefined) return env.loopback ? { as: { kind: "admin" } } : { refused: "admin_auth_not_configured" };
      return c.bearer === env.admin ? { as: { kind: "admin" } } : { refused: "invalid_auth" };
    case "public":
      return { as: { kind: "admin" } };
  }
}

// --- methods ----------------------------------------------------------------------------------

/** What a request builder knows: the seed and the caller's own project. */
export interface Ctx {
  s: Seed;
  home: string;
  /** alpha's lease name as the caller's project would spell it: `main` from alpha/repo aliases `alpha/repo/main`. */
  leaseName: string;
  leaseToken: number;
}

export const ctxFor = (s: Seed, home: string): Ctx =>
  home === "alpha/repo" ? { s, home, leaseName: "main", leaseToken: 1 } : { s, home, leaseName: "repo/main", leaseToken: 2 };

/** The answer a call must get once authenticated as `as`: "ok" or a refusal code. */
export type Expect = (as: As) => string;

export interface MethodRow {
  /** `<service type name>/<method>`; variants share it. */
  rpc: string;
  variant?: string;
  rule: Rule;
  request(c: Ctx): JsonObject;
  expect: Expect;
  /** Extra checks of a successful answer (payload as JSON); returns problems. */
  check?(as: As, payload: Json, c: Ctx): string[];
  /** The REST success status (default 200). */
  restStatus?: number;
  /** The admin's answer may name every project (ListProjects). */
  adminSeesAll?: boolean;
  /** The admin's call changes alpha, the project it names (its tokens). */
  adminWrites?: boolean;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;

const agentRule: Rule = { kind: "agent" };
const agentPath: Rule = { kind: "agent", idField: "agentId" };
/** An agent's call whose decision checks its caller again (D86). */
const deciding: Rule = { kind: "agent", checkedAgain: true };
const projectRule: Rule = { kind: "project", projectField: "project" };
const watcher: Rule = { kind: "agentOrProject", projectField: "project" };
const reader: Rule = { kind: "agentOrOperator", projectField: "project" };
const operatorRule: Rule = { kind: "operator", projectField: "project" };
const checker: Rule = { ...reader, scope: "check" };
const operatorRead: Rule = { kind: "operator", projectField: "project", scope: "read" };
const adminRule: Rule = { kind: "adminConfigured" };

const ok: Expect = () => "ok";
const inTarget = (a: As) => a.kind !== "agent" || a.project === TARGET;
/** Answers about alpha's objects: ok inside alpha, else the not-found that leaks nothing. */
const alphaOnly = (code: string): Expect => (a) => (inTarget(a) ? "ok" : code);
/** Lease calls: the alias name `main` from alpha/repo is alpha/repo's own lease. */
const leaseExpect: Expect = (a) => (a.kind === "agent" && a.project !== TARGET && a.project !== "alpha/repo" ? "lease_not_found" : "ok");
const projectOf = (a: As) => (a.kind === "admin" ? TARGET : a.project);
const sameProject = (what: string, list: Json[] | undefined, a: As) =>
  (list ?? []).filter((x) => x.project !== projectOf(a)).map((x) => `${what} of project ${x.project} listed to ${projectOf(a)}`);
const leaseOf = (a: As, p: Json) => (p.lease && p.lease.project !== projectOf(a) ? [`lease of project ${p.lease.project} answered to ${projectOf(a)}`] : []);
const num = (v: unknown) => Number(v ?? 0);
/** A stream of alpha must show the changes made in alpha while it is open (see probeAlpha). */
const seesProbe = (what: string) => (a: As, frames: Json) =>
  projectOf(a) !== TARGET || JSON.stringify(frames).includes(what) ? [] : [`alpha's stream missed the live change ${what}`];
/**
 * CheckFence never refuses a caller it authenticated: alpha's token (and alpha/repo's own `main`,
 * token 1) is current, with that project's lease; any other project knows neither (unknown).
 */
const fenceCheck = (checked: (c: Ctx) => { name: string; token: number }) => (a: As, p: Json, c: Ctx) => {
  const { name, token } = checked(c);
  const reason = String(p.reason ?? "").toLowerCase().replace(/^fence_reason_/, "");
  const current = projectOf(a) === TARGET || (projectOf(a) === "alpha/repo" && name === "main");
  const want = current ? { valid: true, reason: "current", token } : { valid: false, reason: "unknown", token: undefined };
  const got = { valid: p.valid === true, reason, token: p.lease ? num(p.lease.fencingToken) : undefined };
  return [...leaseOf(a, p), ...(JSON.stringify(got) === JSON.stringify(want) ? [] : [`fence ${JSON.stringify(got)}, want ${JSON.stringify(want)}`])];
};
const outcomeName = (v: unknown) => String(v ?? "").toLowerCase().replace(/^sync_outcome_/, "");
/** A token's scope and state as REST names them (Connect JSON: TOKEN_SCOPE_AGENT, TOKEN_STATE_LIVE). */
const scopeName = (v: unknown) => String(v ?? "").toLowerCase().replace(/^token_scope_/, "");
const stateName = (v: unknown) => String(v ?? "").toLowerCase().replace(/^token_state_/, "");
const auditKindName = (v: unknown) => String(v ?? "").toLowerCase().replace(/^audit_kind_/, "");
/** A secret or a hash in an answer about tokens: its field, or a managed secret's text. */
const secretsIn = (p: Json) => {
  const text = JSON.stringify(p);
  return [...(/"(secret|hash)"/i.test(text) ? ["a secret or hash field"] : []), ...(/kxmpt_/.test(text) ? ["a managed secret's text"] : [])];
};
const alphaEvent = (c: Ctx) => {
  const p = c.s.projects.alpha!;
  return syncEvent({ projectId: p.syncProjectId, runId: p.runId, homeRuntimeId: p.runtimeId, sequence: 2, sourceEventId: "evt_matrix0002" }) as JsonObject;
};

export const methodRows: MethodRow[] = [
  { rpc: "kxm.hub.v1.PresenceService/RegisterAgent", rule: projectRule, request: () => ({ name: "xa-new", project: "alpha" }), expect: ok, restStatus: 201 },
  { rpc: "kxm.hub.v1.PresenceService/Heartbeat", rule: agentPath, request: (c) => ({ agentId: c.s.projects.alpha!.one.id }), expect: ok },
  { rpc: "kxm.hub.v1.PresenceService/UnregisterAgent", rule: agentPath, request: (c) => ({ agentId: c.s.projects.alpha!.one.id }), expect: ok, restStatus: 204 },
  { rpc: "kxm.hub.v1.PresenceService/ListAgents", rule: reader, request: () => ({ includeOffline: true }), expect: ok, check: (a, p) => sameProject("agent", p.agents, a) },
  {
    rpc: "kxm.hub.v1.PresenceService/ListAgents",
    variant: "naming alpha (operator read)",
    rule: reader,
    request: () => ({ project: "alpha", includeOffline: true }),
    expect: ok,
    check: (a, p) => sameProject("agent", p.agents, a),
  },
  {
    rpc: "kxm.hub.v1.PresenceService/ReportRuntimePresence",
    rule: projectRule,
    request: (c) => ({ project: "alpha", runtimeId: c.s.projects.alpha!.runtimeId }),
    expect: ok,
  },
  { rpc: "kxm.hub.v1.PresenceService/WatchPresence", rule: watcher, request: () => ({ project: "alpha" }), expect: ok, check: seesProbe("xa-probe") },
  {
    rpc: "kxm.hub.v1.LeaseService/AcquireLease",
    rule: deciding,
    request: (c) => ({ name: c.leaseName, ttlMs: 60_000 }),
    expect: ok,
    check: (a, p) => [...leaseOf(a, p), ...(a.kind === "agent" && p.lease?.holderAgentId !== a.agentId ? ["lease answered with another holder"] : [])],
  },
  { rpc: "kxm.hub.v1.LeaseService/RenewLease", rule: deciding, request: (c) => ({ name: c.leaseName, fencingToken: c.leaseToken, ttlMs: 60_000 }), expect: leaseExpect, check: leaseOf },
  { rpc: "kxm.hub.v1.LeaseService/ReleaseLease", rule: deciding, request: (c) => ({ name: c.leaseName, fencingToken: c.leaseToken }), expect: leaseExpect },
  { rpc: "kxm.hub.v1.LeaseService/GetLease", rule: reader, request: (c) => ({ name: c.leaseName }), expect: leaseExpect, check: leaseOf },
  {
    rpc: "kxm.hub.v1.LeaseService/GetLease",
    variant: "naming alpha (operator read)",
    rule: reader,
    request: () => ({ project: "alpha", name: "repo/main" }),
    // An agent reads its own project whatever it names, and only alpha has a lease `repo/main`.
    expect: (a) => (a.kind === "agent" && a.project !== TARGET ? "lease_not_found" : "ok"),
    check: leaseOf,
  },
  {
    rpc: "kxm.hub.v1.LeaseService/CheckFence",
    rule: checker,
    request: (c) => ({ name: c.leaseName, fencingToken: c.leaseToken }),
    expect: ok,
    check: fenceCheck((c) => ({ name: c.leaseName, token: c.leaseToken })),
  },
  {
    rpc: "kxm.hub.v1.LeaseService/CheckFence",
    variant: "naming alpha (operator read)",
    rule: checker,
    request: () => ({ project: "alpha", name: "repo/main", fencingToken: 2 }),
    // An agent checks its own project whatever it names, and only alpha has a lease `repo/main`.
    expect: ok,
    check: fenceCheck(() => ({ name: "repo/main", token: 2 })),
  },
  { rpc: "kxm.hub.v1.LeaseService/ListLeases", rule: reader, request: () => ({ includeExpired: true }), expect: ok, check: (a, p) => sameProject("lease", p.leases, a) },
  {
    rpc: "kxm.hub.v1.LeaseService/ListLeases",
    variant: "naming alpha (operator read)",
    rule: reader,
    request: () => ({ project: "alpha", includeExpired: true }),
    expect: ok,
    check: (a, p) => sameProject("lease", p.leases, a),
  },
  { rpc: "kxm.hub.v1.LeaseService/WatchLeases", rule: watcher, request: () => ({ project: "alpha" }), expect: ok, check: seesProbe('"name":"probe"') },
  {
    rpc: "kxm.hub.v1.PeerService/SendMessage",
    rule: deciding,
    request: (c) => ({ target: c.s.projects.alpha!.two.id, content: "matrix hello" }),
    expect: alphaOnly("target_not_found"),
    restStatus: 202,
  },
  {
    rpc: "kxm.hub.v1.PeerService/SendMessage",
    variant: "target by name",
    rule: deciding,
    request: (c) => ({ target: c.s.projects.alpha!.two.name, content: "matrix hello" }),
    expect: alphaOnly("target_not_found"),
    restStatus: 202,
  },
  { rpc: "kxm.hub.v1.PeerService/AckMessage", rule: agentRule, request: (c) => ({ messageId: c.s.projects.alpha!.message }), expect: alphaOnly("message_not_found") },
  {
    rpc: "kxm.hub.v1.PeerService/ReplyMessage",
    rule: agentRule,
    request: (c) => ({ messageId: c.s.projects.alpha!.message, content: "matrix reply" }),
    expect: alphaOnly("message_not_found"),
  },
  { rpc: "kxm.hub.v1.PeerService/CancelMessage", rule: agentRule, request: (c) => ({ messageId: c.s.sentByOne }), expect: alphaOnly("message_not_found") },
  { rpc: "kxm.hub.v1.PeerService/GetMessage", rule: agentRule, request: (c) => ({ messageId: c.s.projects.alpha!.message }), expect: alphaOnly("message_not_found") },
  { rpc: "kxm.hub.v1.PeerService/ListMessages", rule: agentRule, request: () => ({}), expect: ok, check: (a, p) => sameProject("message", p.messages, a) },
  { rpc: "kxm.hub.v1.PeerService/Subscribe", rule: agentRule, request: () => ({ afterSeq: 0 }), expect: ok, check: seesProbe("secret-xa-probe") },
  {
    rpc: "kxm.hub.v1.PeerService/ReadInbox",
    rule: agentRule,
    request: () => ({ afterCursor: 0 }),
    expect: ok,
    check: (a, p) => sameProject("message", (p.events ?? []).map((e: Json) => e.message ?? e.reply ?? e.cancelled ?? e.expired), a),
  },
  {
    rpc: "kxm.hub.v1.SyncService/PushEvents",
    rule: projectRule,
    request: (c) => ({ project: "alpha", runtimeId: c.s.projects.alpha!.runtimeId, events: [alphaEvent(c)] }),
    expect: ok,
    check: (_a, p) => (outcomeName(p.results?.[0]?.outcome) === "accepted" ? [] : [`outcome ${JSON.stringify(p.results)}`]),
  },
  {
    rpc: "kxm.hub.v1.SyncService/PushEvents",
    variant: "alpha's run, pushed as the caller's project",
    rule: projectRule,
    request: (c) => ({ project: c.home, runtimeId: c.s.projects.alpha!.runtimeId, events: [alphaEvent(c)] }),
    expect: ok,
    check: (a, p) => {
      const want = projectOf(a) === TARGET ? "accepted" : "conflict";
      return outcomeName(p.results?.[0]?.outcome) === want ? [] : [`outcome ${JSON.stringify(p.results)}, want ${want}`];
    },
  },
  {
    rpc: "kxm.hub.v1.SyncService/GetCursor",
    rule: projectRule,
    request: (c) => ({ project: "alpha", projectId: c.s.projects.alpha!.syncProjectId, runId: c.s.projects.alpha!.runId }),
    expect: ok,
    check: (_a, p) => (num(p.cursor?.cursor) === 1 ? [] : [`cursor ${JSON.stringify(p.cursor)}`]),
  },
  {
    rpc: "kxm.hub.v1.SyncService/GetCursor",
    variant: "alpha's run, read as the caller's project",
    rule: projectRule,
    request: (c) => ({ project: c.home, projectId: c.s.projects.alpha!.syncProjectId, runId: c.s.projects.alpha!.runId }),
    expect: ok,
    check: (a, p) => {
      const want = projectOf(a) === TARGET ? 1 : 0;
      return num(p.cursor?.cursor) === want ? [] : [`cursor ${JSON.stringify(p.cursor)}, want ${want}`];
    },
  },
  { rpc: "kxm.hub.v1.OpsService/GetSnapshot", rule: adminRule, request: () => ({ project: "alpha" }), expect: ok },
  { rpc: "kxm.hub.v1.OpsService/ListProjects", rule: adminRule, request: () => ({}), expect: ok, adminSeesAll: true },
  { rpc: "kxm.hub.v1.OpsService/WatchProjects", rule: adminRule, request: () => ({}), expect: ok, adminSeesAll: true },
  {
    rpc: "kxm.hub.v1.OpsService/WatchOpenMessages",
    rule: operatorRead,
    request: () => ({ project: "alpha" }),
    expect: ok,
    check: seesProbe("OPEN_MESSAGE_CHANGE_KIND_SENT"),
  },
  { rpc: "kxm.hub.v1.OpsService/WatchRuns", rule: operatorRead, request: () => ({ project: "alpha" }), expect: ok },
  {
    rpc: "kxm.hub.v1.OpsService/WatchProject",
    rule: operatorRead,
    request: () => ({ project: "alpha" }),
    expect: ok,
    check: seesProbe("xa-probe"),
  },
  {
    rpc: "kxm.hub.v1.OpsService/ForceReleaseLease",
    rule: operatorRule,
    request: () => ({ project: "alpha", name: "repo/main" }),
    expect: ok,
    check: (a, p) => [...leaseOf(a, p), ...(num(p.lease?.fencingToken) === 2 ? [] : [`released ${JSON.stringify(p.lease)}`])],
  },
  {
    rpc: "kxm.hub.v1.OpsService/ForceReleaseLease",
    variant: "a token that is not the holder's",
    rule: operatorRule,
    request: () => ({ project: "alpha", name: "repo/main", fencingToken: 1 }),
    expect: () => "lease_superseded",
  },
  {
    rpc: "kxm.hub.v1.OpsService/EvictAgent",
    rule: operatorRule,
    request: (c) => ({ project: "alpha", agentId: c.s.projects.alpha!.one.id }),
    expect: ok,
    check: (_a, p) => [
      ...(p.agent?.project === TARGET && p.agent?.online !== true ? [] : [`evicted ${JSON.stringify(p.agent)}`]),
      ...((p.releasedLeases ?? []).every((l: Json) => l.project === TARGET) && (p.releasedLeases ?? []).length === 2 ? [] : [`released ${JSON.stringify(p.releasedLeases)}`]),
    ],
  },
  {
    rpc: "kxm.hub.v1.OpsService/EvictAgent",
    variant: "another project's agent, named under alpha",
    rule: operatorRule,
    request: (c) => ({ project: "alpha", agentId: c.s.projects.beta!.one.id }),
    expect: () => "target_not_found",
  },
  {
    // The secret is in this answer only: a new one of the managed form, none of the seeded ones.
    rpc: "kxm.hub.v1.OpsService/CreateProjectToken",
    rule: adminRule,
    request: () => ({ project: "alpha", label: "matrix-created" }),
    expect: ok,
    restStatus: 201,
    adminWrites: true,
    check: (_a, p, c) => {
      const t = p.token ?? {};
      const m = MANAGED_SECRET.exec(String(p.secret ?? ""));
      return [
        ...(t.project === TARGET && scopeName(t.scope) === "agent" && stateName(t.state) === "live" ? [] : [`created ${JSON.stringify(t)}`]),
        ...(m && `pt_${m[1]}` === t.tokenId ? [] : [`the secret is not of the managed form naming ${t.tokenId}`]),
        ...(Object.values(c.s.managed).some((x) => x.id === t.tokenId || x.secret === p.secret) ? ["answered a seeded token"] : []),
        ...secretsIn(t),
      ];
    },
  },
  {
    // alpha's tokens, every state, and never a secret (the leak check looks for the seeded ones).
    rpc: "kxm.hub.v1.OpsService/ListProjectTokens",
    rule: adminRule,
    request: () => ({ project: "alpha" }),
    expect: ok,
    check: (a, p, c) => {
      const want = Object.values(c.s.managed)
        .filter((t) => t.project === TARGET)
        .map((t) => `${t.id} ${t.scope} ${t.live ? "live" : "revoked"}`)
        .sort();
      const got = ((p.tokens ?? []) as Json[]).map((t) => `${t.tokenId} ${scopeName(t.scope)} ${stateName(t.state)}`).sort();
      return [
        ...sameProject("token", p.tokens, a),
        ...(JSON.stringify(got) === JSON.stringify(want) ? [] : [`listed ${JSON.stringify(got)}, want ${JSON.stringify(want)}`]),
        ...secretsIn(p),
      ];
    },
  },
  {
    // alpha's trail: the seed's token decisions in alpha (each created, the one revoked), never a secret.
    rpc: "kxm.hub.v1.OpsService/ListAuditEvents",
    rule: adminRule,
    request: () => ({ project: "alpha" }),
    expect: ok,
    check: (a, p, c) => {
      const alpha = Object.values(c.s.managed).filter((t) => t.project === TARGET);
      const want = [...alpha.map((t) => `token_created ${t.id}`), ...alpha.filter((t) => !t.live).map((t) => `token_revoked ${t.id}`)].sort();
      const got = ((p.events ?? []) as Json[]).map((e) => `${auditKindName(e.kind)} ${e.detail?.tokenId}`).sort();
      return [
        ...sameProject("audit event", p.events, a),
        ...(JSON.stringify(got) === JSON.stringify(want) ? [] : [`listed ${JSON.stringify(got)}, want ${JSON.stringify(want)}`]),
        ...secretsIn(p),
      ];
    },
  },
  {
    rpc: "kxm.hub.v1.OpsService/RevokeProjectToken",
    rule: adminRule,
    request: (c) => ({ project: "alpha", tokenId: c.s.managed["alpha spare"].id }),
    expect: ok,
    adminWrites: true,
    check: (_a, p, c) => {
      const t = p.token ?? {};
      const revoked = t.tokenId === c.s.managed["alpha spare"].id && t.project === TARGET && stateName(t.state) === "revoked";
      return [...(revoked ? [] : [`revoked ${JSON.stringify(t)}`]), ...secretsIn(t)];
    },
  },
];

/** REST routes outside the proto (src/ops/http.ts). */
export const opsRows: { path: string; rule: Rule }[] = [
  { path: "/metrics", rule: { kind: "adminConfigured" } },
  { path: "/health", rule: { kind: "public" } },
  { path: "/ready", rule: { kind: "public" } },
];

export const rowName = (r: MethodRow) => `${r.rpc.replace(/^kxm\.hub\.v1\./, "")}${r.variant ? ` (${r.variant})` : ""}`;
