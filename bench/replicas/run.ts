/**
 * Hubs on PostgreSQL next to SQLite, in one run: lease cycles (REST acquire + release, closed
 * loop) and message latency (SendMessage -> Subscribe frame, paced), for
 *   sqlite-1    one hub on its SQLite file (FULL),
 *   postgres-1  one hub on a PostgreSQL database,
 *   postgres-3  three hubs on one PostgreSQL database, the clients spread over them, and each
 *               message sent through the first hub to a stream on the third.
 * Every hub is a `kxm-hub serve` process; PostgreSQL is a throwaway cluster with fsync on
 * (test/fixtures/postgres.ts), so both stores are durable. Prints figures, asserts nothing.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { PeerService, type SubscribeResponse } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { startPostgres, type TestPostgres } from "../../test/fixtures/postgres.js";
import { flagReaders, runBench } from "../common/flags.js";
import { cpuMsOf, findProcess, treeCpuMs } from "../common/proc-cpu.js";
import { H2Conn } from "../common/raw-stream.js";
import { fmtSummary, monoMs, Samples, summarize, type Summary } from "../common/stats.js";
import type { SenderOptions, SenderReport } from "./sender.js";

const usage = `usage: node --import tsx bench/replicas/run.ts [options]
  --seconds N       measured seconds per lease workload and target (default 5)
  --concurrency N   lease clients (default 32)
  --names N         names of the contended workload (default 4)
  --rate N          messages per second, paced (default 200)
  --targets LIST    sqlite-1,postgres-1,postgres-3 (default all)
  --parts LIST      leases,messages (default both)
  --warmup-ms N     unmeasured messages at 300/s before the measured ones (default 3000; 0 = none)
  -h, --help`;

const { values: flags } = parseArgs({
  options: {
    seconds: { type: "string", default: "5" },
    concurrency: { type: "string", default: "32" },
    names: { type: "string", default: "4" },
    rate: { type: "string", default: "200" },
    targets: { type: "string", default: "sqlite-1,postgres-1,postgres-3" },
    parts: { type: "string", default: "leases,messages" },
    "warmup-ms": { type: "string", default: "3000" },
    help: { type: "boolean", short: "h" },
  },
});
const { num, int, fail } = flagReaders(flags, usage);
const seconds = num("seconds", 0.5);
const concurrency = int("concurrency", 1);
const names = int("names", 1);
const rate = int("rate", 1);
const warmupMs = int("warmup-ms", 0);
const targets = flags.targets.split(",").map((t) => t.trim());
for (const t of targets) if (!["sqlite-1", "postgres-1", "postgres-3"].includes(t)) fail(`unknown target ${t}`);
const parts = new Set(flags.parts.split(",").map((p) => p.trim()));
for (const p of parts) if (p !== "leases" && p !== "messages") fail(`unknown part ${p}`);

const repo = path.resolve(import.meta.dirname, "../..");
const bin = path.join(repo, "bin", "kxm-hub.mjs");

interface Hub {
  url: string;
  child: ChildProcess;
}

/** `kxm-hub serve` with `env`; resolves at its start-up line. */
function startHub(env: Record<string, string>): Promise<Hub> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KXM_")));
  // BENCH_HUB_NODE_ARGS: Node flags for the hubs (`--cpu-prof --cpu-prof-dir=DIR` to profile them).
  const nodeArgs = process.env.BENCH_HUB_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...nodeArgs, bin, "serve"], {
    cwd: repo,
    env: { ...base, KXM_PORT: "0", KXM_LOG_PATH: "-", KXM_LOG_LEVEL: process.env.BENCH_HUB_ERRORS ? "info" : "error", KXM_RATE_LIMIT_MAX: "100000000", ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  // BENCH_HUB_STDOUT=FILE: each hub's standard output appended there (`--trace-gc-nvp` writes to it).
  const copy = process.env.BENCH_HUB_STDOUT;
  return new Promise((resolve, reject) => {
    /** What the hub wrote until its start-up line (nothing is kept after it). */
    let out: string | undefined = "";
    child.stdout!.on("data", (b: Buffer) => {
      if (copy) fs.appendFileSync(copy, b);
      if (process.env.BENCH_HUB_ERRORS) for (const line of b.toString().split("\n")) if (line.includes("internal_error") || line.includes("store_unavailable")) console.error(line.slice(0, 1500));
      if (out === undefined) return;
      out += b.toString();
      const m = /kxm hub listening at (\S+);/.exec(out);
      if (m) {
        out = undefined;
        resolve({ url: m[1]!, child });
      }
    });
    child.once("exit", (code) => reject(new Error(`kxm-hub exited with ${code}`)));
  });
}

function stopHub(h: Hub): Promise<void> {
  return new Promise((resolve) => {
    if (h.child.exitCode !== null) return resolve();
    h.child.once("exit", () => resolve());
    h.child.kill("SIGTERM");
  });
}

interface Agent {
  id: string;
  headers: Record<string, string>;
}

async function register(base: string, name: string): Promise<Agent> {
  const res = await fetch(`${base}/v1/agents/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name, project: "bench" }),
  });
  if (res.status !== 201 && res.status !== 200) throw new Error(`register ${name}: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { agent: { id: string }; agentKey: string };
  return { id: body.agent.id, headers: { "x-kxm-agent-id": body.agent.id, "x-kxm-agent-key": body.agentKey } };
}

/**
 * The lease loop's REST client: `node:http` on a keep-alive agent (a connection per client), as
 * ../shared/bench/lease-compare.mjs drives the hub. `fetch` cost the load generator about 0.6 ms
 * of CPU a cycle, a third of this 2-core machine, which the hubs and PostgreSQL share with it.
 */
const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 256 });

