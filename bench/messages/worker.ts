/** Load generator in a worker thread (`--client thread`): its own event loop, same process. */
import { parentPort, workerData } from "node:worker_threads";
import { runLoad, type LoadOptions } from "./load.js";

runLoad(workerData.options as LoadOptions, (phase, label) => parentPort!.postMessage({ mark: { phase, label } })).then(
  (result) => parentPort!.postMessage({ ok: true, result }),
  (e: unknown) => parentPort!.postMessage({ ok: false, error: e instanceof Error ? e.stack : String(e) }),
);
