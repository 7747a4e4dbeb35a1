import { decideSend, type decideAck, type resolveTarget, type SendInput, type Sender } from "../../src/peer/rules.js";
import { NOW } from "./support.js";

/**
 * Agents and messages for the peer-rule suites: Alice, Bob and Carol in one project, a message
 * from Alice to Bob, decided at the fixed instant NOW.
 */

/** The rows the rules decide on, as their own signatures name them. */
export type AgentRow = Parameters<typeof resolveTarget>[0][number];
export type MessageRow = NonNullable<Parameters<typeof decideAck>[0]>;
export type MessageStatus = MessageRow["status"];
export type SendContext = Parameters<typeof decideSend>[0];

export const PROJECT = "proj";
export const agent = (id: string, name: string, online = true, project = PROJECT): AgentRow => ({
  id,
  project,
  name,
  purpose: "testing",
  keyHash: "0".repeat(64),
  connectedAtMs: NOW - 60_000,
  lastSeenAtMs: NOW - 1_000,
  online,
});
export const alice = agent("agt_alice", "Alice");
export const bob = agent("agt_bob", "Bob");
export const carol = agent("agt_carol", "Carol");
export const sender: Sender = { agentId: alice.id, agentName: alice.name, project: PROJECT };

export const input = (over: Partial<SendInput> = {}): SendInput => ({
  target: bob.id,
  content: "hello",
  delivery: "followUp",
  hops: 0,
  maxHops: 5,
  ttlMs: 60_000,
  allowOffline: false,
  ...over,
});

/** A message from Alice to Bob, created a second ago. */
export const message = (over: Partial<MessageRow> = {}): MessageRow => ({
  id: "msg_1",
  project: PROJECT,
  fromId: alice.id,
  fromName: alice.name,
  toId: bob.id,
  toName: bob.name,
  content: "hello",
  delivery: "followUp",
  hops: 0,
  maxHops: 5,
  seq: 7,
  createdAtMs: NOW - 1_000,
  expiresAtMs: NOW - 1_000 + 60_000,
  status: "queued",
  ...over,
});

export const send = (ctx: SendContext, i: SendInput = input()) => decideSend(ctx, { sender, input: i, id: "msg_new", nowMs: NOW });
export const at = (who: AgentRow, project = PROJECT) => ({ id: "msg_1", agentId: who.id, project, nowMs: NOW });
