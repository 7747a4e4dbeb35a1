// How fast this machine's cores are right now, and whether they are taken away: a loop that reads
// the monotonic clock, on one thread and then on one thread per core at once. Prints each run's
// loop rate (millions of clock reads a second: comparable between hours of the same machine, not
// between machines) and the share of its time the loop lost in gaps over 50 us (time its core
// ran something else, or its virtual CPU was not running at all). A rate that falls when every
// core is busy while few gaps appear is cores that share a physical core (hyperthreads) or a
// clock that drops under load; many gaps with no other process running is a host taking the
// virtual CPUs away. Takes about `--seconds` x 2; no assertions.
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

const cores = os.availableParallelism();
for (const threads of [1, cores]) {
  const results = await run(threads);
  const each = results.map((r) => `${r.rate.toFixed(1)}M/s, ${(100 * r.lost).toFixed(1)}% lost in ${r.gaps} gaps (max ${r.max.toFixed(2)} ms)`);
  console.log(`${threads} busy thread(s) of ${cores} cores: ${each.join("; ")}`);
}
