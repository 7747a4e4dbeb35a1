// The prepare pool's worker thread starts here (prepare-pool.ts): on Node 20 a worker thread does
// not inherit tsx's loader, so this registers it, then loads the worker module from its source.
import { register } from "tsx/esm/api";

register();
await import("./prepare-worker.ts");
