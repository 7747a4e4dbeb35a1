// What a WAL-like sync pattern costs on this machine's disk, with no hub: a write of `--bytes`
// (default 44 KiB, about a send's frames) at `--rate` writes a second into a preallocated file,
// each made durable by `fdatasync` on libuv's thread pool, and the time from each write until a
// sync issued after it completed. `--mode serial`: one sync at a time, the writes made meanwhile
// covered by the next one (the hub's group commit); `--mode overlap`: a sync issued at once for
// the writes so far, up to four in flight. `--burn N` keeps N other processes spinning on the CPU
// meanwhile, as a loaded hub's two cores are; with `--burn-policy idle` they run as SCHED_IDLE
// (through util-linux's `chrt`), so that every other thread of the machine goes first: what is
// left of the delay then comes from outside the machine's own scheduler (on a virtual machine,
// likely the host's I/O path sharing the host's cores with busy vCPUs). Prints p50 / p99 / p99.9
// / max; no assertions.
//
//   node bench/common/wal-sync-probe.mjs [--mode serial|overlap] [--rate 700] [--seconds 6] [--burn 0]
//     [--burn-policy normal|idle] [--dir /tmp]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawn } from "node:child_process";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    mode: { type: "string", default: "serial" },
    rate: { type: "string", default: "700" },
    seconds: { type: "string", default: "6" },
    bytes: { type: "string", default: String(44 * 1024) },
    burn: { type: "string", default: "0" },
    "burn-policy": { type: "string", default: "normal" },
    dir: { type: "string", default: os.tmpdir() },
  },
});
const mode = values.mode;
if (mode !== "serial" && mode !== "overlap") {
  console.error("--mode must be serial or overlap");
  process.exit(2);
}
const rate = Number(values.rate);
const total = Math.round(rate * Number(values.seconds));
const policy = values["burn-policy"];
if (policy !== "normal" && policy !== "idle") {
  console.error("--burn-policy must be normal or idle");
  process.exit(2);
}
const burn = [process.execPath, "-e", "for (;;) {}"];
const burners = Array.from({ length: Number(values.burn) }, () => {
  const [command, ...args] = policy === "idle" ? ["chrt", "--idle", "0", ...burn] : burn;
  const child = spawn(command, args, { stdio: "ignore" });
  child.on("error", (e) => {
    console.error(`cannot start a CPU burner (${command}): ${e.message}`);
    process.exit(2);
  });
  return child;
});

const dir = fs.mkdtempSync(path.join(values.dir, "kxm-sync-probe-"));
const fd = fs.openSync(path.join(dir, "wal"), "w+");
const size = 16 << 20;
fs.writeSync(fd, Buffer.alloc(size));
fs.fsyncSync(fd);
const chunk = Buffer.alloc(Number(values.bytes), 7);
const mono = () => Number(process.hrtime.bigint()) / 1e6;

const latencies = [];
let waiting = [];
let inFlight = 0;
let offset = 0;
function sync() {
  const covered = waiting;
  waiting = [];
  inFlight++;
  fs.fdatasync(fd, () => {
    inFlight--;
    const t = mono();
    for (const t0 of covered) latencies.push(t - t0);
    if (mode === "serial" && waiting.length > 0) sync();
  });
}

const start = mono();
let k = 0;
await new Promise((done) => {
  const tick = () => {
    const due = Math.min(total, Math.floor(((mono() - start) * rate) / 1_000));
    for (; k < due; k++) {
      fs.writeSync(fd, chunk, 0, chunk.length, offset);
      offset = (offset + chunk.length) % (size - chunk.length);
      waiting.push(mono());
    }
    if (waiting.length > 0 && (mode === "overlap" ? inFlight < 4 : inFlight === 0)) sync();
    if (k < total || inFlight > 0 || waiting.length > 0) setImmediate(tick);
    else done();
  };
  tick();
});
for (const b of burners) b.kill();
fs.closeSync(fd);
fs.rmSync(dir, { recursive: true, force: true });

latencies.sort((a, b) => a - b);
const at = (q) => latencies[Math.min(latencies.length - 1, Math.ceil(q * latencies.length) - 1)].toFixed(2);
console.log(
  `${mode}, ${rate}/s of ${chunk.length} bytes, ${burners.length} CPU burner(s)${policy === "idle" && burners.length > 0 ? " (SCHED_IDLE)" : ""}: write -> durable ` +
    `p50 ${at(0.5)}  p99 ${at(0.99)}  p99.9 ${at(0.999)}  max ${latencies[latencies.length - 1].toFixed(2)} ms (n=${latencies.length})`,
);
