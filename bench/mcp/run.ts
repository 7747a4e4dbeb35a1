/**
 * MCP benchmark: what one MCP tool call costs next to the same call on the REST face. One hub in
 * this process (127.0.0.1:0, file database in a temp dir, FULL durability); the load runs on a
 * worker thread (its own event loop), so the hub thread's busy time per call is its own.
 *
 * For each face and concurrency, `--conc` agents (each its own MCP session, or its own REST
 * identity) repeat, as fast as they are answered:
 *   - get:   get_lease  /  GET /v1/leases/{name}            (a read)
 *   - cycle: acquire_lease + release_lease  /  POST .../acquire + POST .../release (two durable writes)
 * Both faces use fetch (undici) with keep-alive: the MCP side is the official TypeScript client
 * over Streamable HTTP (each answer a one-event SSE stream, as the SDK serves it by default).
 * Prints figures only; no assertions. See bench/README.md.
 *
 *   node --import tsx bench/mcp/run.ts [--seconds 3] [--conc 1,8]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance, type EventLoopUtilization } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { systemClock } from "../../src/clock.js";
import { createHub } from "../common/built-hub.js";
import { flagReaders, runBench } from "../common/flags.js";
import { benchHubConfig } from "../common/hub-config.js";
import type { Scenario, ScenarioResult, WorkerMessage } from "./worker.js";

const usage = `usage: node --import tsx bench/mcp/run.ts [options]
  --seconds N     measured seconds per scenario (default 3)
  --warmup N      unmeasured seconds before each scenario (default 1)
  --conc LIST     concurrent agents, one scenario each (default 1,8)
  --ops LIST      get,cycle (default both)
  --sync full|normal  SQLite synchronous pragma (default full, the hub's default)
  -h, --help`;

const { values: flags } = parseArgs({
  options: {
    seconds: { type: "string", default: "3" },
    warmup: { type: "string", default: "1" },
    conc: { type: "string", default: "1,8" },
    ops: { type: "string", default: "get,cycle" },
    sync: { type: "string", default: "full" },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});
const { fail, num } = flagReaders(flags, usage);
const sync = flags.sync === "full" || flags.sync === "normal" ? flags.sync : fail("--sync must be full or normal");
const concs = flags.conc.split(",").map((c) => {
  const n = Number(c.trim());
  return Number.isInteger(n) && n >= 1 ? n : fail("--conc takes integers >= 1");
});
const ops = flags.ops.split(",").map((o) => (o.trim() === "get" || o.trim() === "cycle" ? (o.trim() as Scenario["op"]) : fail("--ops takes get and/or cycle")));

let cleanup: (() => Promise<void>) | undefined;

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-bench-mcp-"));
  const config = benchHubConfig(dir, sync);
  const hub = await createHub(config, { log: false, clock: systemClock });
  cleanup = async () => {
    cleanup = undefined;
    await hub.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const { url } = await hub.listen();
  const cpus = os.cpus();
  console.log("kxm-hub MCP benchmark (bench/mcp): one tool call next to the same REST call");
  console.log(`  node      ${process.version} on ${os.platform()}/${os.arch()}, ${cpus.length} CPUs (${cpus[0]?.model.trim() ?? "?"})`);
  console.log(`  hub       in-process on ${url}, synchronous=${sync.toUpperCase()}; load on a worker thread`);
  console.log(`  per call  hub ms = the hub thread's busy time (its event loop's active time) / calls\n`);

  const worker = new Worker(new URL("../common/ts-worker.mjs", import.meta.url), {
    workerData: { entry: new URL("./worker.ts", import.meta.url).href, baseUrl: url },
  });
  const pending: ((m: WorkerMessage) => void)[] = [];
  worker.on("message", (m: WorkerMessage) => {
    if (m.kind === "result" || m.kind === "done") pending.shift()?.(m);
  });
  worker.on("error", (e) => {
    throw e;
  });
  const ask = (s: Scenario | { done: true }) =>
    new Promise<WorkerMessage>((resolve) => {
      pending.push(resolve);
      worker.postMessage(s);
    });

  const rows: (ScenarioResult & { hubMsPerCall: number })[] = [];
  for (const op of ops) {
    for (const conc of concs) {
      for (const face of ["rest", "mcp"] as const) {
        const scenario: Scenario = { face, op, conc, seconds: num("seconds", 0.1), warmupSeconds: num("warmup", 0) };
        let begun: EventLoopUtilization | undefined;
        let hubMs = Number.NaN;
        const onMark = (m: WorkerMessage) => {
          if (m.kind === "begin") begun = performance.eventLoopUtilization();
          if (m.kind === "end" && begun) hubMs = performance.eventLoopUtilization(begun).active;
        };
        worker.on("message", onMark);
        const m = await ask(scenario);
        worker.off("message", onMark);
        if (m.kind !== "result" || !begun) throw new Error(`worker: ${JSON.stringify(m)}`);
        rows.push({ ...m.result, hubMsPerCall: hubMs / Math.max(1, m.result.calls) });
        const r = rows.at(-1)!;
        console.log(
          `  ${op.padEnd(5)} conc ${String(conc).padStart(2)}  ${face.padEnd(4)}  ${Math.round(r.callsPerSec).toString().padStart(6)} calls/s` +
            `  p50 ${r.p50.toFixed(2)}  p99 ${r.p99.toFixed(2)} ms  hub ${r.hubMsPerCall.toFixed(3)} ms/call  (${r.calls} calls, ${r.errors} errors)`,
        );
      }
      const [rest, mcp] = rows.slice(-2) as [(typeof rows)[0], (typeof rows)[0]];
      console.log(
        `  ${op.padEnd(5)} conc ${String(conc).padStart(2)}  mcp/rest: throughput ${(mcp.callsPerSec / rest.callsPerSec).toFixed(2)}x, ` +
          `p50 ${(mcp.p50 / rest.p50).toFixed(2)}x, hub time per call ${(mcp.hubMsPerCall / rest.hubMsPerCall).toFixed(2)}x\n`,
      );
    }
  }
  // A "cycle" is two calls (acquire, release): the rows count calls, not cycles.
  await ask({ done: true });
  await worker.terminate();
  await cleanup?.();
}

runBench(main, () => cleanup);
