/**
 * Sync ingest benchmark: one hub in this process (127.0.0.1:0, file database in a temp dir per
 * scenario), valid `kxm.sync-event.v1` events pushed with SyncService/PushEvents in batches over
 * Connect binary (HTTP/2), plus floors measured in the same run on fresh databases:
 *   - store.sync.pushSyncEvents(rows, decideIngest) with rows pre-hashed outside the timed region;
 *   - the same, timing canonicalize + sha256 + store;
 *   - sync.push() (schema check + canonicalize + hash + store + counters), the domain without RPC;
 * and the cost of one batch split into its parts. The PushEvents callers run in a worker thread of
 * this process (`--client thread`, the default: bench/sync/worker.ts) or on the hub's own thread
 * (`--client inline`). Prints figures only; no assertions. See bench/README.md.
 *
 *   node --import tsx bench/sync/run.ts [--client thread|inline] [--events 100000] [--batch 100] [--conc 1,4,8] [--sync full|normal]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import zlib from "node:zlib";
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import inspector from "node:inspector/promises";
import { performance } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import { create, fromBinary, fromJson, toBinary, type JsonValue } from "@bufbuild/protobuf";
import canonicalizeModule from "canonicalize";
import { systemClock } from "../../src/clock.js";
import { defaultConfig, type HubConfig } from "../../src/config.js";
import { createHub } from "../../src/hub.js";
import { createMetrics } from "../../src/ops/metrics.js";
import { createObserver } from "../../src/ops/observer.js";
import { eventJson } from "../../src/server/sync-convert.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import type { SyncEventRow } from "../../src/store/sync-store.js";
import { checkSyncEvent } from "../../src/sync/schema.js";
import { contentHash, createSync, decideIngest, syncChanges } from "../../src/sync/sync.js";
import { SyncEventSchema, type SyncEvent } from "../../gen/ts/kxm/hub/v1/sync_event_pb.js";
import {
  PushEventsRequestSchema,
  PushEventsResponseSchema,
  SyncOutcome,
  type PushEventsResponse,
} from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { monoMs, percentile, Samples, summarize, type Summary } from "../common/stats.js";
import { planBatches, runtimeId, type BatchPlan, type JsonObject } from "./events.js";
import { packWire, runLoad, tally, threadCpuMs, type LoadResult, type LoadScenario, type Outcomes } from "./load.js";
import { flagReaders } from "../common/flags.js";

/** The hub's own import of canonicalize (src/sync/sync.ts): CommonJS typed as ESM. */
const canonicalize = canonicalizeModule as unknown as typeof canonicalizeModule.default;

const usage = `usage: node --import tsx bench/sync/run.ts [options]
  --events N          events per scenario (default 100000)
  --batch N           events per PushEvents call / store transaction, 1..100 (default 100)
  --runs N            runs the events are spread over (default 100, so 1000 sequences each)
  --order seq|interleave
                      seq: a batch is consecutive sequences of one run (default);
                      interleave: round-robin over the runs, one event per run per batch
  --conc LIST         RPC calls in flight at once, comma-separated; one fresh hub each (default 1,4,8)
  --client thread|inline
                      thread: the PushEvents callers run in a worker thread of this process, so the
                      hub's thread does only the hub's work (default);
                      inline: they share the hub's thread and event loop
  --rpc-client lean|connect
                      lean: bench/common/raw-stream.ts sends each pre-encoded request as it is
                      (default); connect: connect-node, each request decoded just before its call
                      and encoded again by the client (its CPU then shares the cores with the hub)
  --sync full|normal  SQLite synchronous pragma (default full, the hub's default)
  --warmup-batches N  batches pushed before each scenario's measurement, on other runs (default 20)
  --split-batches N   batches sampled for the cost split (default 200)
  --parts LIST        rpc,floor,split (default all)
  --dir PATH          directory for the temp databases (default: os.tmpdir())
  -h, --help`;

