/**
 * Subscribe streams benchmark: one hub in this process (127.0.0.1:0, file database in a temp
 * dir), a lean load generator (bench/common/raw-stream.ts) in a child process by default.
 *   T2. Burst: N Subscribe streams, each its own registered agent, opened at once; time until
 *       every one has its response headers and its ready frame.
 *   T3. Idle: M Subscribe streams held; the hub's RSS before and after (per stream); then
 *       messages sent paced to random ones of them, send -> frame latency.
 * Prints figures only; no assertions. See bench/README.md.
 *
 *   node --import tsx bench/streams/run.ts [--streams 1000] [--idle-streams 10000] [--rate 200] [--seconds 5]
 */
import { fork, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import v8 from "node:v8";
import vm from "node:vm";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { Session } from "node:inspector/promises";
import { performance, PerformanceObserver, constants as perfConstants, type EventLoopUtilization } from "node:perf_hooks";
import { systemClock } from "../../src/clock.js";
import { defaultConfig } from "../../src/config.js";
import { createHub } from "../common/built-hub.js";
import { flagReaders, runBench } from "../common/flags.js";
import { fmtSummary, monoMs } from "../common/stats.js";
import type { MemSample, OpenResult, StreamsOptions, StreamsResult, Usage } from "./load.js";
import { benchHubConfig } from "../common/hub-config.js";

const usage = `usage: node --import tsx bench/streams/run.ts [options]
 T2, burst of Subscribe streams:
  --streams N         streams opened at once, one registered agent each (default 1000; 0 skips T2)
 T3, idle Subscribe streams:
  --idle-streams N    streams held (default 10000; 0 skips T3)
  --rate N            then: messages/s to random ones of them (default 200; 0 skips the sends)
  --seconds N         for this long (default 5)
  --senders N         sender agents, round-robin (default 4)
  --padding N         filler characters per message content (default 64)
  --max-outstanding N skip (and count) a paced slot while N sends are unanswered (default 1000)
  --settle-ms N       after the idle streams are open, wait before the "after" memory sample (default 1000)
  --drain-ms N        after the last answer, wait this long for missing frames (default 3000)
 general:
  --per-session N     streams per h2c session (default 250)
  --register-conc N   RegisterAgent calls in flight while registering (default 64)
  --timeout-ms N      give up waiting for a burst's ready frames after this long (default 30000;
                      T3 waits at least 5 ms per stream)
  --client process|thread
                      process: load generator in a child process, so the hub's process holds only
                      the hub (its RSS and CPU are the hub's) (default); thread: a worker thread
                      of the hub's process (memory and CPU figures then include the client)
  --sync full|normal  SQLite synchronous pragma (default full, the hub's default)
  --max-lag N         hub streamMaxLag (default 1000000)
  --stale-after-ms N  hub staleAfterMs (default 600000, so no agent goes stale while 10,000 register)
  --keepalive-ms N    hub streamKeepAliveMs (default 15000, the hub's default)
  --dir PATH          directory for the temp database (default: os.tmpdir())
  --profile PATH      write a V8 CPU profile (.cpuprofile) of the hub's thread over T3's sends to PATH
  -h, --help`;

const { values: flags } = parseArgs({
  options: {
    streams: { type: "string", default: "1000" },
    "idle-streams": { type: "string", default: "10000" },
    rate: { type: "string", default: "200" },
    seconds: { type: "string", default: "5" },
    senders: { type: "string", default: "4" },
    padding: { type: "string", default: "64" },
    "max-outstanding": { type: "string", default: "1000" },
    "settle-ms": { type: "string", default: "1000" },
    "drain-ms": { type: "string", default: "3000" },
    "per-session": { type: "string", default: "250" },
    "register-conc": { type: "string", default: "64" },
    "timeout-ms": { type: "string", default: "30000" },
    client: { type: "string", default: "process" },
    sync: { type: "string", default: "full" },
    "max-lag": { type: "string", default: "1000000" },
    "stale-after-ms": { type: "string", default: "600000" },
    "keepalive-ms": { type: "string", default: String(defaultConfig.streamKeepAliveMs) },
    dir: { type: "string" },
    profile: { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});
const { fail, num, int } = flagReaders(flags, usage);
const sync = flags.sync === "full" || flags.sync === "normal" ? flags.sync : fail("--sync must be full or normal");
const client = flags.client === "process" || flags.client === "thread" ? flags.client : fail("--client must be process or thread");
const project = "streams";

// Memory samples are taken after forced GCs, so they hold live objects, not garbage.
v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;
function sampleMemory(): MemSample {
  gc();
  gc();
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers };
}

const fsNames: Record<number, string> = {
  0xef53: "ext2/3/4",
  0x01021994: "tmpfs (fsync is a no-op)",
  0x58465342: "xfs",
  0x9123683e: "btrfs",
  0x794c7630: "overlayfs",
};
const loadavg = () => os.loadavg().map((x) => x.toFixed(2)).join(" / ");
const progress = (line: string) => {
  if (process.stderr.isTTY || process.env.BENCH_PROGRESS) process.stderr.write(`  .. ${line}\n`);
};

/** GC pauses of the hub's isolate (the load never runs on it with --client process). */
interface GcStats {
  minor: number;
  minorMs: number;
  major: number;
  majorMs: number;
  maxMs: number;
}
const gcNow: GcStats = { minor: 0, minorMs: 0, major: 0, majorMs: 0, maxMs: 0 };
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = (e as unknown as { detail?: { kind?: number } }).detail?.kind;
    if (kind === perfConstants.NODE_PERFORMANCE_GC_MAJOR) {
      gcNow.major++;
      gcNow.majorMs += e.duration;
    } else {
      gcNow.minor++;
      gcNow.minorMs += e.duration;
    }
    gcNow.maxMs = Math.max(gcNow.maxMs, e.duration);
  }
}).observe({ entryTypes: ["gc"] });

