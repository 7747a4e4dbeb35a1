/**
 * What one project's lease cycles on PostgreSQL would do with its batches' locks taken in another
 * order, with no hub: stand-in hubs (lock-order-worker.mjs, one process each) whose clients cycle
 * acquire + release on names of their own, each process batching its decisions as the store's
 * group commit does, one hub against three sharing the clients. Three designs of a batch:
 *
 *   heads     as the store runs it (D55): BEGIN with the project's head row locked, then the
 *             works taken, their rows read, the writes with the numbered changes and COMMIT:
 *             three round trips while the head is held. The next batch's BEGIN and lock go out
 *             while the batch before commits, once works wait for it (D84).
 *   late      the rows locked first (in name order), the head locked by the last write, which goes
 *             with the COMMIT: the head held only for that statement and the commit's flush.
 *   sequence  as late, with the changes numbered by a sequence instead of the head: nothing
 *             serialises the project's commits (the bound for any numbering).
 *
 * `--spin-us` spends that much CPU on each decision before it is queued, standing in for a hub's
 * request path (0: PostgreSQL's side alone). A fresh database per design and count of hubs, on a
 * throwaway cluster with fsync on (test/fixtures/postgres.ts). Prints figures only.
 *
 * What it leaves out: a stand-in spends nothing per batch, and its clients have no other stage to
 * be in (no HTTP), so a batch holds every client of its hub whatever the design. Real hubs spend
 * about as much on a batch's statements as PostgreSQL does, and their batches are as large as the
 * wait before a batch takes its works makes them: built in the store, `late` made three hubs
 * 16-17% slower on two cores, where this bench had it 15% faster (bench/steps.md, twenty-fifth
 * step).
 *
 *   npm run bench:lock-order -- [--seconds 6] [--rounds 2] [--spin-us 0,150] [--designs heads,late,sequence]
 */
import { spawn } from "node:child_process";
import { parseArgs } from "node:util";
import pg from "pg";
import { startPostgres, type TestPostgres } from "../../test/fixtures/postgres.js";
import { flagReaders, runBench } from "../common/flags.js";

const usage = `usage: npm run bench:lock-order -- [options]
  --seconds N      measured seconds per run, after 1 s unmeasured (default 6)
  --rounds N       runs of each design and hub count, alternated (default 2)
  --clients N      lease clients, spread over the hubs (default 32)
  --spin-us LIST   CPU per decision in each stand-in hub, in us (default 0,150)
  --designs LIST   heads,late,sequence (default all)
  -h, --help`;

const { values: flags } = parseArgs({
  options: {
    seconds: { type: "string", default: "6" },
    rounds: { type: "string", default: "2" },
    clients: { type: "string", default: "32" },
    "spin-us": { type: "string", default: "0,150" },
    designs: { type: "string", default: "heads,late,sequence" },
    help: { type: "boolean", short: "h" },
  },
});
const { num, int, fail } = flagReaders(flags, usage);
const seconds = num("seconds", 1);
const rounds = int("rounds", 1);
const clients = int("clients", 3);
const spins = flags["spin-us"].split(",").map((s) => Number(s));
if (spins.some((s) => !Number.isFinite(s) || s < 0)) fail("--spin-us takes numbers >= 0");
const designs = flags.designs.split(",").map((d) => d.trim());
for (const d of designs) if (!["heads", "late", "sequence"].includes(d)) fail(`unknown design ${d}`);

let cluster: TestPostgres | undefined;

async function freshDatabase(): Promise<string> {
  const url = await cluster!.createDatabase();
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`CREATE TABLE heads (project text PRIMARY KEY, head bigint NOT NULL);
      INSERT INTO heads VALUES ('p', 0);
      CREATE TABLE leases (name text PRIMARY KEY, holder text, token bigint NOT NULL);
      INSERT INTO leases SELECT 'l' || i, NULL, 0 FROM generate_series(0, ${clients - 1}) i;
      CREATE TABLE changes (project text, seq bigint, body text NOT NULL, PRIMARY KEY (project, seq));
      CREATE SEQUENCE change_numbers;`);
  } finally {
    await c.end();
  }
  return url;
}

interface WorkerReport {
  cycles: number;
  batches: number;
  decisions: number;
}

async function run(design: string, hubs: number, spinUs: number): Promise<{ perSecond: number; perBatch: number }> {
  const url = await freshDatabase();
  const shares = Array.from({ length: hubs }, (_, i) => Math.floor(clients / hubs) + (i < clients % hubs ? 1 : 0));
  let base = 0;
  const reports = await Promise.all(
    shares.map((n, i) => {
      const env = { ...process.env, URL: url, DESIGN: design, CLIENTS: String(n), BASE: String(base), SECONDS: String(seconds), ID: String(i), SPIN_US: String(spinUs) };
      base += n;
      return new Promise<WorkerReport>((resolve, reject) => {
        const child = spawn(process.execPath, [new URL("./lock-order-worker.mjs", import.meta.url).pathname], { env, stdio: ["ignore", "pipe", "inherit"] });
        let out = "";
        child.stdout.on("data", (b: Buffer) => (out += b));
        child.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out) as WorkerReport) : reject(new Error(`a stand-in hub exited with ${code}`))));
      });
    }),
  );
  const sum = (k: keyof WorkerReport) => reports.reduce((a, r) => a + r[k], 0);
  return { perSecond: sum("cycles") / seconds, perBatch: sum("decisions") / sum("batches") };
}

runBench(
  async () => {
    cluster = await startPostgres({ fsync: true });
    console.log(`kxm-hub lock-order bench: node ${process.version}; ${clients} clients, ${seconds} s a run, ${rounds} round(s)`);
    console.log("spin us  design     one hub (cycles/s, decisions a batch)  three hubs             three / one");
    for (const spinUs of spins) {
      for (let r = 0; r < rounds; r++) {
        for (const design of designs) {
          const one = await run(design, 1, spinUs);
          const three = await run(design, 3, spinUs);
          console.log(
            `${String(spinUs).padStart(7)}  ${design.padEnd(9)}  ${one.perSecond.toFixed(0).padStart(7)} (${one.perBatch.toFixed(1)})${" ".repeat(22)}${three.perSecond.toFixed(0).padStart(7)} (${three.perBatch.toFixed(1)})       ${(three.perSecond / one.perSecond).toFixed(2)}x`,
          );
        }
      }
    }
    await cluster.stop();
    cluster = undefined;
  },
  () => cluster && (() => cluster!.stop()),
);
