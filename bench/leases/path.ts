/**
 * The lease request path's CPU: the hub's own thread time per acquire + release cycle over REST,
 * the calls ../shared/bench/lease-compare.mjs makes, with the load on a worker thread
 * (path-client.mjs) so that the hub thread's time (process.threadCpuUsage) is the hub's alone.
 * A hub in this process as `npm start` runs it: the build's bundle (common/built-hub.ts), file
 * database with FULL durability, the log file on, an admin token. CPU time per cycle moves less than cycles per second on a shared
 * machine, so it is what compares two builds; run each a few times. Prints figures only.
 *
 *   npm run bench:path [-- --cycles 4000 --conc 1,32 --rounds 3]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { systemClock } from "../../src/clock.js";
import { createHub } from "../common/built-hub.js";
import { benchHubConfig } from "../common/hub-config.js";

const { values } = parseArgs({
  options: {
    cycles: { type: "string", default: "4000" },
    conc: { type: "string", default: "1,32" },
    rounds: { type: "string", default: "3" },
  },
});
const cycles = Number(values.cycles);
const concs = values.conc!.split(",").map(Number);
const rounds = Number(values.rounds);
const token = "A";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-bench-path-"));
const hub = await createHub(benchHubConfig(dir, "full", { authToken: token, logPath: path.join(dir, "hub.log.jsonl") }), { clock: systemClock });
try {
  const { url } = await hub.listen();
  const port = Number(new URL(url).port);
  const agents: { id: string; key: string }[] = [];
  for (let i = 0; i < Math.max(...concs); i++) {
    const r = await fetch(`${url}/v1/agents/register`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ name: `path-${i}`, project: "bench" }),
    });
    const j = (await r.json()) as { agent: { id: string }; agentKey: string };
    agents.push({ id: j.agent.id, key: j.agentKey });
  }
  console.log(`kxm-hub lease path: node ${process.version}, ${os.cpus().length} CPUs; REST acquire + release, ${cycles} cycles a run`);
  const run = (conc: number, n = cycles) =>
    new Promise<{ cycles: number; errors: number; ms: number; hubUs: number; sysUs: number }>((resolve, reject) => {
      const t0 = process.threadCpuUsage();
      const w = new Worker(new URL("./path-client.mjs", import.meta.url), { workerData: { port, agents, cycles: n, conc, token } });
      w.once("error", reject);
      w.once("message", (m: { cycles: number; errors: number; ms: number }) => {
        const t = process.threadCpuUsage(t0);
        resolve({ ...m, hubUs: t.user + t.system, sysUs: t.system });
        void w.terminate();
      });
    });
  // Warm-up (the JIT, the page cache) at the highest concurrency, so that a profile of the run
  // (--cpu-prof) is mostly of the load it measures.
  await run(Math.max(...concs), Math.ceil(cycles / 4));
  for (const conc of concs) {
    const rows: string[] = [];
    for (let r = 0; r < rounds; r++) {
      const s0 = { ...hub.store.commitStats() };
      const m = await run(conc);
      const s1 = hub.store.commitStats();
      const batches = s1.commits - s0.commits;
      rows.push(
        `${(m.hubUs / m.cycles).toFixed(0)} us (${(m.sysUs / m.cycles).toFixed(0)} in the kernel; ${((m.cycles / m.ms) * 1000).toFixed(0)}/s${m.errors ? `, ${m.errors} errors` : ""}; ${((s1.works - s0.works) / batches).toFixed(1)} decisions a batch)`,
      );
    }
    console.log(`  conc ${String(conc).padStart(3)}: hub thread CPU per cycle ${rows.join(", ")}`);
  }
} finally {
  await hub.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
