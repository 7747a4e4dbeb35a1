// The prepare pool's worker thread starts here (prepare-pool.ts) when the hub runs from its
// sources (the tests): it registers tsx's loader in the thread, then loads the worker module from
// its source. The build starts dist/prepare-worker.mjs instead.
import { register } from "tsx/esm/api";

register();
await import("./prepare-worker.ts");
