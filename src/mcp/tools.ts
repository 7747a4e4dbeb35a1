import type { DescMethod } from "@bufbuild/protobuf";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { inputSchemaOf, outputSchemaOf, type JsonSchema } from "./schema.js";

/**
 * The tools the MCP face offers: each is one RPC of the hub, called in-process as the session's
 * agent, through the same interceptors as every other face (server/in-process.ts). A tool names
 * the request fields a model may set; the session fills the rest (the agent's id). No tool takes
 * a sender, an agent id or a key: identity belongs to the session.
 */
export interface ToolDef {
  name: string;
  method: DescMethod;
  description: string;
  /** Request fields by proto name, with what a model should know of each. */
  fields: Record<string, string>;
  required?: string[];
  /** Request fields the session sets (`agent_id`: the session's agent). */
  bound?: "agent_id"[];
  annotations: { readOnlyHint: boolean; destructiveHint: boolean; idempotentHint: boolean; openWorldHint: false };
  /** One line for clients that show only text. */
  text(out: Record<string, any>): string; // eslint-disable-line @typescript-eslint/no-explicit-any
}

const read = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false } as const;
const write = (idempotentHint: boolean, destructiveHint = false) => ({ readOnlyHint: false, destructiveHint, idempotentHint, openWorldHint: false }) as const;

const ttl = "How long the lease lives unless renewed, in milliseconds, 5000..600000 (default 300000).";
const leaseName = "The lease's name in your project, e.g. `repo/main` (1..200 chars).";
const token = "The fencing token you were granted (acquire_lease's lease.fencingToken).";
const leaseLine = (l: Record<string, unknown> | undefined) =>
  l ? `lease ${String(l.name)} held by ${String(l.holderAgentName)} with fencing token ${String(l.fencingToken)} until ${String(l.expiresAt)}` : "no lease";
const messageLine = (m: Record<string, unknown> | undefined) =>
  m ? `message ${String(m.id)} from ${String(m.fromName)} to ${String(m.toName)}: ${String(m.status)}` : "no message";

