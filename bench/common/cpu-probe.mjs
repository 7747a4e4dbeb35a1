// How fast this machine's cores are right now, and whether they are taken away: a loop that reads
// the monotonic clock, on one thread and then on one thread per core at once. Prints each run's
// loop rate (millions of clock reads a second: comparable between hours of the same machine, not
// between machines) and the share of its time the loop lost in gaps over 50 us (time its core
// ran something else, or its virtual CPU was not running at all). A rate that falls when every
// core is busy while few gaps appear is cores that share a physical core (hyperthreads) or a
// clock that drops under load; many gaps with no other process running is a host taking the
// virtual CPUs away. Then the time of one load from memory that is not in a cache nearer the
// core: a chase of random pointers, one per 64-byte line, through 256 KiB (the core's L2), 4 MiB
// (the L3 this virtual machine is shown) and 64 MiB (main memory). A clock loop at its usual rate
// with loads slower than usual is a host whose caches and memory other tenants are using: code
// with a large working set (a JIT's code and heap) slows down, a tight loop does not. Takes about
// `--seconds` x 2 and a few seconds more; no assertions.
//
//   node bench/common/cpu-probe.mjs [--seconds 3]
import os from "node:os";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";

const { values } = parseArgs({ options: { seconds: { type: "string", default: "3" } } });
const seconds = Number(values.seconds);
if (!(seconds > 0 && seconds <= 60)) {
  console.error("--seconds must be more than 0 and at most 60");
  process.exit(2);
}

const loop = `
const { parentPort, workerData } = require("node:worker_threads");
const end = performance.now() + workerData * 1000;
let last = performance.now(), reads = 0, lost = 0, gaps = 0, max = 0;
while (last < end) {
  const t = performance.now();
  const d = t - last;
  if (d > 0.05) { gaps++; lost += d; if (d > max) max = d; }
  last = t;
  reads++;
}
parentPort.postMessage({ rate: reads / workerData / 1e6, lost: lost / (workerData * 1000), gaps, max });
`;

function run(threads) {
  return Promise.all(
    Array.from(
      { length: threads },
      () =>
        new Promise((resolve, reject) => {
          const w = new Worker(loop, { eval: true, workerData: seconds });
          w.once("message", resolve);
          w.once("error", reject);
        }),
    ),
  );
}

/**
 * Nanoseconds a load, chasing a random cycle of pointers through `bytes` (one per 64-byte line, so
 * neither the line nor the prefetcher helps): the latency of the nearest level that holds them.
 */
function loadNs(bytes, loads = 4_000_000) {
  const lines = bytes >> 6;
  const words = new Uint32Array(bytes >> 2);
  const order = Uint32Array.from({ length: lines }, (_, i) => i);
  // Sattolo's shuffle: one cycle through every line.
  for (let i = lines - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * i);
    [order[i], order[j]] = [order[j], order[i]];
  }
  for (let i = 0; i < lines; i++) words[order[i] << 4] = order[(i + 1) % lines] << 4;
  let at = 0;
  for (let i = 0; i < loads; i++) at = words[at]; // warm: the lines and the pages' mappings
  const start = process.hrtime.bigint();
  for (let i = 0; i < loads; i++) at = words[at];
  const ns = Number(process.hrtime.bigint() - start) / loads;
  return at >= 0 ? ns : Number.NaN; // `at` used, so the chase is not optimised away
}

const cores = os.availableParallelism();
for (const threads of [1, cores]) {
  const results = await run(threads);
  const each = results.map((r) => `${r.rate.toFixed(1)}M/s, ${(100 * r.lost).toFixed(1)}% lost in ${r.gaps} gaps (max ${r.max.toFixed(2)} ms)`);
  console.log(`${threads} busy thread(s) of ${cores} cores: ${each.join("; ")}`);
}
const levels = [
  ["256 KiB", 256 << 10],
  ["4 MiB", 4 << 20],
  ["64 MiB", 64 << 20],
];
console.log(`a load from ${levels.map(([name, bytes]) => `${name}: ${loadNs(bytes).toFixed(1)} ns`).join(", ")}`);