function post(url: string, headers: Record<string, string>, json: unknown): Promise<{ status: number; body: string }> {
  const payload = JSON.stringify(json);
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method: "POST", agent: keepAlive, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(payload), ...headers } },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}

interface LeaseFigures {
  cycles: number;
  /** CPU per cycle in ms over the measured seconds: the hubs together, PostgreSQL's processes (NaN: none, or not found), this load generator. */
  cpu: { hubs: number; postgres: number; load: number };
  refused: number;
  acquire: Summary;
  violations: number;
}

/** C clients, each on hub (i mod hubs), cycling acquire + release for `seconds` on their name. */
async function leaseCycles(hubs: Hub[], contended: boolean, run: number, postgresPid: number | undefined): Promise<LeaseFigures> {
  const agents = await Promise.all(Array.from({ length: concurrency }, (_, i) => register(hubs[i % hubs.length]!.url, `w${run}-${contended ? "c" : "u"}-${i}`)));
  const acquire = new Samples();
  let cycles = 0;
  let refused = 0;
  let violations = 0;
  const last = new Map<string, number>();
  const worker = async (i: number, until: number, measure: boolean) => {
    const base = hubs[i % hubs.length]!.url;
    const name = contended ? `c${run}-${i % names}` : `u${run}-${i}`;
    while (monoMs() < until) {
      const t0 = monoMs();
      const res = await post(`${base}/v1/leases/${name}/acquire`, agents[i]!.headers, { ttlMs: 30_000 });
      const body = JSON.parse(res.body) as { lease?: { fencingToken: number } };
      if (res.status === 409) {
        if (measure) refused++;
        continue;
      }
      if (res.status !== 200) throw new Error(`acquire: ${res.status} ${JSON.stringify(body)}`);
      const token = body.lease!.fencingToken;
      if (token <= (last.get(name) ?? 0)) violations++;
      last.set(name, token);
      if (measure) acquire.push(monoMs() - t0);
      const rel = await post(`${base}/v1/leases/${name}/release`, agents[i]!.headers, { fencingToken: token });
      if (rel.status !== 200) throw new Error(`release: ${rel.status} ${rel.body}`);
      if (measure) cycles++;
    }
  };
  const warm = monoMs() + 1_000;
  await Promise.all(agents.map((_, i) => worker(i, warm, false)));
  const hubPids = hubs.map((h) => h.child.pid!);
  const cpu0 = { hubs: cpuMsOf(hubPids), postgres: postgresPid ? treeCpuMs(postgresPid) : 0, load: process.cpuUsage() };
  const t0 = monoMs();
  await Promise.all(agents.map((_, i) => worker(i, t0 + seconds * 1_000, true)));
  const wall = (monoMs() - t0) / 1_000;
  const load = process.cpuUsage(cpu0.load);
  const cpu = {
    hubs: (cpuMsOf(hubPids) - cpu0.hubs) / cycles,
    postgres: postgresPid ? (treeCpuMs(postgresPid) - cpu0.postgres) / cycles : NaN,
    load: (load.user + load.system) / 1_000 / cycles,
  };
  return { cycles: cycles / wall, cpu, refused, acquire: summarize(acquire.sorted()), violations };
}

