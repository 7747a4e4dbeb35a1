/**
 * Streams benchmark: one hub in this process (127.0.0.1:0, file database in a temp dir).
 *   1. SendMessage -> Subscribe latency: senders send paced (and then unpaced) over Connect
 *      binary/h2c from a thread of their own; each content carries its send time; recipients
 *      time the frame's arrival on the load's main thread.
 *   2. WatchPresence fan-out: many watchers over a few h2c connections; register an agent and
 *      time its frame at every watcher.
 * Prints figures only; no assertions. See bench/README.md.
 *
 *   node --import tsx bench/messages/run.ts [--rate 1000] [--seconds 5] [--watchers 1000] [--conns 4]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { fork, type ChildProcess } from "node:child_process";
import { Worker } from "node:worker_threads";
import { systemClock } from "../../src/clock.js";
import { defaultConfig } from "../../src/config.js";
import { createHub } from "../common/built-hub.js";
import { performance, type EventLoopUtilization } from "node:perf_hooks";
import { flagReaders, runBench } from "../common/flags.js";
import { fmtSummary, monoMs } from "../common/stats.js";
import { runLoad, type LoadOptions, type LoadResult, type Mark, type MessagesResult } from "./load.js";
import { benchHubConfig } from "../common/hub-config.js";

const usage = `usage: node --import tsx bench/messages/run.ts [options]
 messages (SendMessage -> Subscribe):
  --senders N         sender agents (default 8)
  --recipients N      recipient agents, one Subscribe stream each (default 1)
  --rate LIST         paced targets, messages/s over all senders, one scenario each (default 1000,500)
  --seconds N         duration of each paced scenario (default 5)
  --max-outstanding N paced: skip (and count) a slot while N sends are unanswered, which bounds
                      the backlog of a hub that cannot keep up (default 1000)
  --max-conc N        unpaced scenario: sends in flight at once (default 32)
  --max-seconds N     unpaced duration; 0 skips it (default 3)
  --padding N         filler characters per message content (default 64)
  --drain-ms N        after the last answer, wait this long for missing frames (default 3000)
  --warmup-ms N       unmeasured warm-up at 300 msg/s before the first scenario (default 1000; 0 = none)
  --send-client lean|connect
                      who sends and subscribes in the messages part: lean (default:
                      bench/common/raw-stream.ts, node:http2 with Connect framing by hand) or
                      connect (connect-node clients, whose own per-call cost and garbage then
                      share the 2 cores and show in the latencies)
 presence fan-out (WatchPresence):
  --watchers N        WatchPresence streams (default 1000)
  --conns N           h2c connections they are spread over (default 4)
  --rounds N          register-an-agent rounds (default 5)
  --watch-as token|agent
                      token: project-token callers (default); agent: a registered agent per watcher
  --timeout-ms N      give up waiting for snapshots / a round after this long (default 15000)
  --watch-client lean|connect
                      lean: bench/common/raw-stream.ts, node:http2 with Connect framing by hand and
                      fromBinary per frame (default); connect: connect-node
 general:
  --parts LIST        messages,fanout (default both)
  --client process|thread|inline
                      process: load generator in a process of its own (default);
                      thread: a worker thread of this process (own event loop and heap, but
                      the process's V8 and libuv thread pools shared with the hub);
                      inline: on the hub's own thread and event loop
  --sync full|normal  SQLite synchronous pragma (default full, the hub's default)
  --max-lag N         hub streamMaxLag (default 1000000, so no stream is cut off as too slow)
  --dir PATH          directory for the temp database (default: os.tmpdir())
  -h, --help`;

const { values: flags } = parseArgs({
  options: {
    senders: { type: "string", default: "8" },
    recipients: { type: "string", default: "1" },
    rate: { type: "string", default: "1000,500" },
    seconds: { type: "string", default: "5" },
    "max-conc": { type: "string", default: "32" },
    "max-outstanding": { type: "string", default: "1000" },
    "max-seconds": { type: "string", default: "3" },
    padding: { type: "string", default: "64" },
    "drain-ms": { type: "string", default: "3000" },
    "warmup-ms": { type: "string", default: "1000" },
    watchers: { type: "string", default: "1000" },
    conns: { type: "string", default: "4" },
    rounds: { type: "string", default: "5" },
    "watch-as": { type: "string", default: "token" },
    "timeout-ms": { type: "string", default: "15000" },
    "watch-client": { type: "string", default: "lean" },
    "send-client": { type: "string", default: "lean" },
    parts: { type: "string", default: "messages,fanout" },
    client: { type: "string", default: "process" },
    sync: { type: "string", default: "full" },
    "max-lag": { type: "string", default: "1000000" },
    dir: { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});
const { fail, num, int } = flagReaders(flags, usage);
const sync = flags.sync === "full" || flags.sync === "normal" ? flags.sync : fail("--sync must be full or normal");
const client =
  flags.client === "inline" || flags.client === "thread" || flags.client === "process"
    ? flags.client
    : fail("--client must be process, thread or inline");
const watchAs = flags["watch-as"] === "token" || flags["watch-as"] === "agent" ? flags["watch-as"] : fail("--watch-as must be token or agent");
const sendClient =
  flags["send-client"] === "lean" || flags["send-client"] === "connect" ? flags["send-client"] : fail("--send-client must be lean or connect");
const watchClient =
  flags["watch-client"] === "lean" || flags["watch-client"] === "connect" ? flags["watch-client"] : fail("--watch-client must be lean or connect");
const parts = new Set(flags.parts.split(",").map((p) => p.trim()));
for (const p of parts) if (p !== "messages" && p !== "fanout") fail("--parts takes messages and/or fanout");
const maxLag = int("max-lag", 1);
const fanProject = "fanout";
const fanToken = `tok_${randomBytes(16).toString("hex")}`;

const loadOptions = (baseUrl: string): LoadOptions => ({
  baseUrl,
  ...(parts.has("messages") && {
    messages: {
      senders: int("senders", 1),
      recipients: int("recipients", 1),
      rates: flags.rate.split(",").map((r) => {
        const n = Number(r.trim());
        return Number.isFinite(n) && n >= 1 ? n : fail("--rate takes numbers >= 1");
      }),
      seconds: num("seconds", 0.1),
      maxConc: int("max-conc", 0),
      maxOutstanding: int("max-outstanding", 1),
      maxSeconds: num("max-seconds", 0),
      padding: int("padding", 0),
      drainMs: int("drain-ms", 0),
      warmupMs: int("warmup-ms", 0),
      client: sendClient,
      sendThread: client !== "inline",
    },
  }),
  ...(parts.has("fanout") && {
    fanout: {
      watchers: int("watchers", 1),
      conns: int("conns", 1),
      rounds: int("rounds", 1),
      watchAs,
      project: fanProject,
      token: fanToken,
      timeoutMs: int("timeout-ms", 100),
      client: watchClient,
    },
  }),
});

const fsNames: Record<number, string> = {
  0xef53: "ext2/3/4",
  0x01021994: "tmpfs (fsync is a no-op)",
  0x58465342: "xfs",
  0x9123683e: "btrfs",
  0x794c7630: "overlayfs",
};
const loadavg = () => os.loadavg().map((x) => x.toFixed(2)).join(" / ");

/** What the hub's thread and the whole process spent between a scenario's begin and end marks. */
interface HubUsage {
  /** Event-loop utilization of the hub's thread, 0..1 (better-sqlite3 and its fsyncs count as busy). */
  hubBusy: number;
  /** Process CPU time (all threads) / wall time: 1.0 = one core. */
  cores: number;
}
const hubUsage = new Map<string, HubUsage>();
const begun = new Map<string, { elu: EventLoopUtilization; cpu: NodeJS.CpuUsage; t: number }>();
const onMark: Mark = (phase, label) => {
  if (phase === "begin") {
    begun.set(label, { elu: performance.eventLoopUtilization(), cpu: process.cpuUsage(), t: monoMs() });
    return;
  }
  const b = begun.get(label);
  if (!b) return;
  const cpu = process.cpuUsage(b.cpu);
  hubUsage.set(label, {
    hubBusy: performance.eventLoopUtilization(b.elu).utilization,
    cores: (cpu.user + cpu.system) / 1_000 / (monoMs() - b.t),
  });
};
type LoadMessage = { mark: { phase: "begin" | "end"; label: string } } | { ok: true; result: LoadResult } | { ok: false; error: string };