/** The hub process's event-loop utilization, CPU and GC between a scenario's begin and end marks. */
const hubUsage = new Map<string, { busy: number; cores: number; gc: GcStats }>();
const begun = new Map<string, { elu: EventLoopUtilization; cpu: NodeJS.CpuUsage; t: number; gc: GcStats }>();
let profiler: Session | undefined;
async function onMark(phase: "begin" | "end", label: string) {
  if (phase === "begin") {
    if (flags.profile && label === "t3-send") {
      profiler = new Session();
      profiler.connect();
      await profiler.post("Profiler.enable");
      await profiler.post("Profiler.setSamplingInterval", { interval: 250 });
      await profiler.post("Profiler.start");
    }
    gcNow.maxMs = 0;
    begun.set(label, { elu: performance.eventLoopUtilization(), cpu: process.cpuUsage(), t: monoMs(), gc: { ...gcNow } });
    return;
  }
  const b = begun.get(label);
  if (!b) return;
  const cpu = process.cpuUsage(b.cpu);
  const gc: GcStats = {
    minor: gcNow.minor - b.gc.minor,
    minorMs: gcNow.minorMs - b.gc.minorMs,
    major: gcNow.major - b.gc.major,
    majorMs: gcNow.majorMs - b.gc.majorMs,
    maxMs: gcNow.maxMs,
  };
  hubUsage.set(label, { busy: performance.eventLoopUtilization(b.elu).utilization, cores: (cpu.user + cpu.system) / 1_000 / (monoMs() - b.t), gc });
  if (profiler && label === "t3-send") {
    const { profile } = await profiler.post("Profiler.stop");
    fs.writeFileSync(flags.profile!, JSON.stringify(profile));
    profiler.disconnect();
    profiler = undefined;
  }
}

let cleanup: (() => Promise<void>) | undefined;

interface Peer {
  send(m: unknown): void;
  on(f: (m: unknown) => void): void;
  onExit(f: (why: string) => void): void;
  stop(): Promise<void>;
  describe: string;
}