const { values: flags } = parseArgs({
  options: {
    events: { type: "string", default: "100000" },
    batch: { type: "string", default: "100" },
    runs: { type: "string", default: "100" },
    order: { type: "string", default: "seq" },
    conc: { type: "string", default: "1,4,8" },
    "rpc-client": { type: "string", default: "lean" },
    client: { type: "string", default: "thread" },
    sync: { type: "string", default: "full" },
    "warmup-batches": { type: "string", default: "20" },
    "split-batches": { type: "string", default: "200" },
    parts: { type: "string", default: "rpc,floor,split" },
    dir: { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});
const { fail } = flagReaders(flags, usage);
const int = (name: string, raw: string, min: number, max = Number.MAX_SAFE_INTEGER) => {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) fail(`--${name} must be an integer in ${min}..${max}`);
  return n;
};
const sync = flags.sync === "full" || flags.sync === "normal" ? flags.sync : fail("--sync must be full or normal");
const clientMode =
  flags.client === "thread" || flags.client === "inline" ? flags.client : fail("--client must be thread or inline");
const rpcClient =
  flags["rpc-client"] === "lean" || flags["rpc-client"] === "connect" ? flags["rpc-client"] : fail("--rpc-client must be lean or connect");
const order = flags.order === "seq" || flags.order === "interleave" ? flags.order : fail("--order must be seq or interleave");
const eventCount = int("events", flags.events, 1);
const batchSize = int("batch", flags.batch, 1, 100);
const runs = Math.min(int("runs", flags.runs, 1), eventCount);
const concs = flags.conc.split(",").map((c) => int("conc", c.trim(), 1, 1024));
const warmupBatches = int("warmup-batches", flags["warmup-batches"], 0);
const splitBatches = int("split-batches", flags["split-batches"], 1);
const parts = new Set(flags.parts.split(",").map((p) => p.trim()));
for (const p of parts) if (p !== "rpc" && p !== "floor" && p !== "split") fail("--parts takes rpc, floor and/or split");

const hubProject = "bench";
const token = `tok_${randomBytes(16).toString("hex")}`;

const fsNames: Record<number, string> = {
  0xef53: "ext2/3/4",
  0x01021994: "tmpfs (fsync is a no-op)",
  0x58465342: "xfs",
  0x9123683e: "btrfs",
  0x794c7630: "overlayfs",
  0x6a656a63: "fakeowner",
};

const loadavg = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");

const fmtOutcomes = (o: Outcomes) =>
  Object.entries(o)
    .sort(([a], [b]) => (a === "accepted" ? -1 : b === "accepted" ? 1 : a.localeCompare(b)))
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");

interface Row {
  scenario: string;
  conc: number;
  events: number;
  batches: number;
  /** Seconds the rate is taken over: wall time (RPC) or the sum of the timed regions (floors). */
  secs: number;
  lat: Summary;
  /** Process CPU time (all threads) / wall time, %. */
  cpu?: number;
  /** The hub thread's event-loop utilization during the measurement, %. */
  elu?: number;
  /** The hub thread's own CPU time / wall time, % (Linux). */
  hubCpu?: number;
  /** The load thread's event-loop utilization and CPU time / wall, % (--client thread only). */
  loadElu?: number;
  loadCpu?: number;
  outcomes: Outcomes;
  notes: string[];
}
const rows: Row[] = [];

/** Temp dirs still to remove (also on failure). */
const dirs: string[] = [];
const closers: (() => Promise<void>)[] = [];
let baseDir = "";
function freshDbPath(tag: string): string {
  const dir = fs.mkdtempSync(path.join(baseDir, `kxm-bench-sync-${tag}-`));
  dirs.push(dir);
  return path.join(dir, "kxm.db");
}
async function cleanupAll() {
  for (const c of closers.splice(0)) await c().catch(() => {});
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
}

/** SyncEventRow objects exactly as src/sync/sync.ts builds them (canonicalize + sha256 per event). */
function buildRows(events: JsonObject[], receivedAtMs: number): SyncEventRow[] {
  return events.map((e) => {
    const record = canonicalize(e)!;
    const eventType = e.eventType as string;
    const p = e.payload as JsonObject;
    return {
      projectId: e.projectId as string,
      runId: e.runId as string,
      sequence: e.sequence as number,
      hubProject,
      homeRuntimeId: runtimeId,
      eventType,
      contentHash: contentHash(record),
      receivedAtMs,
      occurredAt: e.occurredAt as string,
      ...(eventType.startsWith("run.") && typeof p.status === "string" && { runStatus: p.status }),
      ...(typeof p.workflowId === "string" && { workflowId: p.workflowId }),
      ...(typeof p.displayTitle === "string" && { displayTitle: p.displayTitle }),
      record,
    };
  });
}

/**
 * A SqliteStore whose pushSyncEvents also records how long each push took from the call to its
 * answer. The store group-commits (src/store/group-commit.ts): a push waits for the next batch
 * (setImmediate), runs in that batch's transaction and is answered once the batch's WAL sync is
 * done (off the event loop under FULL), so this is queue + transaction + sync, not CPU time.
 */
function timedStore(dbPath: string) {
  const store = new SqliteStore({ path: dbPath, synchronous: sync });
  const txMs = new Samples();
  let recording = false;
  const inner = store.sync.pushSyncEvents;
  store.sync.pushSyncEvents = async (events, decide, changes) => {
    const t0 = monoMs();
    const r = await inner(events, decide, changes);
    if (recording) txMs.push(monoMs() - t0);
    return r;
  };
  return { store, txMs, record: (on: boolean) => (recording = on) };
}

/** Per run: is its cursor the number of sequences pushed to it? */
async function cursorCheck(store: SqliteStore, plan: BatchPlan): Promise<string> {
  const want = plan.perRun();
  let ok = 0;
  for (const w of want) if ((await store.sync.getSyncCursor(hubProject, w.projectId, w.runId)) === w.n) ok++;
  return `cursor complete ${ok}/${want.length} runs`;
}

/** The events as PushEvents requests, encoded (compact, off the JS heap); each call decodes its own. */
function encodeRequests(plan: BatchPlan): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i < plan.batches; i++) {
    const req = create(PushEventsRequestSchema, {
      project: hubProject,
      runtimeId,
      events: plan.batch(i).map((e): SyncEvent => fromJson(SyncEventSchema, e as JsonValue)),
    });
    out.push(toBinary(PushEventsRequestSchema, req));
  }
  return out;
}

