/**
 * Load generator in a process of its own (`--client process`, the default): its own event loop,
 * heap, garbage collector and V8 worker threads, so that none of them is shared with the hub's.
 * Takes its options from the first IPC message; sends marks and the result back the same way.
 */
import { runLoad, type LoadOptions } from "./load.js";

process.once("message", (m: { options: LoadOptions }) => {
  runLoad(m.options, (phase, label) => process.send!({ mark: { phase, label } })).then(
    (result) => process.send!({ ok: true, result }, () => process.disconnect()),
    (e: unknown) => process.send!({ ok: false, error: e instanceof Error ? e.stack : String(e) }, () => process.disconnect()),
  );
});
