// Compares the lease path's CPU of two checkouts on this machine, whose speed moves by a third
// from hour to hour: runs `bench/leases/path.ts` in each, alternately, and prints every figure
// and each side's median and minimum (hub-thread CPU per cycle). Both checkouts need
// bench/leases/path.ts and node_modules; the figures of one invocation compare, those of two
// do not. bench/README.md "Against etcd as etcd is used".
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

for (let run = 0; run < Number(values.runs); run++) {
  for (const side of sides) {
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
    console.log(`${side.name}: ${figures.join(", ")} us per cycle`);
  }
}
const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
for (const side of sides) {
  console.log(`${side.name} ${side.dir}: median ${median(side.us)} us, min ${Math.min(...side.us)} us per cycle (${side.us.length} figures)`);
}
