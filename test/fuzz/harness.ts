// The hub the fuzz suites attack, the state they must leave alone, and the verdicts.
//
// One hub per test file (in memory, FakeClock frozen, rate limit off), seeded by valid requests:
// two agents of project p, a lease, two messages (one replied), a runtime and a run cursor. Each
// property run sends a batch of hostile requests, then checks /health answers 200 and that every
// store read (agents, leases via ListLeases and GetLease, both agents' messages, the run cursor,
// the operator snapshot, the write counters) equals what it was before the batch.
//
// Knobs: FUZZ_TLS=1 (the hub speaks TLS), FUZZ_SEED (default 0x6b786d), FUZZ_RUNS (`500` sets the runs of every property, `x4`
// multiplies the defaults), FUZZ_SURVEY=1 (record every distinct violation and print them in
// afterAll instead of failing at the first: the list to fix from), FUZZ_TIMEOUT_MS (5000).
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { syncEvent } from "../sync/fixtures.js";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import { closeH2Sessions, crashLog, sendH1, useTls, watchForCrashes } from "./raw.js";

/**
 * FUZZ_TLS=1: the world's hub speaks TLS (certificates made for the run) and every exchange goes
 * over it, on both HTTP versions (tls.fuzz.test.ts runs the properties so).
 */
const overTls = process.env.FUZZ_TLS === "1";
let certs: TestCerts | undefined;

export const SEED = Number(process.env.FUZZ_SEED ?? 0x6b786d);
export const SURVEY = process.env.FUZZ_SURVEY === "1";

/** The runs of one property: its default, or FUZZ_RUNS (`N` sets, `xN` multiplies). */
export function numRuns(defaultRuns: number): number {
  const v = process.env.FUZZ_RUNS?.trim();
  if (!v) return defaultRuns;
  if (v.startsWith("x")) return Math.max(1, Math.round(defaultRuns * Number(v.slice(1))));
  return Math.max(1, Number(v));
}

/** A test timeout that grows with FUZZ_RUNS (a run of a batch takes ~30-100 ms). */
export const timeoutFor = (defaultRuns: number): number => 60_000 + numRuns(defaultRuns) * 400;

/** fast-check parameters shared by every property: the fixed (overridable) seed and the runs. */
export const params = (defaultRuns: number) => ({ numRuns: numRuns(defaultRuns), seed: SEED });

export const ADMIN_TOKEN = "fuzz-admin";
export const PROJECT_TOKEN = "fuzz-p";
export const RUNTIME_ID = "rtm_runtime0001";
export const PROJECT_ID = "prj_project0001";
export const RUN_ID = "run_run0000001";

export interface World {
  t: TestHub;
  port: number;
  a: AgentCreds;
  b: AgentCreds;
  /** Message a → b, delivered and still open. */
  openMessageId: string;
  /** Message b → a, replied. */
  repliedMessageId: string;
  /** The store changed (or a call was accepted): the next batch starts on a freshly seeded hub, so shrinking replays see the same world. */
  dirty: boolean;
}

