import { expect } from "vitest";
import type { AgentCreds, TestHub } from "../fixtures/hub.js";
import { expectRestOk, type Json } from "../fixtures/rest.js";

// REST helpers for the PeerService tests (reference-hub.md §3).

export const MESSAGE_ID = /^msg_[0-9a-f]{32}$/;
export const DAY_MS = 86_400_000;

export const send = (t: TestHub, as: AgentCreds, json: unknown) => t.rest("/v1/messages", { headers: as.headers, json });
/** Ack without a body and without a content type (decision D41). */
export const ack = (t: TestHub, as: AgentCreds, id: string) =>
  t.rest(`/v1/messages/${id}/ack`, { method: "POST", headers: as.headers });
export const reply = (t: TestHub, as: AgentCreds, id: string, content: unknown) =>
  t.rest(`/v1/messages/${id}/reply`, { headers: as.headers, json: { content } });
export const cancel = (t: TestHub, as: AgentCreds, id: string) =>
  t.rest(`/v1/messages/${id}`, { method: "DELETE", headers: as.headers });
export const getMessage = (t: TestHub, as: AgentCreds, id: string) => t.rest(`/v1/messages/${id}`, { headers: as.headers });
export const list = (t: TestHub, as: AgentCreds, query = "") => t.rest(`/v1/messages${query}`, { headers: as.headers });

/** Sends and returns the new message (asserting 202, idempotent:false). */
export async function sent(t: TestHub, as: AgentCreds, json: Json): Promise<Json> {
  const body = await expectRestOk(await send(t, as, json), 202);
  expect(body.idempotent).toBe(false);
  return body.message as Json;
}

/** The message as its sender reads it now. */
export async function current(t: TestHub, as: AgentCreds, id: string): Promise<Json> {
  return (await expectRestOk(await getMessage(t, as, id))).message as Json;
}

/** alpha and beta in project p. */
export async function pair(t: TestHub) {
  const a = await t.register("alpha");
  const b = await t.register("beta");
  return { a, b };
}

/** Takes `agent` offline by unregistering it (its key is rotated away). */
export async function unregister(t: TestHub, agent: AgentCreds): Promise<void> {
  const res = await t.rest(`/v1/agents/${agent.id}`, { method: "DELETE", headers: agent.headers });
  expect(res.status).toBe(204);
}

export const count = (t: TestHub, name: Parameters<TestHub["counters"]["get"]>[0]) => t.counters.get(name) ?? 0;
export const logged = (t: TestHub, event: string) => t.events.filter((e) => e.event === event);