export const tools: ToolDef[] = [
  {
    name: "whoami",
    method: PresenceService.method.heartbeat,
    description:
      "Who this session acts as: your agent (id, name, project) on the coordination hub. Calling it also tells the hub you are alive. Your identity comes from the session; no tool lets you act as another agent.",
    fields: {},
    bound: ["agent_id"],
    annotations: write(true),
    text: (o) => `you are ${String(o.agent?.name)} (${String(o.agent?.id)}) in project ${String(o.agent?.project)}`,
  },
  {
    name: "list_agents",
    method: PresenceService.method.listAgents,
    description: "Lists the agents of your project with their presence (online, stale, offline), host and purpose: who you can message and who may hold a lease.",
    fields: { include_offline: "Also list agents that are offline (default false)." },
    annotations: read,
    text: (o) => `${(o.agents ?? []).length} agent(s): ${(o.agents ?? []).map((a: Record<string, unknown>) => `${String(a.name)} (${String(a.presence)})`).join(", ")}`,
  },
  {
    name: "send_message",
    method: PeerService.method.sendMessage,
    description:
      "Sends a message to another agent of your project, by name or id. It is queued until the recipient acknowledges it, and it may reply; get_message shows its status and reply. Use idempotency_key when you may retry, so a retry does not send it twice.",
    fields: {
      target: "The recipient: an agent's name or id in your project.",
      content: "The message text, 1..32000 chars.",
      ttl_ms: "How long it waits for a reply, in milliseconds (default: the hub's, 24 h).",
      allow_offline: "Queue it for an agent that is offline now (default false: an offline target is refused).",
      idempotency_key: "A key of yours: sending again with the same key and content answers the first message instead of a second.",
    },
    required: ["target", "content"],
    annotations: write(false),
    text: (o) => `sent ${messageLine(o.message)}`,
  },
  {
    name: "read_inbox",
    method: PeerService.method.readInbox,
    description:
      "Reads your inbox: messages sent to you that you have not acknowledged, replies to messages you sent, and cancellations and expiries. With wait_ms it waits for mail (up to 60 s) instead of answering empty, so you never need to poll. Pass the answer's nextCursor as after_cursor next time to read on from there. Acknowledge (ack_message) a message once you have taken it on: an acknowledged message is not answered again.",
    fields: {
      after_cursor: "Read the events after this cursor (a previous answer's nextCursor); unset: from the messages you have not acknowledged.",
      limit: "Events per answer, 1..100 (default 20).",
      wait_ms: "Wait this long for the first event when there is none, in milliseconds, 0..60000 (default 0: answer at once). Keep your client's request timeout above it.",
    },
    annotations: read,
    text: (o) =>
      `${(o.events ?? []).length} event(s), next cursor ${String(o.nextCursor)}${(o.events ?? [])
        .map((e: Record<string, any>) => { // eslint-disable-line @typescript-eslint/no-explicit-any
          const [kind, m] = Object.entries(e).find(([k]) => k !== "cursor") ?? ["?", {}];
          return `; ${kind} ${String(m.id)} from ${String(m.fromName)}: ${String(m.reply?.content ?? m.content)}`;
        })
        .join("")}`,
  },
  {
    name: "ack_message",
    method: PeerService.method.ackMessage,
    description: "Acknowledges a message sent to you: it is delivered, and no longer waits for you. Acknowledge what you have read and taken on.",
    fields: { message_id: "The message's id." },
    required: ["message_id"],
    annotations: write(true),
    text: (o) => `acknowledged ${messageLine(o.message)}`,
  },
  {
    name: "reply_message",
    method: PeerService.method.replyMessage,
    description: "Replies to a message sent to you; its sender gets the reply. A message has one reply.",
    fields: { message_id: "The message's id.", content: "The reply text, 1..32000 chars." },
    required: ["message_id", "content"],
    annotations: write(false),
    text: (o) => `replied to ${messageLine(o.message)}`,
  },
  {
    name: "cancel_message",
    method: PeerService.method.cancelMessage,
    description: "Cancels a message you sent that is not replied yet: its recipient is told it no longer needs to act on it.",
    fields: { message_id: "The message's id." },
    required: ["message_id"],
    annotations: write(true, true),
    text: (o) => `cancelled ${messageLine(o.message)}`,
  },
  {
    name: "get_message",
    method: PeerService.method.getMessage,
    description: "Reads a message you sent or received: its status (queued, delivered, replied, cancelled, expired) and its reply, once replied.",
    fields: { message_id: "The message's id." },
    required: ["message_id"],
    annotations: read,
    text: (o) => `${messageLine(o.message)}${o.message?.reply ? `; reply: ${String(o.message.reply.content)}` : ""}`,
  },
  {
    name: "acquire_lease",
    method: LeaseService.method.acquireLease,
    description:
      "Takes a fenced lease on a shared resource before you touch it (a branch push, a PR, a deploy). You get a fencing token: present it with every write to the resource, so a write of a holder that lost the lease is refused. The lease lapses after ttl_ms unless you renew it: renew long work before it lapses, and release it when done. With wait_ms you wait in line if another agent holds it; without, a held lease is refused at once (lease_held).",
    fields: { name: leaseName, ttl_ms: ttl, wait_ms: "Wait this long for a lease another agent holds, in milliseconds, 0..600000 (default 0: refuse at once)." },
    required: ["name"],
    annotations: write(false),
    text: (o) => `granted ${leaseLine(o.lease)}`,
  },
  {
    name: "renew_lease",
    method: LeaseService.method.renewLease,
    description: "Extends your lease before it lapses (same fencing token). Refused with lease_superseded if another agent took it over: then stop writing to the resource.",
    fields: { name: leaseName, fencing_token: token, ttl_ms: ttl },
    required: ["name", "fencing_token"],
    annotations: write(true),
    text: (o) => `renewed ${leaseLine(o.lease)}`,
  },
  {
    name: "release_lease",
    method: LeaseService.method.releaseLease,
    description: "Releases your lease when your work on the resource is done, so the next agent (the first one waiting) gets it at once.",
    fields: { name: leaseName, fencing_token: token },
    required: ["name", "fencing_token"],
    annotations: write(true, true),
    text: (o) => `released ${leaseLine(o.lease)}`,
  },
  {
    name: "get_lease",
    method: LeaseService.method.getLease,
    description: "Who holds a lease of your project, with which fencing token, until when, and who waits for it.",
    fields: { name: leaseName },
    required: ["name"],
    annotations: read,
    text: (o) => `${leaseLine(o.lease)}${o.expired ? " (lapsed)" : ""}`,
  },
  {
    name: "list_leases",
    method: LeaseService.method.listLeases,
    description: "Lists the live leases of your project: what is being worked on, by whom, and who waits.",
    fields: { include_expired: "Also list leases that lapsed (default false).", page_size: "Leases per page, 1..1000 (default 100).", page_token: "next_page_token of the previous page." },
    annotations: read,
    text: (o) => `${(o.leases ?? []).length} lease(s): ${(o.leases ?? []).map((l: Record<string, unknown>) => `${String(l.name)} (${String(l.holderAgentName)}, token ${String(l.fencingToken)})`).join(", ")}`,
  },
];

/** A tool as `tools/list` shows it. */
export const listed = (t: ToolDef): { name: string; description: string; inputSchema: JsonSchema; outputSchema: JsonSchema; annotations: ToolDef["annotations"] } => ({
  name: t.name,
  description: t.description,
  inputSchema: inputSchemaOf(t.method.input, t.fields, t.required),
  outputSchema: outputSchemaOf(t.method.output),
  annotations: t.annotations,
});
