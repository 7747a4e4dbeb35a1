/**
 * The prepare pool's worker thread (prepare-pool.ts): answers each batch of events with
 * `prepareEvent` of each, or with the error one of them threw (the pool then prepares that batch
 * on the hub's thread, which throws the same).
 */
import { parentPort } from "node:worker_threads";
import { prepareEvent } from "./prepare.js";

export interface PrepareRequest {
  id: number;
  events: unknown[];
}
export type PrepareReply = { id: number; prepared: ReturnType<typeof prepareEvent>[] } | { id: number; error: string };

const port = parentPort!;
port.on("message", ({ id, events }: PrepareRequest) => {
  let reply: PrepareReply;
  try {
    reply = { id, prepared: events.map(prepareEvent) };
  } catch (e) {
    reply = { id, error: String(e) };
  }
  port.postMessage(reply);
});
port.postMessage("ready");