/** Starts the hub and makes the state that only valid requests made. */
export async function startWorld(): Promise<World> {
  watchForCrashes();
  if (overTls) certs ??= makeCerts();
  const tls = certs && { tlsCert: certs.server.cert, tlsKey: certs.server.key };
  useTls(certs && { ca: certs.ca.certPem });
  const t = await startTestHub({ config: { authToken: ADMIN_TOKEN, projectTokens: { p: PROJECT_TOKEN }, ...tls }, ...(certs && { ca: certs.ca.certPem }) });
  const port = Number(new URL(t.baseUrl).port);
  const a = await t.register("alpha", "p", PROJECT_TOKEN);
  const b = await t.register("beta", "p", PROJECT_TOKEN);
  const ok = async (res: Response, what: string) => {
    const text = await res.text();
    if (res.status >= 300) throw new Error(`seeding ${what}: ${res.status} ${text}`);
    return JSON.parse(text) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  };
  await ok(await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 600_000 }, headers: a.headers }), "lease");
  const open = await ok(await t.rest("/v1/messages", { json: { target: b.id, content: "hello" }, headers: a.headers }), "message");
  const other = await ok(await t.rest("/v1/messages", { json: { target: a.id, content: "ping" }, headers: b.headers }), "message 2");
  await ok(await t.rest(`/v1/messages/${other.message.id}/ack`, { json: {}, headers: a.headers }), "ack");
  await ok(await t.rest(`/v1/messages/${other.message.id}/reply`, { json: { content: "pong" }, headers: a.headers }), "reply");
  const bearer = { authorization: `Bearer ${PROJECT_TOKEN}` };
  await ok(await t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: RUNTIME_ID }, headers: bearer }), "runtime");
  const pushed = await ok(
    await t.rest("/v1/sync/events", { json: { project: "p", runtimeId: RUNTIME_ID, events: [syncEvent()] }, headers: bearer }),
    "sync",
  );
  if (pushed.results[0]?.outcome !== "accepted") throw new Error(`seeding sync: ${JSON.stringify(pushed)}`);
  return { t, port, a, b, openMessageId: open.message.id, repliedMessageId: other.message.id, dirty: false };
}

/** Replaces the hub of `w` (in place) by a freshly seeded one. */
export async function reseed(w: World): Promise<void> {
  closeH2Sessions();
  await w.t.close();
  Object.assign(w, await startWorld());
}

export async function stopWorld(w: World | undefined): Promise<void> {
  closeH2Sessions();
  await w?.t.close();
  certs?.remove();
  certs = undefined;
}

/** Counters that move only when a write was made. */
const writeCounters = [
  "registrations",
  "leasesGranted",
  "leasesReleased",
  "runtimeHeartbeats",
  "messagesSent",
  "messagesReplied",
  "messagesCancelled",
  "syncAccepted",
] as const;

export const counts = { requests: 0, reads: 0 };

/** Every store read the REST face offers, as one JSON value. */
export async function snapshot(w: World): Promise<unknown> {
  const read = async (path: string, headers: Record<string, string>) => {
    counts.reads++;
    const res = await w.t.rest(path, { headers, signal: AbortSignal.timeout(10_000) });
    const body = (await res.json()) as Record<string, unknown>;
    delete body.requestId; // differs per request, even for the same refusal
    return { status: res.status, body };
  };
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
  return {
    agents: await read("/v1/agents?includeOffline=true", w.a.headers),
    leases: await read("/v1/leases?includeExpired=true", w.a.headers),
    lease: await read("/v1/leases/db", w.a.headers),
    aInbox: await read("/v1/messages?box=inbox", w.a.headers),
    aOutbox: await read("/v1/messages?box=outbox", w.a.headers),
    bInbox: await read("/v1/messages?box=inbox", w.b.headers),
    open: await read(`/v1/messages/${w.openMessageId}`, w.a.headers),
    replied: await read(`/v1/messages/${w.repliedMessageId}`, w.b.headers),
    cursor: await read(`/v1/sync/runs/${PROJECT_ID}/${RUN_ID}/cursor?project=p`, { authorization: `Bearer ${PROJECT_TOKEN}` }),
    ops: await read("/v1/ops/snapshot?project=p", admin),
    counters: Object.fromEntries(writeCounters.map((c) => [c, w.t.counters.get(c) ?? 0])),
  };
}

