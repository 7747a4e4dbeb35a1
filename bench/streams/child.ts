/**
 * Entry of bench/streams' load generator: in a child process (`--client process`, the default:
 * fork with tsx, IPC over process.send) or in a worker thread (`--client thread`, through
 * bench/common/ts-worker.mjs). Either way it gets `{ type: "start", options }`, then asks the
 * hub side for memory samples, and finally posts `{ type: "done", result }` or `{ type: "error" }`.
 */
import v8 from "node:v8";
import vm from "node:vm";
import { parentPort, workerData } from "node:worker_threads";
import { runStreams, type Ctl, type MemSample, type StreamsOptions } from "./load.js";

type ToHub =
  | { type: "mark"; phase: "begin" | "end"; label: string }
  | { type: "sample"; id: number; label: string }
  | { type: "progress"; line: string }
  | { type: "done"; result: unknown }
  | { type: "error"; error: string };
type FromHub = { type: "start"; options: StreamsOptions } | { type: "sampled"; id: number; sample: MemSample };

const post: (m: ToHub) => void = parentPort ? (m) => parentPort!.postMessage(m) : (m) => process.send!(m);
const listen = (f: (m: FromHub) => void) => (parentPort ? parentPort.on("message", f) : process.on("message", f));

// Force GCs before the load side's own memory samples, so they are not garbage (in a worker
// thread this collects the worker's isolate only).
v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;

let nextId = 0;
const waiting = new Map<number, (s: MemSample) => void>();
const ctl: Ctl = {
  mark: (phase, label) => post({ type: "mark", phase, label }),
  sample: (label) =>
    new Promise<MemSample>((resolve) => {
      const id = ++nextId;
      waiting.set(id, resolve);
      post({ type: "sample", id, label });
    }),
  progress: (line) => post({ type: "progress", line }),
};

let started = false;
const start = (options: StreamsOptions) => {
  if (started) return;
  started = true;
  runStreams(options, ctl, gc).then(
    (result) => post({ type: "done", result }),
    (e: unknown) => post({ type: "error", error: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
  );
};
listen((m) => {
  if (m.type === "start") start(m.options);
  else if (m.type === "sampled") {
    waiting.get(m.id)?.(m.sample);
    waiting.delete(m.id);
  }
});
if (parentPort && workerData?.options) start(workerData.options as StreamsOptions);
