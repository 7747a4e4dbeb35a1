/**
 * The sync bench's load generator in a worker thread (`--client thread`, the default), started
 * through bench/common/ts-worker.mjs. workerData carries the encoded requests (transferred once);
 * each scenario is a message:
 *   main -> worker  { type: "run", scenario }     push the warm-up batches, then:
 *   worker -> main  { type: "warm" }              main snapshots the hub thread's counters and answers
 *   main -> worker  { type: "go" }                push the measured batches, then:
 *   worker -> main  { type: "done", result } | { type: "error", error }
 */
import { parentPort, workerData } from "node:worker_threads";
import { runLoad, unpackWire, type LoadScenario, type PackedWire } from "./load.js";

const data = workerData as { wire: PackedWire; warm: PackedWire };
const wire = unpackWire(data.wire);
const warm = unpackWire(data.warm);
const port = parentPort!;

let go: (() => void) | undefined;
port.on("message", (m: { type: "run"; scenario: LoadScenario } | { type: "go" }) => {
  if (m.type === "go") {
    go?.();
    go = undefined;
    return;
  }
  runLoad(m.scenario, warm, wire, () => {
    const ready = new Promise<void>((resolve) => (go = resolve));
    port.postMessage({ type: "warm" });
    return ready;
  }).then(
    (result) => port.postMessage({ type: "done", result }, [result.lat.buffer as ArrayBuffer]),
    (e: unknown) => port.postMessage({ type: "error", error: e instanceof Error ? e.stack : String(e) }),
  );
});