/** The load's result from a worker thread or a child process, its marks handed to onMark meanwhile. */
function fromLoad(from: Worker | ChildProcess): Promise<LoadResult> {
  return new Promise<LoadResult>((resolve, reject) => {
    from.on("message", (m: LoadMessage) => {
      if ("mark" in m) onMark(m.mark.phase, m.mark.label);
      else if (m.ok) resolve(m.result);
      else reject(new Error(m.error));
    });
    from.once("error", reject);
    from.once("exit", (code) => reject(new Error(`the load generator exited (${code}) before its result`)));
  });
}
const pct = (x: number | undefined) => (x === undefined ? "-" : `${Math.round(x * 100)}%`);

/** Set once the hub exists: stops it and removes the temp dir (also on failure). */
let cleanup: (() => Promise<void>) | undefined;

async function main() {
  const dir = fs.mkdtempSync(path.join(flags.dir ?? os.tmpdir(), "kxm-bench-"));
  const config = benchHubConfig(dir, sync, {
    streamMaxLag: maxLag,
    projectTokens: { [fanProject]: fanToken },
  });
  const hub = await createHub(config, { log: false, clock: systemClock });
  cleanup = async () => {
    cleanup = undefined;
    await hub.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const { url } = await hub.listen();

  const fsType = fs.statfsSync(dir).type;
  const cpus = os.cpus();
  console.log("kxm-hub streams benchmark (bench/messages)");
  console.log(`  node      ${process.version} on ${os.platform()}/${os.arch()}, ${cpus.length} CPUs (${cpus[0]?.model.trim() ?? "?"})`);
  console.log(`  load avg  ${loadavg()} (1/5/15 min) at start`);
  console.log(`  database  ${config.dataPath}  [${fsNames[fsType] ?? `fs 0x${fsType.toString(16)}`}], synchronous=${sync.toUpperCase()}, WAL`);
  console.log(
    `  hub       in-process on ${url}; rate limit off; streamMaxLag ${maxLag} (default ${defaultConfig.streamMaxLag}: ` +
      `raised so no stream is cut off as subscriber_too_slow); keep-alive ${config.streamKeepAliveMs} ms`,
  );
  console.log(
    `  load      sends and Subscribe: ${sendClient === "lean" ? "lean client (bench/common/raw-stream.ts)" : "connect-node"}` +
      `${client === "inline" ? "" : ", the sends from a worker thread of the load"}; ` +
      `watchers: --watch-client; set-up: connect-node; Connect binary over h2c, ` +
      (client === "inline"
        ? "IN-PROCESS on the hub's own thread and event loop, sharing its 2 cores"
        : client === "thread"
          ? "in a worker thread of the hub's process: own event loop, but sharing the hub's 2 cores"
          : "in a process of its own, sharing the hub's 2 cores"),
  );
  console.log(`            latencies: a send's time (carried in its content) and its frame's arrival, both on the load's process.hrtime`);

  const options = loadOptions(url);
  let result: LoadResult;
  if (client === "inline") {
    result = await runLoad(options, onMark);
  } else if (client === "thread") {
    const worker = new Worker(new URL("../common/ts-worker.mjs", import.meta.url), {
      workerData: { entry: new URL("./worker.ts", import.meta.url).href, options },
      // A larger young generation for the load: fewer scavenges pausing the thread that takes the
      // timestamps (the hub's own heap keeps Node's defaults).
      resourceLimits: { maxYoungGenerationSizeMb: 64 },
    });
    result = await fromLoad(worker);
    await worker.terminate();
  } else {
    // The same larger young generation as the thread's (three semi-spaces of 21 MB).
    const child = fork(fileURLToPath(new URL("./worker.ts", import.meta.url)), [], {
      execArgv: ["--import", import.meta.resolve("tsx"), "--max-semi-space-size=21"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    child.send({ options });
    try {
      result = await fromLoad(child);
    } finally {
      child.kill();
    }
  }
  await cleanup?.();

  const f = (n: number | undefined, d = 0) => (n !== undefined && Number.isFinite(n) ? n.toFixed(d) : "-");
  if (result.messages.length) {
    const m = options.messages!;
    console.log("");
    console.log(
      `1. SendMessage -> Subscribe  (${m.senders} sender agents on one h2c connection, ${m.recipients} recipient(s) ` +
        `with one Subscribe stream each on another; content ~${m.padding + 20} chars)`,
    );
    const w = result.warmup;
    if (w) {
      console.log(
        `   (warm-up, not measured: ${w.accepted}/${w.issued} sent at 300/s, ${w.receivedUnique} received, ` +
          `send -> frame ${fmtSummary(w.latency)})`,
      );
    }
    for (const r of result.messages) printMessages(r, options, f);
  }
  const fo = result.fanout;
  if (fo) {
    console.log("");
    console.log(
      `2. WatchPresence fan-out  (${fo.watchers} watchers, ${fo.watchAs === "token" ? "project-token callers" : "one registered agent each"}, ` +
        `over ${fo.conns} h2c connection(s): ${fo.streamsPerConn.join(" + ")} streams)`,
    );
    console.log(
      `   watcher client: ${
        fo.client === "lean"
          ? "lean (bench/common/raw-stream.ts: node:http2, Connect framing by hand, fromBinary per frame)"
          : "connect-node (createClient + Http2SessionManager per connection, for-await per stream)"
      }`,
    );
    console.log(
      `   hub advertises SETTINGS_MAX_CONCURRENT_STREAMS = ${f(fo.serverMaxConcurrentStreams)}` +
        `${fo.serverMaxConcurrentStreams === 2 ** 32 - 1 ? " (2^32-1: Node's default, no limit; src/http/listen.ts sets none)" : ""}`,
    );
    if (fo.registerAgentsMs !== undefined) console.log(`   registered ${fo.watchers} watcher agents in ${f(fo.registerAgentsMs)} ms`);
    console.log(
      `   open: ${fo.snapshots}/${fo.watchers} snapshots in ${f(fo.openMs)} ms` +
        `${fo.openErrors ? `; ${fo.openErrors} streams FAILED: ${fo.firstError}` : ""}` +
        ` (${busyHeader}: ${busy(hubUsage.get("fan-open"), fo.openLoadBusy)})`,
    );
    console.log(
      `   round  RegisterAgent rpc   per-watcher latency (issue -> agent frame decoded)   last watcher  missing  ${busyHeader}`,
    );
    fo.rounds.forEach((r, i) => {
      const u = hubUsage.get(`fan-new-${i}`);
      console.log(
        `   ${String(i + 1).padStart(5)}  ${f(r.rpcMs, 2).padStart(10)} ms    ${fmtSummary(r.perWatcher).padEnd(47)}  ` +
          `${f(r.perWatcher.max, 2).padStart(9)} ms  ${String(r.missing).padStart(7)}  ${busy(u, r.loadBusy)}`,
      );
    });
    console.log(`   (busy = event-loop utilization from RegisterAgent issued until the last watcher had the frame)`);
    if (fo.streamErrors) console.log(`   ${fo.streamErrors} watcher streams ended with an error: ${fo.firstError}`);
  }
  console.log("");
  console.log(`load avg ${loadavg()} (1/5/15 min) at end.`);
}

const busyHeader = client === "inline" ? "busy (one thread) / cpu" : "busy hub / load thread, cpu";
function busy(u: HubUsage | undefined, loadBusy: number): string {
  if (!u) return "-";
  const cores = `${u.cores.toFixed(2)} cores`;
  return client === "inline" ? `${pct(u.hubBusy)}, ${cores}` : `${pct(u.hubBusy)} / ${pct(loadBusy)}, ${cores}`;
}

function printMessages(r: MessagesResult, options: LoadOptions, f: (n: number | undefined, d?: number) => string) {
  const secs = r.sendWindowMs / 1_000;
  console.log(`   ${r.label}:`);
  console.log(
    `     sent      ${r.issued} issued, ${r.accepted} accepted, ${r.failed} failed` +
      `${r.skipped ? `, ${r.skipped} SKIPPED (hub behind: ${options.messages!.maxOutstanding} unanswered)` : ""}` +
      `${r.firstError ? ` (${r.firstError})` : ""}; achieved ${f(r.accepted / secs)} msg/s over ${f(secs, 2)} s` +
      `${r.targetRate ? ` (target ${r.targetRate}/s; pacer lag max ${f(r.pacerLagMaxMs, 1)} ms)` : ""}; max ${r.maxOutstanding} outstanding`,
  );
  console.log(`     SendMessage round trip        ${fmtSummary(r.sendRtt)}`);
  console.log(`     send -> Subscribe frame       ${fmtSummary(r.latency)}  (n=${r.latency.n})`);
  const clean = r.lost === 0 && r.duplicates === 0 && r.unexpected === 0 && r.outOfOrder === 0;
  console.log(
    `     received  ${r.receivedUnique} unique; lost ${r.lost}, duplicated ${r.duplicates}, unexpected ${r.unexpected}, ` +
      `cursor out of order ${r.outOfOrder}${clean ? " (none lost or duplicated)" : "  <-- NOT CLEAN"}; last frame ${f(r.drainMs)} ms after the last answer`,
  );
  const u = hubUsage.get(r.label);
  if (u) {
    console.log(
      `     cpu       ` +
        (client === "inline"
          ? `the one thread (hub + load) ${pct(u.hubBusy)} busy`
          : `hub thread ${pct(u.hubBusy)} busy, load's receiving thread ${pct(r.loadBusy)} and sending thread ${pct(r.sendBusy)} busy`) +
        `; ${client === "process" ? "hub process" : "process"} ${u.cores.toFixed(2)} cores (of ${os.cpus().length}), first send to last frame`,
    );
  }
  for (const e of r.streamErrors) console.log(`     STREAM ERROR ${e}`);
}

runBench(main, () => cleanup);
