// Compares two checkouts under ../shared/bench/lease-compare.mjs, hub only, on this machine whose
// speed moves by half within an hour: runs the hub of each (as `npm start` runs it, from its
// dist/) alternately, pair by pair, and prints each run's cycles/s and server CPU per cycle, each
// side's median, and the median of b / a pair by pair. Both checkouts need node_modules and a
// built dist/ (`node scripts/build.mjs`). bench/steps.md, fourteenth step.
//
//   node bench/leases/alternate-compare.mjs --a <checkout> [--b <checkout>] [--pairs 3] [--workload uncontended|contended] [--seconds 8]
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const { values } = parseArgs({
  options: {
    a: { type: "string" },
    b: { type: "string", default: here },
    pairs: { type: "string", default: "3" },
    workload: { type: "string", default: "uncontended" },
    seconds: { type: "string", default: "8" },
  },
});
if (!values.a || !["uncontended", "contended"].includes(values.workload)) {
  console.error("usage: node bench/leases/alternate-compare.mjs --a <checkout> [--b <checkout>] [--pairs N] [--workload uncontended|contended] [--seconds S]");
  process.exit(2);
}
const compare = path.resolve(here, "../shared/bench/lease-compare.mjs");
const sides = [
  { name: "a", dir: path.resolve(values.a), runs: [] },
  { name: "b", dir: path.resolve(values.b), runs: [] },
];
for (const side of sides) {
  if (!fs.existsSync(path.join(side.dir, "dist", "kxm-hub.mjs"))) {
    console.error(`${side.name} (${side.dir}) has no dist/kxm-hub.mjs: run node scripts/build.mjs there first`);
    process.exit(2);
  }
}

/** One hub-only run of lease-compare in `dir`: its cycles/s and server CPU ms per cycle. */
function run(dir) {
  const args = ["--targets", "hub", "--workloads", values.workload, "--rounds", "1", "--seconds", values.seconds];
  const r = spawnSync("bash", [path.join(here, "scripts/node.sh"), "24", "--", "node", compare, ...args], {
    cwd: here,
    encoding: "utf8",
    env: { ...process.env, HUB_DIR: dir, HUB_START: "exec node bin/kxm-hub.mjs serve" },
  });
  // The per-round line is lease-compare's progress, on stderr.
  const line = `${r.stderr}\n${r.stdout}`.split("\n").find((l) => l.startsWith(`[${values.workload} 1/1] hub`));
  const m = line && /([\d.]+) cycles\/s.*srv ([\d.]+) ms\/cycle/.exec(line);
  if (r.status !== 0 || !m) {
    console.error(`lease-compare failed in ${dir}:\n${r.stdout}\n${r.stderr}`);
    process.exit(1);
  }
  return { cycles: Number(m[1]), srvMs: Number(m[2]) };
}

const ratios = { cycles: [], srvMs: [] };
for (let pair = 0; pair < Number(values.pairs); pair++) {
  // Every other pair starts with b, so that neither side always runs second.
  const order = pair % 2 === 0 ? sides : [...sides].reverse();
  const got = new Map();
  for (const side of order) {
    const r = run(side.dir);
    side.runs.push(r);
    got.set(side, r);
    console.log(`${side.name}: ${r.cycles.toFixed(0)} cycles/s, server CPU ${r.srvMs.toFixed(3)} ms/cycle`);
  }
  for (const k of ["cycles", "srvMs"]) ratios[k].push(got.get(sides[1])[k] / got.get(sides[0])[k]);
}
const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
for (const side of sides) {
  const c = side.runs.map((r) => r.cycles);
  const s = side.runs.map((r) => r.srvMs);
  console.log(`${side.name} ${side.dir}: median ${median(c).toFixed(0)} cycles/s, ${median(s).toFixed(3)} ms/cycle of server CPU (${c.length} runs)`);
}
console.log(
  `b / a, pair by pair: cycles/s median ${median(ratios.cycles).toFixed(3)} (${ratios.cycles.map((r) => r.toFixed(2)).join(" ")}), ` +
    `server CPU per cycle median ${median(ratios.srvMs).toFixed(3)} (${ratios.srvMs.map((r) => r.toFixed(2)).join(" ")})`,
);
