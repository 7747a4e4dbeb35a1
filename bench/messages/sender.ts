/**
 * bench:messages' sending thread (through bench/common/ts-worker.mjs): each message it gets is a
 * SendSpec, answered with that scenario's SendReport once every send is answered. The sends'
 * garbage (their HTTP/2 streams among it) is then collected on this thread's heap, not on the
 * one that takes the frames' arrival times.
 */
import { parentPort } from "node:worker_threads";
import { sendScenario, type SendSpec } from "./sends.js";

const port = parentPort!;
port.on("message", (spec: SendSpec) => {
  sendScenario(spec).then(
    (report) => port.postMessage({ ok: true, report }),
    (e: unknown) => port.postMessage({ ok: false, error: e instanceof Error ? e.stack : String(e) }),
  );
});