function startLoad(options: StreamsOptions): Peer {
  const entry = new URL("./child.ts", import.meta.url);
  if (client === "thread") {
    const w = new Worker(new URL("../common/ts-worker.mjs", import.meta.url), { workerData: { entry: entry.href, options } });
    return {
      send: (m) => w.postMessage(m),
      on: (f) => w.on("message", f),
      onExit: (f) => {
        w.once("error", (e) => f(`worker failed: ${e.stack ?? e.message}`));
        w.once("exit", (code) => f(`worker exited with ${code}`));
      },
      stop: async () => void (await w.terminate()),
      describe: "in a worker thread of the hub's process (own event loop; memory and CPU figures include it)",
    };
  }
  const child: ChildProcess = fork(fileURLToPath(entry), [], {
    execArgv: ["--import", import.meta.resolve("tsx")],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  child.send({ type: "start", options });
  return {
    send: (m) => child.send(m as object),
    on: (f) => child.on("message", f),
    onExit: (f) => child.once("exit", (code, signal) => f(`load process exited (${signal ?? code})`)),
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise<void>((r) => child.once("exit", () => r()));
      child.kill();
      await gone;
    },
    describe: `in a child process (pid ${child.pid}): the hub's process holds only the hub`,
  };
}

async function main() {
  const dir = fs.mkdtempSync(path.join(flags.dir ?? os.tmpdir(), "kxm-bench-"));
  const config = benchHubConfig(dir, sync, {
    streamMaxLag: int("max-lag", 1),
    staleAfterMs: int("stale-after-ms", 1_000),
    streamKeepAliveMs: int("keepalive-ms", 100),
  });
  const hub = await createHub(config, { log: false, clock: systemClock });
  let peer: Peer | undefined;
  cleanup = async () => {
    cleanup = undefined;
    try {
      await peer?.stop();
      await hub.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  };
  const { url } = await hub.listen();
  const options: StreamsOptions = {
    baseUrl: url,
    project,
    streams: int("streams", 0),
    idleStreams: int("idle-streams", 0),
    perSession: int("per-session", 1),
    rate: num("rate", 0),
    seconds: num("seconds", 0),
    senders: int("senders", 1),
    padding: int("padding", 0),
    maxOutstanding: int("max-outstanding", 1),
    registerConc: int("register-conc", 1),
    timeoutMs: int("timeout-ms", 100),
    drainMs: int("drain-ms", 0),
    settleMs: int("settle-ms", 0),
  };

  const fsType = fs.statfsSync(dir).type;
  const cpus = os.cpus();
  console.log("kxm-hub Subscribe streams benchmark (bench/streams)");
  console.log(`  node      ${process.version} on ${os.platform()}/${os.arch()}, ${cpus.length} CPUs (${cpus[0]?.model.trim() ?? "?"})`);
  console.log(`  load avg  ${loadavg()} (1/5/15 min) at start`);
  console.log(`  database  ${config.dataPath}  [${fsNames[fsType] ?? `fs 0x${fsType.toString(16)}`}], synchronous=${sync.toUpperCase()}, WAL`);
  console.log(
    `  hub       in-process on ${url}; rate limit off; logging off; streamMaxLag ${config.streamMaxLag} ` +
      `(default ${defaultConfig.streamMaxLag}); staleAfterMs ${config.staleAfterMs} (default ${defaultConfig.staleAfterMs}); ` +
      `keep-alive ${config.streamKeepAliveMs} ms`,
  );
  peer = startLoad(options);
  console.log(`  load      lean client (bench/common/raw-stream.ts: node:http2, Connect streaming over h2c, fromBinary per frame),`);
  console.log(`            ${peer.describe}; ${options.perSession} streams per h2c session`);
  console.log(`            latencies use process.hrtime (CLOCK_MONOTONIC, one clock for every process and thread of the machine)`);

  const p = peer;
  const result = await new Promise<StreamsResult>((resolve, reject) => {
    p.on((raw) => {
      const m = raw as
        | { type: "mark"; phase: "begin" | "end"; label: string }
        | { type: "sample"; id: number; label: string }
        | { type: "progress"; line: string }
        | { type: "done"; result: StreamsResult }
        | { type: "error"; error: string };
      switch (m.type) {
        case "mark":
          return void onMark(m.phase, m.label).catch(reject);
        case "sample":
          return p.send({ type: "sampled", id: m.id, sample: sampleMemory() });
        case "progress":
          return progress(m.line);
        case "done":
          return resolve(m.result);
        case "error":
          return reject(new Error(m.error));
      }
    });
    p.onExit((why) => reject(new Error(why)));
  });
  print(result, options);
  console.log("");
  console.log(`load avg ${loadavg()} (1/5/15 min) at end.`);
  await cleanup?.();
}

const f = (n: number | undefined, d = 0) => (n !== undefined && Number.isFinite(n) ? n.toFixed(d) : "-");
const mb = (b: number) => `${(b / 2 ** 20).toFixed(1)} MB`;
const pct = (x: number) => `${Math.round(x * 100)}%`;

function cpuLine(label: string, load: Usage): string {
  const h = hubUsage.get(label);
  const hub = h ? `hub thread ${pct(h.busy)} busy, hub process ${h.cores.toFixed(2)} cores` : "hub -";
  const loadCores = client === "process" ? `, load process ${load.cores.toFixed(2)} cores` : "";
  const note = client === "thread" ? " (thread: process cores include the load)" : "";
  return `${hub}; load thread ${pct(load.busy)} busy${loadCores}${note}`;
}

/** The hub's GC pauses over a marked scenario (with --client thread, the worker's GCs are its own and not counted). */
function gcLine(label: string): string {
  const g = hubUsage.get(label)?.gc;
  if (!g) return "-";
  return (
    `${g.minor} minor (${f(g.minorMs)} ms), ${g.major} major (${f(g.majorMs)} ms); longest pause ${f(g.maxMs, 1)} ms`
  );
}

function printOpen(o: OpenResult, label: string) {
  console.log(`   ${o.streams} streams over ${o.sessions.length} h2c session(s) (${sessionsText(o.sessions)}); sessions connected beforehand in ${f(o.connectMs)} ms`);
  console.log(`   requests issued in ${f(o.issueMs, 1)} ms (client loop); from the first request until:`);
  console.log(`     all response headers   ${f(o.allHeadersMs)} ms`);
  console.log(`     all ready frames       ${f(o.allReadyMs)} ms   <- established (first response frame decoded)`);
  console.log(`   per stream, from its own request:`);
  console.log(`     headers                ${fmtSummary(o.headers)}  (n=${o.headers.n})`);
  console.log(`     ready frame            ${fmtSummary(o.ready)}  (n=${o.ready.n})`);
  if (o.failed || o.missing) console.log(`   FAILED ${o.failed}, no ready frame by the timeout ${o.missing}${o.firstError ? `: ${o.firstError}` : ""}`);
  console.log(`   cpu       ${cpuLine(label, o.load)}`);
  console.log(`   hub gc    ${gcLine(label)}`);
}

function sessionsText(s: number[]): string {
  const distinct = [...new Set(s)];
  if (distinct.length === 1) return `${s[0]} each`;
  return s.length <= 8 ? s.join(" + ") : `${s[0]} each, last ${s[s.length - 1]}`;
}

function print(r: StreamsResult, o: StreamsOptions) {
  console.log("");
  console.log(
    `registered ${r.registered} agents in project "${o.project}" in ${f(r.registerMs)} ms ` +
      `(${f((r.registered / r.registerMs) * 1_000)}/s, ${o.registerConc} RegisterAgent calls in flight)`,
  );
  if (r.burst) {
    console.log("");
    console.log(`T2. Subscribe burst: ${r.burst.streams} streams opened at once, each authenticated as its own agent`);
    printOpen(r.burst, "t2-open");
  }
  const i = r.idle;
  if (i) {
    console.log("");
    console.log(`T3. Idle Subscribe streams: ${i.open.streams} held`);
    printOpen(i.open, "t3-open");
    const n = i.open.streams - i.open.failed - i.open.missing;
    const per = (a: number, b: number) => `${a - b >= 0 ? "+" : ""}${mb(a - b)} = ${f((a - b) / Math.max(1, n) / 1_024, 1)} KB per stream`;
    const who = client === "process" ? "hub process" : "whole process (hub + load thread)";
    console.log(`   memory of the ${who}, process.memoryUsage() after forced GC, ${n} open streams, ${o.settleMs} ms after the last opened:`);
    console.log(`     rss            ${mb(i.hubBefore.rss)} -> ${mb(i.hubAfter.rss)}: ${per(i.hubAfter.rss, i.hubBefore.rss)}`);
    console.log(`     heap used      ${mb(i.hubBefore.heapUsed)} -> ${mb(i.hubAfter.heapUsed)}: ${per(i.hubAfter.heapUsed, i.hubBefore.heapUsed)}`);
    console.log(`     external       ${mb(i.hubBefore.external)} -> ${mb(i.hubAfter.external)}: ${per(i.hubAfter.external, i.hubBefore.external)}`);
    if (client === "process") {
      console.log(
        `   (the load process, for scale: rss ${mb(i.clientBefore.rss)} -> ${mb(i.clientAfter.rss)}, ` +
          `heap used ${mb(i.clientBefore.heapUsed)} -> ${mb(i.clientAfter.heapUsed)}; not part of the figures above)`,
      );
    } else {
      console.log(
        `   (the load thread's own heap: ${mb(i.clientBefore.heapUsed)} -> ${mb(i.clientAfter.heapUsed)}; its sockets, buffers ` +
          `and nghttp2 state are inside the rss above. Use --client process for the hub alone.)`,
      );
    }
    const s = i.sends;
    if (s) {
      const secs = s.sendWindowMs / 1_000;
      console.log(`   sends: paced ${s.rate}/s for ${s.seconds} s to random idle streams, from ${o.senders} sender agents on one h2c session`);
      console.log(
        `     sent      ${s.issued} issued, ${s.accepted} accepted, ${s.failed} failed` +
          `${s.skipped ? `, ${s.skipped} SKIPPED (${o.maxOutstanding} unanswered)` : ""}${s.firstError ? ` (${s.firstError})` : ""}; ` +
          `achieved ${f(s.accepted / secs)} msg/s over ${f(secs, 2)} s; pacer lag max ${f(s.pacerLagMaxMs, 1)} ms; max ${s.maxOutstanding} outstanding`,
      );
      console.log(`     SendMessage round trip    ${fmtSummary(s.rtt)}`);
      console.log(`     send -> Subscribe frame   ${fmtSummary(s.latency)}  (n=${s.latency.n})`);
      const clean = s.lost === 0 && s.duplicates === 0 && s.unexpected === 0;
      console.log(
        `     received  ${s.received}; lost ${s.lost}, duplicated ${s.duplicates}, unexpected ${s.unexpected}` +
          `${clean ? " (none lost or duplicated)" : "  <-- NOT CLEAN"}; last frame ${f(s.drainMs)} ms after the last answer`,
      );
      console.log(`     cpu       ${cpuLine("t3-send", s.load)}`);
      console.log(`     hub gc    ${gcLine("t3-send")}${flags.profile ? `; CPU profile of the hub thread: ${flags.profile}` : ""}`);
      console.log(`     per second of send time (latency by send time; keep-alive frames the idle streams got in that second):`);
      console.log(`        s   sent  recv   p99 ms   max ms  keep-alives`);
      s.perSecond.forEach((b, k) => {
        console.log(
          `     ${String(k).padStart(4)} ${String(b.sent).padStart(6)} ${String(b.received).padStart(5)} ${f(b.p99, 2).padStart(8)} ` +
            `${f(b.max, 2).padStart(8)} ${String(b.keepAlives).padStart(12)}`,
        );
      });
      console.log(`   memory after the sends: rss ${mb(i.hubAfterSends.rss)}, heap used ${mb(i.hubAfterSends.heapUsed)}`);
    }
    console.log(
      `   other frames on the idle streams while held: ${i.keepAlives} keep-alive (${i.keepAlivesDuringSends} during the sends; ` +
        `not in any latency), ${i.presenceFrames} presence, ${i.otherFrames} other; ` +
        `${i.streamErrors} streams ended${i.firstStreamError ? ` (${i.firstStreamError})` : ""}`,
    );
  }
}

runBench(main, () => cleanup);
