// Worker threads do not get tsx's loader hooks on Node 20: register them, then load the TS
// module named by workerData.entry (a file URL). The module reads the rest of workerData itself.
import { workerData } from "node:worker_threads";
import { register } from "tsx/esm/api";

register();
await import(workerData.entry);
