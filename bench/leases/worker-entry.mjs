// Worker threads do not get tsx's loader hooks on Node 20; register them here, then load the TS worker.
import { register } from "tsx/esm/api";

register();
await import("./worker.ts");