/** The JSON paths where two values differ (at most 5). */
export function diff(a: unknown, b: unknown, path = "$", out: string[] = []): string[] {
  if (out.length >= 5) return out;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) {
    if (!Object.is(a, b)) out.push(`${path}: ${JSON.stringify(a)?.slice(0, 120)} -> ${JSON.stringify(b)?.slice(0, 120)}`);
    return out;
  }
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const k of keys) diff((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${path}.${k}`, out);
  return out;
}

// Verdicts

export interface Violation {
  /** What went wrong, without the request's particulars: the survey's grouping key. */
  signature: string;
  /** The request and answer, for the report. */
  detail: string;
}

const survey = new Map<string, { count: number; detail: string }>();

/** Fails the property (or, with FUZZ_SURVEY=1, records the violations and lets it go on). */
export function verdict(violations: Violation[]): void {
  if (violations.length === 0) return;
  if (SURVEY) {
    for (const v of violations) {
      const seen = survey.get(v.signature);
      if (seen) seen.count++;
      else survey.set(v.signature, { count: 1, detail: v.detail });
    }
    return;
  }
  throw new Error(violations.map((v) => `${v.signature}\n    ${v.detail}`).join("\n"));
}

/** Prints the request count (and the survey) of one fuzz file. */
export function report(face: string): void {
  console.log(`fuzz: ${counts.requests} requests (${face}; plus ${counts.reads} state reads; seed ${SEED})`);
  if (crashLog.length) console.log(`fuzz: ${crashLog.length} uncaught exceptions in the hub; first:\n${crashLog[0]}`);
  if (!SURVEY) return;
  const rows = [...survey.entries()].sort(([a], [b]) => a.localeCompare(b));
  console.log(`fuzz survey (${face}): ${rows.length} distinct violations`);
  for (const [sig, { count, detail }] of rows) console.log(`- [${count}x] ${sig}\n    e.g. ${detail}`);
}

/** What one request of a batch came to. */
export interface Checked {
  violations: Violation[];
  /** A request allowed to succeed did: the state may have changed legitimately. */
  accepted: boolean;
}

/**
 * One property run: snapshot, the batch (sequentially), /health, snapshot again. The state must
 * be unchanged unless a request that was allowed to succeed did. `prepare` runs before the first
 * snapshot (on a fresh world too): what the batch needs that valid requests make (an MCP session).
 */
export async function runBatch<C>(w: World, cases: C[], one: (c: C) => Promise<Checked>, prepare?: () => Promise<void>): Promise<void> {
  if (w.dirty) await reseed(w);
  await prepare?.();
  const before = await snapshot(w);
  const violations: Violation[] = [];
  let accepted = false;
  for (const c of cases) {
    counts.requests++;
    const mark = w.t.events.length;
    const r = await one(c);
    violations.push(...r.violations);
    accepted ||= r.accepted;
    for (const e of w.t.events.slice(mark)) {
      if (e.event !== "internal_error") continue;
      const cause = causeOf(String(e.fields.error));
      violations.push({ signature: `hub logged internal_error: ${cause}`, detail: r.violations[0]?.detail ?? JSON.stringify(c).slice(0, 400) });
    }
  }
  const health = await sendH1(w.port, { method: "GET", path: "/health", headers: [] });
  if (health.outcome !== "answered" || health.status !== 200) {
    violations.push({ signature: "hub unhealthy after the batch", detail: `/health: ${health.outcome} ${health.status} ${health.detail ?? ""}` });
    w.dirty = true;
  } else {
    const d = diff(before, await snapshot(w));
    if (d.length && !accepted) {
      const detail = `${d.join("; ")} after ${JSON.stringify(cases).slice(0, 600)}`;
      violations.push({ signature: "state changed by requests that must be refused", detail });
    }
    // Only a changed store (or an accepted call, e.g. a stream whose end the hub is still
    // handling) needs a fresh hub; a wrong answer alone leaves the seeded world intact.
    if (d.length || accepted) w.dirty = true;
  }
  verdict(violations);
}

/** First line of an error and the first frame in the hub's sources (its root cause). */
function causeOf(stack: string): string {
  const lines = stack.split("\n");
  const frame = lines.find((l) => /\/src\//.test(l))?.trim().replace(/^at /, "").replace(/\(?\S*\/(src\/[^:)]+)[^)]*\)?/, "($1)");
  return `${lines[0].slice(0, 140)}${frame ? ` @ ${frame}` : ""}`;
}
