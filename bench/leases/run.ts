/**
 * Lease decision benchmark: one hub in this process (127.0.0.1:0, file database in a temp
 * dir), agents registered over RPC, acquire -> renew -> release cycles over Connect binary
 * (HTTP/2 and HTTP/1.1), plus two floors measured in the same run:
 *   - the same decisions on the lease domain + store, no RPC;
 *   - a no-op RPC (runtime-defined kxm.bench.v1.PingService) on the same server, no store.
 * Prints figures only; no assertions. See bench/README.md.
 *
 *   node --import tsx bench/leases/run.ts [--seconds 3] [--sync full|normal] [--client inline|thread]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { createClient } from "@connectrpc/connect";
import { systemClock } from "../../src/clock.js";
import { createHub } from "../common/built-hub.js";
import { createBus } from "../../src/events/bus.js";
import { createLeases, type LeaseChange } from "../../src/lease/leases.js";
import type { AgentCaller } from "../../src/caller.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { runClosedLoop, runRpcScenario, type AgentCreds, type Phase, type RpcScenario, type RunResult } from "./load.js";
import { PingService, pingImpl } from "./ping.js";
import { percentile } from "../common/stats.js";
import { makeTransport } from "../common/transport.js";
import { flagReaders, runBench } from "../common/flags.js";
import { benchHubConfig } from "../common/hub-config.js";

const usage = `usage: node --import tsx bench/leases/run.ts [options]
  --seconds N         measured window per scenario (default 3)
  --warmup-ms N       warm-up per scenario, not measured (default 300)
  --ops N             also end a window after N samples (default 0 = time only)
  --sync full|normal  SQLite synchronous pragma (default full, the hub's default)
  --conc LIST         concurrency levels, comma-separated (default 1,32)
  --http LIST         HTTP versions for the RPC scenarios (default 2,1.1)
  --contention on|off all workers on one lease name, highest concurrency, HTTP/2 (default on)
  --client inline|thread
                      inline: load generator on the hub's own thread (default);
                      thread: a worker thread of this process (own event loop)
  --ttl-ms N          lease TTL per acquire/renew (default 60000)
  --dir PATH          directory for the temp database (default: os.tmpdir())
  -h, --help`;

const { values: flags } = parseArgs({
  options: {
    seconds: { type: "string", default: "3" },
    "warmup-ms": { type: "string", default: "300" },
    ops: { type: "string", default: "0" },
    sync: { type: "string", default: "full" },
    conc: { type: "string", default: "1,32" },
    http: { type: "string", default: "2,1.1" },
    contention: { type: "string", default: "on" },
    client: { type: "string", default: "inline" },
    "ttl-ms": { type: "string", default: "60000" },
    dir: { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});
const { fail } = flagReaders(flags, usage);
const num = (name: string, raw: string, min: number) => {
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min) fail(`--${name} must be a number >= ${min}`);
  return n;
};
const sync = flags.sync === "full" || flags.sync === "normal" ? flags.sync : fail("--sync must be full or normal");
const client = flags.client === "inline" || flags.client === "thread" ? flags.client : fail("--client must be inline or thread");
const contention = flags.contention === "on" ? true : flags.contention === "off" ? false : fail("--contention must be on or off");
const concs = flags.conc.split(",").map((c) => Math.floor(num("conc", c.trim(), 1)));
const https = flags.http.split(",").map((h) => h.trim());
for (const h of https) if (h !== "2" && h !== "1.1") fail("--http takes 2 and/or 1.1");
const httpVersions = https as ("2" | "1.1")[];
const phase: Phase = {
  warmupMs: num("warmup-ms", flags["warmup-ms"], 0),
  durationMs: num("seconds", flags.seconds, 0.1) * 1_000,
  maxOps: Math.floor(num("ops", flags.ops, 0)),
};
const ttlMs = Math.floor(num("ttl-ms", flags["ttl-ms"], 5_000));
const maxConc = Math.max(...concs);

const fsNames: Record<number, string> = {
  0xef53: "ext2/3/4",
  0x01021994: "tmpfs (fsync is a no-op)",
  0x58465342: "xfs",
  0x9123683e: "btrfs",
  0x794c7630: "overlayfs",
  0x6a656a63: "fakeowner",
};

/** Set once the hub exists: stops it and removes the temp dir (also on failure). */
let cleanup: (() => Promise<void>) | undefined;