interface RpcOutcome {
  last?: PushEventsResponse;
  txP50: number;
  latP50: number;
  wallMs: number;
  profile?: Profile;
}

/** The load generator's worker thread (`--client thread`), started once with every request. */
let loadWorker: Worker | undefined;

function startLoadWorker(wire: Uint8Array[], warmWire: Uint8Array[]): Worker {
  const packed = { wire: packWire(wire), warm: packWire(warmWire) };
  const w = new Worker(new URL("../common/ts-worker.mjs", import.meta.url), {
    workerData: { entry: new URL("./worker.ts", import.meta.url).href, ...packed },
    transferList: [packed.wire.buf, packed.warm.buf],
  });
  closers.push(async () => {
    loadWorker = undefined;
    await w.terminate();
  });
  return w;
}

type WorkerMsg = { type: "warm" } | { type: "done"; result: LoadResult } | { type: "error"; error: string };

/** Run one load scenario where --client says; `beforeMeasure` runs on this (the hub's) thread. */
function runClient(s: LoadScenario, wire: Uint8Array[], warmWire: Uint8Array[], beforeMeasure: () => Promise<void>): Promise<LoadResult> {
  const w = loadWorker;
  if (!w) return runLoad(s, warmWire, wire, beforeMeasure);
  return new Promise<LoadResult>((resolve, reject) => {
    const done = (err?: unknown, result?: LoadResult) => {
      w.off("message", onMessage);
      w.off("error", done);
      w.off("exit", onExit);
      if (result) resolve(result);
      else reject(err);
    };
    const onExit = (code: number) => done(new Error(`load worker exited with code ${code}`));
    const onMessage = (m: WorkerMsg) => {
      if (m.type === "warm") beforeMeasure().then(() => w.postMessage({ type: "go" }), done);
      else if (m.type === "done") done(undefined, m.result);
      else done(new Error(`load worker: ${m.error}`));
    };
    w.on("message", onMessage);
    w.on("error", done);
    w.on("exit", onExit);
    w.postMessage({ type: "run", scenario: s });
  });
}

/**
 * One fresh hub; the first `measureCount` requests of `wire` (default all) pushed by `conc`
 * callers after `warmWire`, on the load thread --client names. With `profile`, V8's sampling
 * profiler runs on the hub's thread over the measured window (for the cost split); the row is not
 * added to the table.
 */
async function rpcScenario(
  conc: number,
  wire: Uint8Array[],
  warmWire: Uint8Array[],
  plan: BatchPlan,
  measureCount?: number,
  profile = false,
): Promise<RpcOutcome> {
  const dataPath = freshDbPath(`rpc${conc}${profile ? "-prof" : ""}`);
  const { store, txMs, record } = timedStore(dataPath);
  const config: HubConfig = {
    ...defaultConfig,
    port: 0,
    host: "127.0.0.1",
    dataPath,
    logPath: undefined,
    rateLimit: false,
    sqliteSynchronous: sync,
    shutdownGraceMs: 1_000,
    projectTokens: { [hubProject]: token },
  };
  const hub = await createHub(config, { log: false, clock: systemClock, store });
  let closed = false;
  const closeHub = async () => {
    if (closed) return;
    closed = true;
    await hub.close();
  };
  closers.push(closeHub);
  const { url } = await hub.listen();

  // The hub thread's counters, snapshotted between the warm-up and the measured drive.
  const session = profile ? new inspector.Session() : undefined;
  let commits0 = { ...store.commitStats() };
  let cpu0 = process.cpuUsage();
  let hubCpu0 = threadCpuMs();
  let elu0 = performance.eventLoopUtilization();
  let t0 = monoMs();
  const beforeMeasure = async () => {
    if (session) {
      session.connect();
      await session.post("Profiler.enable");
      await session.post("Profiler.setSamplingInterval", { interval: 250 });
      await session.post("Profiler.start");
    }
    record(true);
    commits0 = { ...store.commitStats() };
    cpu0 = process.cpuUsage();
    hubCpu0 = threadCpuMs();
    elu0 = performance.eventLoopUtilization();
    t0 = monoMs();
  };
  const load = await runClient({ url, token, project: hubProject, conc, rpcClient, measureCount }, wire, warmWire, beforeMeasure);
  const hubWallMs = monoMs() - t0;
  const elu = performance.eventLoopUtilization(elu0);
  const hubCpu1 = threadCpuMs();
  const cpu = process.cpuUsage(cpu0);
  record(false);
  const commits = store.commitStats().commits - commits0.commits;
  const works = store.commitStats().works - commits0.works;
  let prof: Profile | undefined;
  if (session) {
    prof = ((await session.post("Profiler.stop")) as { profile: Profile }).profile;
    session.disconnect();
  }
  const check = profile ? "" : await cursorCheck(store, plan);
  await closeHub();
  const sorted = load.lat;
  const txSorted = txMs.sorted();
  const last = load.last && fromBinary(PushEventsResponseSchema, load.last);
  const out = { last, txP50: percentile(txSorted, 0.5), latP50: percentile(sorted, 0.5), wallMs: load.wallMs, profile: prof };
  if (profile) return out;
  const threaded = loadWorker !== undefined;
  rows.push({
    scenario: "RPC PushEvents (Connect binary, h2)",
    conc,
    events: load.events,
    batches: sorted.length,
    secs: load.wallMs / 1_000,
    lat: summarize(sorted),
    cpu: ((cpu.user + cpu.system) / 1_000 / hubWallMs) * 100,
    elu: elu.utilization * 100,
    hubCpu: hubCpu0 === undefined || hubCpu1 === undefined ? undefined : ((hubCpu1 - hubCpu0) / hubWallMs) * 100,
    loadElu: threaded ? load.elu * 100 : undefined,
    loadCpu: threaded && load.cpuMs !== undefined ? (load.cpuMs / load.wallMs) * 100 : undefined,
    outcomes: load.outcomes,
    notes: [
      check,
      `store push inside the RPC (call to durable answer) p50 ${percentile(txSorted, 0.5).toFixed(2)} p99 ${percentile(txSorted, 0.99).toFixed(2)} ms`,
      `${commits} group commits for ${works} store works (${(works / commits).toFixed(2)} per commit)`,
    ],
  });
  return out;
}

