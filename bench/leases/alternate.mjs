// Compares the lease path's CPU of two checkouts on this machine, whose speed moves by a third
// from hour to hour: runs `bench/leases/path.ts` in each, alternately, and prints every figure
// and each side's median and minimum (hub-thread CPU per cycle), and the median of b / a run by
// run, the two in alternating order. Both checkouts need
// bench/leases/path.ts and node_modules; the figures of one invocation compare, those of two
// do not. bench/steps.md.
//
//   node bench/leases/alternate.mjs --a <checkout> --b <checkout> [--runs 4] [-- --conc 32 --cycles 3000 --rounds 2]
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const { values, positionals } = parseArgs({
  options: { a: { type: "string" }, b: { type: "string", default: here }, runs: { type: "string", default: "4" } },
  allowPositionals: true,
});
if (!values.a) {
  console.error("usage: node bench/leases/alternate.mjs --a <checkout> [--b <checkout, default this one>] [--runs N] [-- path.ts options]");
  process.exit(2);
}
const pathArgs = positionals.length > 0 ? positionals : ["--conc", "32", "--cycles", "3000", "--rounds", "2"];
const sides = [
  { name: "a", dir: path.resolve(values.a), us: [] },
  { name: "b", dir: path.resolve(values.b), us: [] },
];

/** Each run's mean per side, paired: the ratio of two neighbours cancels the machine's drift. */
const ratios = [];
for (let run = 0; run < Number(values.runs); run++) {
  // Every other run starts with b: whichever runs second in a pair ran 3-4% faster, same build or
  // not (bench/steps.md "the order of a pair"), so a fixed order made it look like a gain.
  const order = run % 2 === 0 ? sides : [...sides].reverse();
  const means = new Map();
  for (const side of order) {
    const r = spawnSync("bash", [path.join(here, "scripts/node.sh"), "24", "--", "node", "--import", "tsx", "bench/leases/path.ts", ...pathArgs], {
      cwd: side.dir,
      encoding: "utf8",
    });
    const line = r.stdout.split("\n").find((l) => l.includes("hub thread CPU per cycle"));
    if (r.status !== 0 || !line) {
      console.error(`${side.name} (${side.dir}) failed:\n${r.stdout}\n${r.stderr}`);
      process.exit(1);
    }
    const figures = [...line.matchAll(/(\d+) us \(/g)].map((m) => Number(m[1]));
    side.us.push(...figures);
    means.set(side, figures.reduce((x, y) => x + y, 0) / figures.length);
    console.log(`${side.name}: ${figures.join(", ")} us per cycle`);
  }
  ratios.push(means.get(sides[1]) / means.get(sides[0]));
}
const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
for (const side of sides) {
  console.log(`${side.name} ${side.dir}: median ${median(side.us)} us, min ${Math.min(...side.us)} us per cycle (${side.us.length} figures)`);
}
const sorted = [...ratios].sort((x, y) => x - y);
console.log(
  `b / a, run by run: median ${median(ratios).toFixed(3)} (${sorted.map((r) => r.toFixed(2)).join(" ")}); the same build on both sides gives 1 +- a few hundredths`,
);