async function main() {
  const dir = fs.mkdtempSync(path.join(flags.dir ?? os.tmpdir(), "kxm-bench-"));
  const config = benchHubConfig(dir, sync);
  const hub = await createHub(config, {
    log: false,
    clock: systemClock,
    extraServices: [{ service: PingService, impl: pingImpl, auth: { kind: "public" } }],
  });
  cleanup = async () => {
    cleanup = undefined;
    await hub.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const { url } = await hub.listen();

  const fsType = fs.statfsSync(dir).type;
  const cpus = os.cpus();
  console.log("kxm-hub lease benchmark");
  console.log(`  node ${process.version} on ${os.platform()}/${os.arch()}, ${cpus.length} CPUs (${cpus[0]?.model.trim() ?? "?"})`);
  console.log(`  load avg  ${os.loadavg()[0]!.toFixed(2)} (1 min) at start: other processes on these cores skew every line`);
  console.log(`  database  ${config.dataPath}  [${fsNames[fsType] ?? `fs 0x${fsType.toString(16)}`}]`);
  console.log(`  sqlite    journal_mode=WAL synchronous=${sync.toUpperCase()}${sync === "full" ? " (fsync of the WAL on every committed decision)" : ""}`);
  console.log(
    `  load      connect-node client (@connectrpc/connect-node createConnectTransport, binary), ` +
      (client === "inline"
        ? "IN-PROCESS on the hub's own thread: client and server share one event loop and the same cores"
        : "in a worker thread of the hub's process: own event loop, but the same 2 cores"),
  );
  console.log(`            closed loop: each worker waits for its answer before the next call; one shared transport per scenario`);
  console.log(`  window    ${phase.warmupMs} ms warm-up + ${phase.durationMs / 1_000} s measured${phase.maxOps ? ` (or ${phase.maxOps} samples)` : ""} per scenario; lease ttl ${ttlMs} ms`);

  // Agents: one per worker, registered over RPC.
  const agents: AgentCreds[] = [];
  {
    const { transport, close } = makeTransport(url, "2", 1);
    const presence = createClient(PresenceService, transport);
    for (let i = 0; i < maxConc; i++) {
      const r = await presence.registerAgent({ name: `bench-${i}`, project: "bench", purpose: "lease benchmark" });
      agents.push({ id: r.agent!.id, key: r.agentKey, name: r.agent!.name, project: "bench" });
    }
    close();
  }
  console.log(`  agents    ${agents.length} registered over RPC (project "bench"); each worker is its own agent`);

  let worker: Worker | undefined;
  const runRpc = (s: RpcScenario): Promise<RunResult> => {
    if (client === "inline") return runRpcScenario(s);
    worker ??= new Worker(new URL("./worker-entry.mjs", import.meta.url));
    const w = worker;
    return new Promise((resolve, reject) => {
      w.once("message", (m: { ok: true; result: RunResult } | { ok: false; error: string }) =>
        m.ok ? resolve(m.result) : reject(new Error(m.error)),
      );
      w.once("error", reject);
      w.postMessage(s);
    });
  };

  const rows: { scenario: string; conc: number; r: RunResult; perCycle: number }[] = [];
  let seq = 0;
  const names = (conc: number, shared: boolean) => {
    const tag = `s${++seq}`;
    return Array.from({ length: conc }, (_, w) => (shared ? `${tag}-shared` : `${tag}-w${w}`));
  };
  const record = (scenario: string, conc: number, r: RunResult, perCycle: number) => {
    rows.push({ scenario, conc, r, perCycle });
    if (process.stderr.isTTY) process.stderr.write(`  done: ${scenario} x${conc}\n`);
  };

  // Floor (a): the same decisions on the lease domain + store, no RPC, no auth.
  const leases = createLeases({ store: hub.store, clock: systemClock, observer: hub.observer, bus: createBus<LeaseChange>((c) => c.project) });
  for (const conc of concs) {
    const ns = names(conc, false);
    const r = await runClosedLoop(conc, phase, (w) => {
      const a = agents[w]!;
      const caller: AgentCaller = { kind: "agent", agentId: a.id, agentName: a.name, project: a.project };
      const name = ns[w]!;
      return async (timed) => {
        const got = await timed(() => leases.acquire(caller, { name, ttlMs }));
        const fencingToken = got.lease.fencingToken;
        await timed(() => leases.renew(caller, { name, fencingToken, ttlMs }));
        await timed(() => leases.release(caller, { name, fencingToken }));
        return "cycle";
      };
    });
    record("floor: store+domain, no RPC", conc, r, 3);
  }

  for (const httpVersion of httpVersions) {
    const label = httpVersion === "2" ? "h2" : "h1.1";
    // Floor (b): no-op RPC on the same server and client.
    for (const conc of concs) {
      const r = await runRpc({ baseUrl: url, httpVersion, kind: "ping", concurrency: conc, agents, names: [], ttlMs, phase });
      record(`floor: no-op Ping RPC (${label})`, conc, r, 1);
    }
    for (const conc of concs) {
      const s: RpcScenario = { baseUrl: url, httpVersion, kind: "lease", concurrency: conc, agents, names: names(conc, false), ttlMs, phase };
      record(`lease RPC acq/renew/rel (${label})`, conc, await runRpc(s), 3);
    }
  }
  if (contention) {
    const s: RpcScenario = { baseUrl: url, httpVersion: "2", kind: "lease", concurrency: maxConc, agents, names: names(maxConc, true), ttlMs, phase };
    record("lease RPC, one shared name (h2)", maxConc, await runRpc(s), 3);
  }

  await worker?.terminate();
  await cleanup?.();

  // Table.
  const f = (n: number, d = 0) => (Number.isFinite(n) ? n.toFixed(d) : "-");
  console.log("");
  console.log(
    `${"scenario".padEnd(36)}${"conc".padStart(5)}${"ops/s".padStart(9)}${"cycles/s".padStart(10)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}  notes`,
  );
  for (const { scenario, conc, r, perCycle } of rows) {
    const secs = r.elapsedMs / 1_000;
    const notes: string[] = [`n=${r.ops}`];
    if (r.refused) notes.push(`${r.refused} acquires refused (held)`);
    if (r.errors) notes.push(`${r.errors} ERRORS: ${r.firstError}`);
    console.log(
      `${scenario.padEnd(36)}${String(conc).padStart(5)}${f(r.ops / secs).padStart(9)}` +
        `${(perCycle > 1 ? f(r.cycles / secs) : "").padStart(10)}` +
        `${f(percentile(r.lat, 0.5), 2).padStart(9)}${f(percentile(r.lat, 0.99), 2).padStart(9)}  ${notes.join("; ")}`,
    );
  }
  console.log("");
  console.log("ops/s = decisions (or pings) per second; a cycle = acquire + renew + release = 3 decisions.");
  console.log("p50/p99 = latency of one call (one decision or one ping), measured by the caller.");
  console.log(`load avg ${os.loadavg()[0]!.toFixed(2)} (1 min) at end.`);
  const h2ping = rows.find((x) => x.scenario.startsWith("floor: no-op Ping RPC (h2)") && x.conc === 1);
  if (h2ping && percentile(h2ping.r.lat, 0.5) > 30) {
    console.log(
      "NOTE: sequential HTTP/2 calls take ~40 ms: the signature of Nagle on the hub's accepted sockets meeting the " +
        "client's delayed ACK (src/http/listen.ts must create its net server with noDelay: true).",
    );
  }
}

runBench(main, () => cleanup);