/** The parts of V8's CPU profile this bench reads. */
interface Profile {
  nodes: { id: number; callFrame: { functionName: string; url: string }; children?: number[] }[];
  samples: number[];
  timeDeltas: number[];
}

const owners: [RegExp, string][] = [
  [/\/src\/server\/sync-convert\.ts/, "json"],
  [/\/src\/sync\/schema\.ts/, "schema"],
  // The prepare pool's hand-off to its worker thread (structured clone of the events, the answers).
  [/\/src\/sync\/prepare-pool\.ts/, "handoff"],
  [/\/canonicalize\//, "hash"],
  [/\/src\/store\/|\/better-sqlite3\//, "store"],
  [/\/src\/server\/interceptors\/limits\.ts/, "limits"],
];

/**
 * Profile time per part, ms. A sample belongs to the hub step on its stack (eventJson, schema,
 * canonicalize + hash, store, the limits interceptor); otherwise to its innermost recognizable
 * frame: protobuf encode/decode (the bench's own pre-call decode apart), gzip, the RPC stack
 * (Connect, HTTP/2, sockets, streams), other hub code, the bench; GC and idle as V8 reports them.
 */
function attribute(p: Profile): Map<string, number> {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const memo = new Map<number, string>();
  const classify = (id: number): string => {
    const stack: { functionName: string; url: string }[] = [];
    for (let x: number | undefined = id; x !== undefined; x = parent.get(x)) stack.push(byId.get(x)!.callFrame);
    const leaf = stack[0]!.functionName;
    if (leaf === "(garbage collector)") return "gc";
    if (leaf === "(idle)") return "idle";
    if (leaf === "(program)") return "program";
    if (stack.some((f) => f.url === "node:inspector")) return "profiler"; // Profiler.stop itself: dropped
    for (const f of stack) {
      for (const [re, part] of owners) if (re.test(f.url)) return part;
      if (f.functionName === "contentHash" && f.url.includes("/src/sync/prepare.ts")) return "hash";
    }
    const viaConnect = stack.some((f) => f.url.includes("/@connectrpc/"));
    for (const f of stack) {
      const u = f.url;
      if (u.includes("/@bufbuild/protobuf/")) {
        if (!viaConnect) return "bench";
        const dir = stack.find((g) => /\/(to|from)-binary\.js/.test(g.url));
        return dir ? (dir.url.includes("from-binary") ? "decode" : "encode") : "rpc";
      }
      if (u.includes("zlib")) return "gzip";
      if (u.includes("/@connectrpc/") || /^node:(internal\/)?(http2|net|stream|_stream|internal\/streams|events|internal\/js_stream_socket|internal\/deps\/undici|buffer|internal\/process\/task_queues|timers|internal\/timers)/.test(u))
        return "rpc";
      if (u.includes("/src/")) return "hubOther";
      if (u.includes("/bench/")) return "bench";
    }
    return "other";
  };
  const out = new Map<string, number>();
  p.samples.forEach((id, i) => {
    let part = memo.get(id);
    if (part === undefined) memo.set(id, (part = classify(id)));
    out.set(part, (out.get(part) ?? 0) + (p.timeDeltas[i] ?? 0) / 1_000);
  });
  return out;
}

type FloorKind = "store" | "hash+store" | "domain";

async function floorScenario(kind: FloorKind, plan: BatchPlan, warm: BatchPlan) {
  const store = new SqliteStore({ path: freshDbPath(kind.replace("+", "-")), synchronous: sync });
  closers.push(() => store.close());
  const observer = createObserver(undefined, createMetrics(store));
  const domain = createSync({ store, clock: systemClock, observer });
  const lat = new Samples();
  const hashMs = new Samples();
  const storeMs = new Samples();
  const outcomes: Outcomes = {};
  let events = 0;
  const one = async (batch: JsonObject[], measure: boolean) => {
    if (kind === "store") {
      const rowsIn = buildRows(batch, Date.now()); // outside the timed region
      const t0 = monoMs();
      const { outcomes: o } = await store.sync.pushSyncEvents(rowsIn, decideIngest, syncChanges);
      const t1 = monoMs();
      if (!measure) return;
      lat.push(t1 - t0);
      for (const x of o) tally(outcomes, x.outcome);
    } else if (kind === "hash+store") {
      const t0 = monoMs();
      const rowsIn = buildRows(batch, Date.now());
      const t1 = monoMs();
      const { outcomes: o } = await store.sync.pushSyncEvents(rowsIn, decideIngest, syncChanges);
      const t2 = monoMs();
      if (!measure) return;
      lat.push(t2 - t0);
      hashMs.push(t1 - t0);
      storeMs.push(t2 - t1);
      for (const x of o) tally(outcomes, x.outcome);
    } else {
      const t0 = monoMs();
      const { results } = await domain.push(hubProject, { runtimeId, events: batch });
      const t1 = monoMs();
      if (!measure) return;
      lat.push(t1 - t0);
      for (const r of results) tally(outcomes, r.code ? `${r.outcome}:${r.code}` : r.outcome);
    }
    events += batch.length;
  };
  for (let i = 0; i < warm.batches; i++) await one(warm.batch(i), false);
  for (let i = 0; i < plan.batches; i++) await one(plan.batch(i), true); // each batch built outside the timed region
  const check = await cursorCheck(store, plan);
  await store.close();
  const sorted = lat.sorted();
  const sumMs = sorted.reduce((a, b) => a + b, 0);
  const notes = [check];
  if (kind === "hash+store") {
    notes.push(
      `of which canonicalize+hash p50 ${percentile(hashMs.sorted(), 0.5).toFixed(2)} ms, store p50 ${percentile(storeMs.sorted(), 0.5).toFixed(2)} ms`,
    );
  }
  const names: Record<FloorKind, string> = {
    store: "floor: store.sync.pushSyncEvents, pre-hashed",
    "hash+store": "floor: canonicalize+hash + store",
    domain: "floor: sync.push (schema+hash+store)",
  };
  rows.push({
    scenario: names[kind],
    conc: 1,
    events,
    batches: plan.batches,
    secs: sumMs / 1_000,
    lat: summarize(sorted),
    outcomes,
    notes,
  });
  return percentile(sorted, 0.5);
}

/** Median ms per batch of `fn` over `items` (each timed once, after one untimed pass for the JIT). */
function medianMs<T>(items: T[], fn: (x: T) => unknown): number {
  for (const x of items) fn(x);
  const s = new Samples();
  for (const x of items) {
    const t0 = monoMs();
    fn(x);
    s.push(monoMs() - t0);
  }
  return percentile(s.sorted(), 0.5);
}

async function main() {
  baseDir = flags.dir ?? os.tmpdir();
  const cpus = os.cpus();
  const fsType = fs.statfsSync(baseDir).type;
  const started = monoMs();
  console.log("kxm-hub sync ingest benchmark (SyncService/PushEvents)");
  console.log(`  node ${process.version} on ${os.platform()}/${os.arch()}, ${cpus.length} CPUs (${cpus[0]?.model.trim() ?? "?"})`);
  console.log(`  load avg  ${loadavg()} (1/5/15 min) at start: other processes on these cores skew every line`);
  console.log(`  database  a fresh file per scenario under ${baseDir} [${fsNames[fsType] ?? `fs 0x${fsType.toString(16)}`}]`);
  console.log(
    `  sqlite    journal_mode=WAL synchronous=${sync.toUpperCase()}` +
      (sync === "full"
        ? " (group commit: pushes that arrive together share one transaction and one WAL fdatasync on libuv's pool)"
        : " (group commit, no fsync per commit)"),
  );
  console.log(
    `  load      ${rpcClient === "lean" ? "lean client (bench/common/raw-stream.ts)" : "connect-node client (createConnectTransport)"}, binary, one h2c connection per scenario, ` +
      (clientMode === "thread"
        ? "in a WORKER THREAD of this process\n" +
          `            (--client thread): own event loop, so the hub's thread does only the hub's work, but the same ${cpus.length} cores;\n`
        : "INLINE (--client inline):\n" +
          `            client and hub share one thread, one event loop and the machine's ${cpus.length} cores;\n`) +
      "            closed loop per caller; requests pre-encoded" +
      (rpcClient === "lean" ? ", sent as they are" : ", each decoded just before its call (in the wall time, not the latency)"),
  );

  // Events: the measured set and a warm-up set on other runs (run numbers from 100000).
  const tGen = monoMs();
  const plan = planBatches(eventCount, runs, batchSize, order);
  const warmCount = warmupBatches * batchSize;
  const warm = planBatches(warmCount, Math.max(1, Math.ceil(warmCount / 1_000)), batchSize, "seq", 100_000);
  // Checked on a sample (the generator is deterministic and rotates event types; the outcome
  // counts of every scenario show any event the hub refuses).
  const sampleJson = Array.from({ length: Math.min(splitBatches, plan.batches) }, (_, i) => plan.batch(i));
  let invalid = 0;
  let firstInvalid = "";
  let sampled = 0;
  let recordBytes = 0;
  let minBytes = Infinity;
  let maxBytes = 0;
  let payloadBytes = 0;
  const warmJson = Array.from({ length: warm.batches }, (_, i) => warm.batch(i));
  for (const b of [...sampleJson, ...warmJson])
    for (const e of b) {
      const why = checkSyncEvent(e);
      if (why) {
        invalid++;
        firstInvalid ||= `${e.eventType}: ${why}`;
      }
    }
  for (const b of sampleJson)
    for (const e of b) {
      const n = Buffer.byteLength(canonicalize(e)!);
      sampled++;
      recordBytes += n;
      minBytes = Math.min(minBytes, n);
      maxBytes = Math.max(maxBytes, n);
      payloadBytes += Buffer.byteLength(canonicalize(e.payload)!);
    }
  const needWire = parts.has("rpc") || parts.has("split");
  const wire = needWire ? encodeRequests(plan) : [];
  const warmWire = needWire ? encodeRequests(warm) : [];
  const wireBytes = wire.reduce((n, w) => n + w.length, 0);
  // The hub hashes its own JSON form of the protobuf event; it must match this JSON's hash.
  let hashMismatch = 0;
  if (needWire) {
    sampleJson.forEach((b, i) => {
      const req = fromBinary(PushEventsRequestSchema, wire[i]!);
      req.events.forEach((pe, j) => {
        if (canonicalize(eventJson(SyncEventSchema, pe)) !== canonicalize(b[j]!)) hashMismatch++;
      });
    });
  }
  const avg = (n: number) => Math.round(n / sampled);
  console.log(
    `  events    ${eventCount} over ${runs} runs (${Math.ceil(eventCount / runs)} sequences each), order ${order}, ` +
      `batches of ${batchSize} (${plan.batches} batches); ${warm.batches} warm-up batches on other runs per scenario`,
  );
  console.log(
    `            13 event types in rotation; over the first ${sampled}: canonical JSON ${avg(recordBytes)} B/event ` +
      `(${minBytes}..${maxBytes}), of which payload ${avg(payloadBytes)} B` +
      (needWire ? `; protobuf ${Math.round(wireBytes / eventCount)} B/event, ${Math.round(wireBytes / wire.length)} B/request` : ""),
  );
  console.log(`            generated and encoded in ${((monoMs() - tGen) / 1_000).toFixed(1)} s, rss ${Math.round(process.memoryUsage().rss / 2 ** 20)} MiB`);
  if (invalid) console.log(`  WARNING   ${invalid} sampled events fail the schema (first: ${firstInvalid}); they count as rejected`);
  if (hashMismatch) console.log(`  WARNING   ${hashMismatch} sampled events hash differently over RPC than in the floors`);

  if (needWire && clientMode === "thread") loadWorker = startLoadWorker(wire, warmWire);

  let rpc1: (RpcOutcome & { conc: number }) | undefined;
  if (parts.has("rpc")) {
    for (const conc of concs) {
      const r = await rpcScenario(conc, wire, warmWire, plan);
      if (conc === 1 || !rpc1) rpc1 = { ...r, conc };
      if (process.stderr.isTTY) process.stderr.write(`  done: rpc x${conc}\n`);
    }
  }
  let floorStoreP50 = Number.NaN;
  let floorHashStoreP50 = Number.NaN;
  if (parts.has("floor")) {
    floorStoreP50 = await floorScenario("store", plan, warm);
    floorHashStoreP50 = await floorScenario("hash+store", plan, warm);
    await floorScenario("domain", plan, warm);
    if (process.stderr.isTTY) process.stderr.write("  done: floors\n");
  }

  // Results table.
  const f = (n: number, d = 0) => (Number.isFinite(n) ? n.toFixed(d) : "-");
  const opt = (n: number | undefined) => (n === undefined ? "" : f(n));
  console.log("");
  console.log(
    `${"scenario".padEnd(42)}${"conc".padStart(5)}${"events/s".padStart(10)}${"batch/s".padStart(9)}` +
      `${"p50 ms".padStart(8)}${"p99 ms".padStart(8)}${"max ms".padStart(8)}${"cpu%".padStart(6)}` +
      `${"hub elu%".padStart(9)}${"hub cpu%".padStart(9)}${"load elu%".padStart(10)}${"load cpu%".padStart(10)}  outcomes; notes`,
  );
  for (const r of rows) {
    console.log(
      `${r.scenario.padEnd(42)}${String(r.conc).padStart(5)}${f(r.events / r.secs).padStart(10)}${f(r.batches / r.secs).padStart(9)}` +
        `${f(r.lat.p50, 2).padStart(8)}${f(r.lat.p99, 2).padStart(8)}${f(r.lat.max, 2).padStart(8)}` +
        `${opt(r.cpu).padStart(6)}${opt(r.elu).padStart(9)}${opt(r.hubCpu).padStart(9)}${opt(r.loadElu).padStart(10)}${opt(r.loadCpu).padStart(10)}  ` +
        `${fmtOutcomes(r.outcomes)}; ${r.notes.join("; ")}`,
    );
  }
  console.log("");
  console.log("RPC rows: events/s and batch/s over wall time (first call to last answer); p50/p99/max = one PushEvents call as the");
  console.log("  caller sees it (at conc > 1 mostly queueing); cpu% = process CPU time, all threads / wall (200 = both cores);");
  console.log("  hub elu% = the hub thread's event loop busy (sync SQLite calls count; the WAL sync runs off it); hub cpu% = its own CPU");
  console.log(
    clientMode === "thread"
      ? "  time / wall (/proc/thread-self, 10 ms ticks); load elu%/cpu% = the same for the load generator's worker thread."
      : "  time / wall (/proc/thread-self, 10 ms ticks). --client inline: the load shares the hub's thread, so hub elu%/cpu% include it.",
  );
  console.log("floor rows: one batch per transaction, called back to back on this thread; events/s and batch/s over the summed");
  console.log("  timed regions; p50/p99/max = one batch. pre-hashed: rows built (canonicalize + sha256) outside the timed region.");

  // Cost split of one batch: each part alone in a loop, and in the RPC by V8's profiler.
  if (parts.has("split") && wire.length) {
    const sampleWire = wire.slice(0, sampleJson.length);
    const sample = sampleWire.map((w) => fromBinary(PushEventsRequestSchema, w));
    const protoEvents = sample.map((r) => r.events);
    const jsonForms = protoEvents.map((evs) => evs.map((e) => eventJson(SyncEventSchema, e)));
    const encodeMs = medianMs(sample, (r) => toBinary(PushEventsRequestSchema, r));
    const decodeMs = medianMs(sampleWire, (w) => fromBinary(PushEventsRequestSchema, w));
    const toJsonMs = medianMs(protoEvents, (evs) => evs.map((e) => eventJson(SyncEventSchema, e)));
    const schemaMs = medianMs(jsonForms, (evs) => evs.map((e) => checkSyncEvent(e)));
    const hashMs = medianMs(jsonForms, (evs) => evs.map((e) => contentHash(canonicalize(e)!)));

    // The profiled pass: a fresh hub, conc 1, the sampled batches (after the same warm-up), the
    // load where --client says; the profiler samples the hub's thread only.
    const prof = await rpcScenario(1, wire, warmWire, plan, sampleWire.length, true);
    const threaded = clientMode === "thread";
    const byPart = attribute(prof.profile!);
    const nb = sampleWire.length;
    const inRpc = (...keys: string[]) => keys.reduce((a, k) => a + (byPart.get(k) ?? 0), 0) / nb;

    const resp =
      prof.last ??
      create(PushEventsResponseSchema, {
        results: sampleJson[0]!.map((e) => ({
          projectId: e.projectId as string,
          runId: e.runId as string,
          sequence: BigInt(e.sequence as number),
          outcome: SyncOutcome.ACCEPTED,
        })),
      });
    const respWire = toBinary(PushEventsResponseSchema, resp);
    const respEncMs = medianMs(Array.from({ length: 50 }, () => resp), (r) => toBinary(PushEventsResponseSchema, r));
    const respDecMs = medianMs(Array.from({ length: 50 }, () => respWire), (w) => fromBinary(PushEventsResponseSchema, w));
    const gz = zlib.gzipSync(respWire);
    const gzipMs = medianMs(Array.from({ length: 50 }, () => respWire), (w) => zlib.gunzipSync(zlib.gzipSync(w)));
    const storeAlone = Number.isFinite(floorStoreP50) ? floorStoreP50 : Number.NaN;

    const n = sampleJson[0]!.length;
    const wallPerBatch = prof.wallMs / nb;
    const split: [string, number, number, string][] = [
      threaded
        ? ["protobuf encode: answer (hub)", respEncMs, inRpc("encode"), `${respWire.length} B (the client's ${sampleWire[0]!.length} B request: worker)`]
        : ["protobuf encode: request (client), answer (hub)", encodeMs + respEncMs, inRpc("encode"), `${sampleWire[0]!.length} B + ${respWire.length} B`],
      threaded
        ? ["protobuf decode: request (hub)", decodeMs, inRpc("decode"), "(the client's answer decode: worker)"]
        : ["protobuf decode: request (hub), answer (client)", decodeMs + respDecMs, inRpc("decode"), ""],
      ["hub: limits interceptor sizes the request", encodeMs, inRpc("limits"), "toBinary again when no content-length (interceptors/limits.ts)"],
      ["hub: protobuf -> JSON form (eventJson)", toJsonMs, inRpc("json"), "src/server/sync-convert.ts"],
      ["hub: schema check (checkSyncEvent)", schemaMs, inRpc("schema"), "src/sync/schema.ts"],
      ["hub: canonicalize + sha256", hashMs, inRpc("hash"), "RFC 8785 text + digest (with KXM_SYNC_THREADS > 0: on the prepare thread, with the schema check)"],
      ["hub: hand-off to the prepare thread", Number.NaN, inRpc("handoff"), "structured clone of the events and the answers (src/sync/prepare-pool.ts)"],
      ["hub: store transaction (+fsync)", storeAlone, inRpc("store"), `alone: pre-hashed floor p50 (incl. the WAL sync wait); inside the RPC, call to durable answer p50 ${prof.txP50.toFixed(3)} ms`],
      threaded
        ? ["gzip of the answer (hub)", gzipMs, inRpc("gzip"), `${respWire.length} -> ${gz.length} B (Connect compresses answers >= 1 KiB); alone = gzip+gunzip`]
        : ["gzip + gunzip of the answer", gzipMs, inRpc("gzip"), `${respWire.length} -> ${gz.length} B (Connect compresses answers >= 1 KiB)`],
      ["RPC stack: Connect, HTTP/2, sockets, streams", Number.NaN, inRpc("rpc"), "incl. the auth interceptor's framework side"],
      ["hub: other (auth, sync.push glue, routing)", Number.NaN, inRpc("hubOther"), ""],
      ["garbage collection", Number.NaN, inRpc("gc"), ""],
      threaded
        ? ["bench on the hub thread", Number.NaN, inRpc("bench"), "the client's decode and loop run on the worker, not profiled"]
        : ["bench: pre-call decode, loop", Number.NaN, inRpc("bench"), "in the wall time, not in the call latency"],
      ["V8/native other", Number.NaN, inRpc("program", "other"), ""],
      ["idle (event loop waiting)", Number.NaN, inRpc("idle"), threaded ? "the hub waiting for the client (conc 1: its encode/decode, the round trip)" : ""],
    ];
    const f3 = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : "-");
    console.log("");
    console.log(
      `cost of one batch of ${n} events (${nb} batches sampled; profiled pass with the client ` +
        (threaded ? "in the worker thread: the profile is the HUB'S THREAD ONLY)" : "INLINE: the profile holds client and hub)"),
    );
    console.log("  alone:  median of the part timed by itself in a loop on the main thread, warm (no GC pressure from anything else)");
    console.log("  in RPC: V8 CPU-profile time per batch (mean) of the hub's thread in a profiled PushEvents pass (fresh hub, conc 1,");
    console.log("          the sampled batches), each sample given to the hub step on its stack, else to its innermost known frame;");
    console.log("          the profiler slows the pass a little; share = of that pass's wall time per batch");
    console.log(`${"part".padEnd(48)}${"alone ms".padStart(9)}${"in RPC ms".padStart(10)}${"us/event".padStart(9)}${"share".padStart(7)}  notes`);
    for (const [name, alone, rpcMs, note] of split) {
      console.log(
        `${name.padEnd(48)}${f3(alone).padStart(9)}${f3(rpcMs).padStart(10)}${f((rpcMs * 1_000) / n, 1).padStart(9)}` +
          `${`${f((rpcMs / wallPerBatch) * 100)}%`.padStart(7)}  ${note}`,
      );
    }
    const attributed = split.reduce((a, [, , ms]) => a + ms, 0);
    console.log(
      `${"= profiled pass: wall per batch".padEnd(48)}${"".padStart(9)}${f3(wallPerBatch).padStart(10)}${f((wallPerBatch * 1_000) / n, 1).padStart(9)}` +
        `${"100%".padStart(7)}  ${f3(attributed)} ms attributed; call p50 ${prof.latP50.toFixed(3)} ms` +
        (rpc1 ? `; unprofiled conc ${rpc1.conc} call p50 ${rpc1.latP50.toFixed(3)} ms` : ""),
    );
    if (Number.isFinite(floorHashStoreP50)) {
      console.log(`(floor for comparison: canonicalize+hash + store p50 ${f3(floorHashStoreP50)} ms per batch)`);
    }
  }

  await cleanupAll();
  console.log("");
  console.log(`load avg ${loadavg()} (1/5/15 min) at end; total ${((monoMs() - started) / 1_000).toFixed(1)} s`);
}

main().then(
  () => process.exit(0),
  async (e) => {
    console.error(e);
    await cleanupAll();
    process.exit(1);
  },
);