/**
 * Paced sends through the first hub to a Subscribe stream on the last; send -> frame latency.
 * An unmeasured warm-up (`--warmup-ms` at 300/s, as bench:messages) comes first, so the figures
 * are the hubs' steady state, not their first JIT and first statements. The sends come from a
 * worker thread (sender.ts), each content carrying its send's time, and this thread only takes
 * the frames: a load generator that sends and times on one heap stops for the collections of
 * every send it made (its HTTP/2 streams among them), and that delay would show in the latencies.
 */
async function messageLatency(hubs: Hub[], run: number): Promise<{ latency: Summary; lost: number; failed: number }> {
  const first = hubs[0]!.url;
  const last = hubs[hubs.length - 1]!.url;
  const sender = await register(first, `sender-${run}`);
  const recipient = await register(last, `recipient-${run}`);
  const subConn = await H2Conn.connect(last);
  const latency = new Samples();
  // BENCH_LATENCY_LOG=FILE: one line per measured message, "<ms after the first send> <wall-clock
  // ms of its send> <latency ms>", to lay the tail next to a hub's GC or event-loop log.
  const log = process.env.BENCH_LATENCY_LOG;
  const received = { w: 0, m: 0 };
  let start: number | undefined;
  let ready!: () => void;
  const isReady = new Promise<void>((r) => (ready = r));
  const stream = subConn.serverStream(PeerService.method.subscribe, {}, recipient.headers, {
    onMessage: (f: SubscribeResponse) => {
      if (f.event.case === "ready") ready();
      if (f.event.case !== "message") return;
      const arrived = monoMs();
      const content = f.event.value.content;
      const phase = content[0];
      if (phase !== "w" && phase !== "m") return;
      received[phase]++;
      if (phase === "w") return;
      const t0 = Number(content.slice(content.lastIndexOf("@") + 1));
      const ms = arrived - t0;
      latency.push(ms);
      start ??= t0;
      if (log) fs.appendFileSync(log, `${(t0 - start).toFixed(1)} ${(Date.now() - ms).toFixed(1)} ${ms.toFixed(2)}\n`);
    },
    onEnd: (e) => e && console.error(`  subscribe ended: ${e.message}`),
  });
  await isReady;
  const worker = new Worker(new URL("../common/ts-worker.mjs", import.meta.url), {
    workerData: {
      entry: new URL("./sender.ts", import.meta.url).href,
      url: first,
      headers: sender.headers,
      target: recipient.id,
      run,
      rate,
      seconds,
      warmupMs,
    } satisfies SenderOptions & { entry: string },
  });
  const reports: SenderReport[] = [];
  let reported: (() => void) | undefined;
  worker.on("message", (r: SenderReport) => {
    reports.push(r);
    reported?.();
  });
  const failedWorker = new Promise<never>((_, reject) => {
    worker.once("error", reject);
    worker.once("exit", (code) => reports.length < 2 && reject(new Error(`the sender ended early (exit code ${code})`)));
  });
  const report = (n: number) =>
    Promise.race([
      failedWorker,
      new Promise<SenderReport>((resolve) => {
        const check = () => reports.length >= n && resolve(reports[n - 1]!);
        reported = check;
        check();
      }),
    ]);
  /** Waits up to `ms` for `count()` (frames arrived) to reach `expected`. */
  async function drain(count: () => number, expected: number, ms: number): Promise<void> {
    const until = monoMs() + ms;
    while (count() < expected && monoMs() < until) await new Promise((r) => setTimeout(r, 20));
  }
  try {
    const warm = await report(1);
    await drain(() => received.w, warm.sent - warm.failed, 1_000);
    /** Warm-up messages that never arrived: lost like any other, though not timed. */
    const warmupLost = warm.sent - warm.failed - received.w;
    worker.postMessage("measure");
    const measured = await report(2);
    await drain(() => received.m, measured.sent - measured.failed, 3_000);
    return { latency: summarize(latency.sorted()), lost: measured.sent - measured.failed - received.m + warmupLost, failed: measured.failed };
  } finally {
    stream.cancel();
    subConn.close();
    await worker.terminate();
  }
}

