/**
 * What a commit writes: the WAL frames of each commit of a hub under load, counted by the B-tree
 * (table or index) each page belongs to. A commit's cost on SQLite is mostly its frames (two
 * `pwrite` calls each, and the checkpoint copies each page again), so this is what tells a
 * schema change that writes fewer pages from one that only looks like it should.
 *
 * A hub in this process as the build bundles it (common/built-hub.ts), its store opened here with
 * the WAL's restart put off (so that every commit of the run stays in the file), at FULL, and a
 * load on a worker thread: `leases` is bench:path's (REST acquire + release, each loop on
 * its own name), `messages` sends REST messages around a ring of agents. Once the load is done the
 * WAL's frames are read from the `-wal` file, and their pages are named with SQLite's `dbstat`
 * table. Prints figures only.
 *
 *   node --import tsx bench/common/wal-frames.ts [--load leases|messages] [--count 20000] [--conc 32] [--commits 300]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import Database from "better-sqlite3";
import { systemClock } from "../../src/clock.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { createHub } from "./built-hub.js";
import { benchHubConfig } from "./hub-config.js";

const { values } = parseArgs({
  options: {
    load: { type: "string", default: "leases" },
    count: { type: "string", default: "20000" },
    conc: { type: "string", default: "32" },
    commits: { type: "string", default: "300" },
  },
});
const load = values.load!;
if (load !== "leases" && load !== "messages") throw new Error(`--load takes leases or messages, not ${load}`);
const [count, conc, lastCommits] = [Number(values.count), Number(values.conc), Number(values.commits)];
const token = "A";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-bench-wal-"));
const file = path.join(dir, "kxm.db");
const store = new SqliteStore({ path: file, synchronous: "full", restartFrames: Number.MAX_SAFE_INTEGER });
const hub = await createHub(benchHubConfig(dir, "full", { authToken: token, logPath: path.join(dir, "hub.log.jsonl") }), { clock: systemClock, store });
let frames: { pgno: number; commit: boolean }[] = [];
try {
  const { url } = await hub.listen();
  const agents: { id: string; key: string }[] = [];
  for (let i = 0; i < Math.max(conc, 2); i++) {
    const r = await fetch(`${url}/v1/agents/register`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ name: `wal-${i}`, project: "bench" }),
    });
    const j = (await r.json()) as { agent: { id: string }; agentKey: string };
    agents.push({ id: j.agent.id, key: j.agentKey });
  }
  const client = load === "leases" ? "../leases/path-client.mjs" : "./wal-frames-messages.mjs";
  const done = await new Promise<{ cycles: number; errors: number }>((resolve, reject) => {
    const w = new Worker(new URL(client, import.meta.url), { workerData: { port: Number(new URL(url).port), agents, cycles: count, conc, token } });
    w.once("error", reject);
    w.once("message", (m: { cycles: number; errors: number }) => {
      void w.terminate();
      resolve(m);
    });
  });
  // The WAL's frames (those whose salt is the header's: the file never restarted).
  const wal = fs.readFileSync(`${file}-wal`);
  const pageSize = wal.readUInt32BE(8);
  const salt = wal.readUInt32BE(16);
  for (let at = 32; at + 24 + pageSize <= wal.length && wal.readUInt32BE(at + 8) === salt; at += 24 + pageSize) {
    frames.push({ pgno: wal.readUInt32BE(at), commit: wal.readUInt32BE(at + 4) !== 0 });
  }
  console.log(`kxm-hub WAL frames: node ${process.version}; ${load}, ${done.cycles} ${load === "leases" ? "cycles" : "sends"} over ${conc} loops (${done.errors} errors)`);
} finally {
  await hub.close();
}
const db = new Database(file, { readonly: true });
const owner = new Map<number, string>();
for (const r of db.prepare("SELECT name, pageno, pagetype FROM dbstat").all() as { name: string; pageno: number; pagetype: string }[]) {
  owner.set(r.pageno, `${r.name} (${r.pagetype})`);
}
db.close();
const commits: number[][] = [];
let open: number[] = [];
for (const f of frames) {
  open.push(f.pgno);
  if (f.commit) {
    commits.push(open);
    open = [];
  }
}
frames = [];
const last = commits.slice(-lastCommits);
const per = new Map<string, number>();
let total = 0;
for (const c of last) {
  for (const pgno of c) {
    const k = owner.get(pgno) ?? "(a page freed since)";
    per.set(k, (per.get(k) ?? 0) + 1);
    total++;
  }
}
console.log(`  the last ${last.length} of ${commits.length} commits: ${(total / last.length).toFixed(2)} frames a commit`);
for (const [k, v] of [...per].sort((a, b) => b[1] - a[1])) console.log(`  ${(v / last.length).toFixed(2)}  ${k}`);
fs.rmSync(dir, { recursive: true, force: true });
