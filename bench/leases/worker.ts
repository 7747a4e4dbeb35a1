/** Load generator in a worker thread (`--client thread`): its own event loop, same process. */
import { parentPort } from "node:worker_threads";
import { runRpcScenario, type RpcScenario } from "./load.js";

parentPort!.on("message", async (s: RpcScenario) => {
  try {
    const r = await runRpcScenario(s);
    parentPort!.postMessage({ ok: true, result: r }, [r.lat.buffer as ArrayBuffer]);
  } catch (e) {
    parentPort!.postMessage({ ok: false, error: e instanceof Error ? e.stack : String(e) });
  }
});