let cleanup: (() => Promise<void>) | undefined;

async function main() {
  console.log(`kxm-hub replicas benchmark: ${os.cpus().length} CPUs, node ${process.version}`);
  console.log(`  leases: ${concurrency} clients over the target's hubs, ${seconds} s measured after 1 s, REST over HTTP/1.1 (node:http, keep-alive)`);
  console.log(`  messages: ${rate}/s for ${seconds} s, sent through the first hub from a worker thread, Subscribe on the last (lean h2 client)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-replicas-"));
  let pg: TestPostgres | undefined;
  let hubs: Hub[] = [];
  cleanup = async () => {
    await Promise.all(hubs.map(stopHub));
    await pg?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const rows: string[] = [];
  for (const [run, target] of targets.entries()) {
    if (target === "sqlite-1") {
      hubs = [await startHub({ KXM_DATA_PATH: path.join(dir, `kxm-${run}.db`) })];
    } else {
      pg ??= await startPostgres({ fsync: true });
      const url = await pg.createDatabase();
      hubs = [];
      for (let i = 0; i < (target === "postgres-3" ? 3 : 1); i++) hubs.push(await startHub({ KXM_DATABASE_URL: url }));
    }
    const postgresPid = pg && target !== "sqlite-1" ? findProcess(["/bin/postgres", `-p ${pg.port} `]) : undefined;
    const u = parts.has("leases") ? await leaseCycles(hubs, false, run, postgresPid) : undefined;
    const c = parts.has("leases") ? await leaseCycles(hubs, true, run, postgresPid) : undefined;
    const m = parts.has("messages") ? await messageLatency(hubs, run) : undefined;
    const leases = u && c
      ? `${u.cycles.toFixed(0).padStart(10)}${u.acquire.p50.toFixed(2).padStart(9)}${u.acquire.p99.toFixed(2).padStart(9)}` +
        `${c.cycles.toFixed(0).padStart(10)}${String(c.refused).padStart(9)}${String(u.violations + c.violations).padStart(7)}` +
        [u.cpu.hubs, u.cpu.postgres, u.cpu.load].map((ms) => (Number.isFinite(ms) ? ms.toFixed(3) : "-").padStart(8)).join("")
      : `${"-".padStart(10)}${"-".padStart(9)}${"-".padStart(9)}${"-".padStart(10)}${"-".padStart(9)}${"-".padStart(7)}${"-".padStart(8).repeat(3)}`;
    rows.push(`${target.padEnd(12)}${leases}   ${m ? `${fmtSummary(m.latency)}  lost ${m.lost}${m.failed ? `  failed ${m.failed}` : ""}` : "-"}`);
    console.log(`  ${target} done`);
    await Promise.all(hubs.map(stopHub));
    hubs = [];
  }
  console.log("");
  console.log(`${"target".padEnd(12)}${"uncont/s".padStart(10)}${"acq p50".padStart(9)}${"acq p99".padStart(9)}${"cont/s".padStart(10)}${"refused".padStart(9)}${"fence".padStart(7)}${"hub".padStart(8)}${"pg".padStart(8)}${"load".padStart(8)}   message send -> frame`);
  for (const r of rows) console.log(r);
  console.log("(cycles per second; acquire latency in ms; fence = grants whose token did not exceed the last one seen on that name;\n hub, pg, load = CPU ms per uncontended cycle of the hubs together, of PostgreSQL's processes, of this load generator)");
  await cleanup();
  cleanup = undefined;
}

runBench(main, () => cleanup);
