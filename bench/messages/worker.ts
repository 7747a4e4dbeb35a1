/**
 * The load generator's entry: in a process of its own (`--client process`, the default: forked
 * with tsx, IPC over process.send, its options in the first message) or in a worker thread
 * (`--client thread`, through bench/common/ts-worker.mjs, its options in workerData). Either way
 * it posts each mark as `{ mark }`, then `{ ok: true, result }` or `{ ok: false, error }`.
 */
import { parentPort, workerData } from "node:worker_threads";
import { runLoad, type LoadOptions } from "./load.js";

const post: (m: unknown) => void = parentPort ? (m) => parentPort!.postMessage(m) : (m) => process.send!(m as object);

function run(options: LoadOptions): void {
  runLoad(options, (phase, label) => post({ mark: { phase, label } })).then(
    (result) => post({ ok: true, result }),
    (e: unknown) => post({ ok: false, error: e instanceof Error ? e.stack : String(e) }),
  );
}

if (parentPort) run(workerData.options as LoadOptions);
else process.once("message", (m: { options: LoadOptions }) => run(m.options));
