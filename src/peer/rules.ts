import { errors } from "../errors.js";
import type { ChangeRecord } from "../store/change-feed.js";
import type { MessageDecision, SendContext } from "../store/message-store.js";
import { holdsKey, type AgentRow, type Delivery, type MessageRow, type MessageStatus } from "../domain.js";

/**
 * The message decisions, pure: given the stored message (or the send context), the caller and
 * the hub time, what to write, which stream events to append, and what to answer.
 * States: queued -> delivered (ack) -> replied; queued|delivered -> cancelled (sender) or
 * expired (TTL). replied, cancelled, expired and error are terminal.
 */

export const cancelledError = "message cancelled by sender";
export const expiredError = "message expired before a reply was received";

/** A validated send request. */
export interface SendInput {
  target: string;
  content: string;
  delivery: Delivery;
  correlationId?: string;
  replyTo?: string;
  hops: number;
  maxHops: number;
  ttlMs: number;
  allowOffline: boolean;
  idempotencyKey?: string;
}

export interface Sender {
  agentId: string;
  agentName: string;
  project: string;
}

/**
 * A message decision acts only for the instance that was authenticated: the agent's row, as the
 * decision's own transaction reads it, must still carry the key the call presented. A takeover
 * keeps the agent's id (D26), so a send, ack, reply or cancel the ended instance (taken over,
 * evicted, unregistered) had in flight is refused with invalid_agent_identity and changes
 * nothing, never decided under the id the new instance carries. As asCaller for leases.
 */
export function requireInstance(agent: AgentRow | undefined, caller: { keyHash?: string }): void {
  if (!holdsKey(agent, caller.keyHash)) throw errors.invalidAgentIdentity();
}

const isOpen = (m: MessageRow) => m.status === "queued" || m.status === "delivered";

/**
 * The status a decision at `nowMs` sees: an open message whose time to live has run out is
 * expired, whether or not the expiry's own decision (a separate one, peer/messages.ts expireDue)
 * has written it yet. A reply, an ack or a cancel past the TTL is refused as for an expired one.
 */
const statusAt = (m: MessageRow, nowMs: number): MessageStatus => (isOpen(m) && m.expiresAtMs <= nowMs ? "expired" : m.status);

/** Refuses `action` (invalid_message_state) unless the message is open at `nowMs` (statusAt). */
function requireOpenAt(m: MessageRow, nowMs: number, action: string): void {
  const status = statusAt(m, nowMs);
  if (status !== "queued" && status !== "delivered") throw errors.invalidMessageState(`cannot ${action} a ${status} message`, status);
}

/** What watchers of a project's open messages learn of one (WatchOpenMessages): never its content. */
export interface MessageChangeBody {
  id: string;
  status: MessageStatus;
  fromName: string;
  toName: string;
  delivery: Delivery;
  createdAtMs: number;
  expiresAtMs: number;
  deliveredAtMs?: number;
  /** When it ended (replied, cancelled, expired, failed). */
  endedAtMs?: number;
  correlationId?: string;
}

/** A message as operators see it, at `nowMs` (an ended one ended then unless it says when). */
export function openMessageView(m: MessageRow, nowMs: number): MessageChangeBody {
  return {
    id: m.id,
    status: m.status,
    fromName: m.fromName,
    toName: m.toName,
    delivery: m.delivery,
    createdAtMs: m.createdAtMs,
    expiresAtMs: m.expiresAtMs,
    ...(m.deliveredAtMs !== undefined && { deliveredAtMs: m.deliveredAtMs }),
    ...(!isOpen(m) && { endedAtMs: m.repliedAtMs ?? m.cancelledAtMs ?? nowMs }),
    ...(m.correlationId !== undefined && { correlationId: m.correlationId }),
  };
}

/** The change a message decision records: the message as it is after it, at `nowMs`. */
export const messageChange = (m: MessageRow, nowMs: number): ChangeRecord => ({ stream: "messages", body: openMessageView(m, nowMs) });

/**
 * A repeat with the same idempotency key is the same request when everything but allowOffline
 * matches (the target by the original's id or its name, case-insensitively).
 */
export function sameRequest(m: MessageRow, input: SendInput): boolean {
  return (
    (input.target === m.toId || input.target.toLowerCase() === m.toName.toLowerCase()) &&
    input.content === m.content &&
    input.delivery === m.delivery &&
    input.correlationId === m.correlationId &&
    input.replyTo === m.replyTo &&
    input.hops === m.hops &&
    input.maxHops === m.maxHops &&
    input.ttlMs === m.expiresAtMs - m.createdAtMs
  );
}

/** The recipient: by id first, else the first agent whose name matches; online unless allowed offline. */
export function resolveTarget(candidates: AgentRow[], input: SendInput): AgentRow | undefined {
  const reachable = (a: AgentRow) => a.online || input.allowOffline;
  return (
    candidates.find((a) => a.id === input.target && reachable(a)) ??
    candidates.find((a) => a.name.toLowerCase() === input.target.toLowerCase() && reachable(a))
  );
}

export function decideSend(
  ctx: SendContext,
  req: { sender: Sender; input: SendInput; id: string; nowMs: number },
): MessageDecision<{ message: MessageRow; idempotent: boolean }> {
  const { sender, input, nowMs } = req;
  if (ctx.existing) {
    if (!sameRequest(ctx.existing, input)) throw errors.idempotencyConflict(input.idempotencyKey!, ctx.existing.id);
    return { atMs: nowMs, result: { message: ctx.existing, idempotent: true } };
  }
  const to = resolveTarget(ctx.candidates, input);
  if (!to) throw errors.targetNotFound(input.target);
  if (to.id === sender.agentId) throw errors.selfTarget();
  const message: MessageRow = {
    id: req.id,
    project: sender.project,
    fromId: sender.agentId,
    fromName: sender.agentName,
    toId: to.id,
    toName: to.name,
    content: input.content,
    delivery: input.delivery,
    hops: input.hops,
    maxHops: input.maxHops,
    seq: 0, // numbered by the store with the recipient's `message` event
    ...(input.correlationId !== undefined && { correlationId: input.correlationId }),
    ...(input.replyTo !== undefined && { replyTo: input.replyTo }),
    ...(input.idempotencyKey !== undefined && { idempotencyKey: input.idempotencyKey }),
    createdAtMs: nowMs,
    expiresAtMs: nowMs + input.ttlMs,
    status: "queued",
  };
  return {
    atMs: nowMs,
    write: message,
    change: messageChange(message, nowMs),
    events: [{ agentId: to.id, kind: "message" }],
    result: { message, idempotent: false },
  };
}

/**
 * The message as the caller may know of it. Another project's message does not exist for the
 * caller: it is message_not_found, never message_forbidden, so its existence does not leak.
 */
function found(m: MessageRow | undefined, req: { id: string; project: string }): MessageRow {
  if (!m || m.project !== req.project) throw errors.messageNotFound(req.id);
  return m;
}

/** Recipient only; queued -> delivered, delivered stays; advances the recipient's cursor. */
export function decideAck(current: MessageRow | undefined, req: { id: string; agentId: string; project: string; nowMs: number }) {
  const m = found(current, req);
  if (m.toId !== req.agentId) throw errors.messageForbidden("only the recipient can acknowledge this message", m.id);
  requireOpenAt(m, req.nowMs, "acknowledge");
  const next: MessageRow = m.status === "queued" ? { ...m, status: "delivered", deliveredAtMs: req.nowMs } : m;
  return {
    atMs: req.nowMs,
    ...(next !== m && { write: next, change: messageChange(next, req.nowMs) }),
    ack: { agentId: m.toId, seq: m.seq },
    result: next,
  } satisfies MessageDecision<MessageRow>;
}

/** Recipient only, once; the sender gets a reply event. `validate` checks the content after the state. */
export function decideReply(
  current: MessageRow | undefined,
  req: { id: string; agentId: string; project: string; nowMs: number; content: () => string },
): MessageDecision<MessageRow> {
  const m = found(current, req);
  if (m.toId !== req.agentId) throw errors.messageForbidden("only the recipient can reply to this message", m.id);
  if (m.status === "replied") throw errors.duplicateReply(m.id);
  requireOpenAt(m, req.nowMs, "reply to");
  const next: MessageRow = {
    ...m,
    status: "replied",
    reply: { content: req.content(), createdAtMs: req.nowMs },
    repliedAtMs: req.nowMs,
  };
  return {
    atMs: req.nowMs,
    write: next,
    change: messageChange(next, req.nowMs),
    events: [{ agentId: m.fromId, kind: "reply" }],
    result: next,
  };
}

/** Sender only; a repeat cancel answers the cancelled message unchanged; the recipient gets an event. */
export function decideCancel(
  current: MessageRow | undefined,
  req: { id: string; agentId: string; project: string; nowMs: number },
): MessageDecision<{ message: MessageRow; changed: boolean }> {
  const m = found(current, req);
  if (m.fromId !== req.agentId) throw errors.messageForbidden("only the sender can cancel this message", m.id);
  if (m.status === "cancelled") return { atMs: req.nowMs, result: { message: m, changed: false } };
  requireOpenAt(m, req.nowMs, "cancel");
  const next: MessageRow = { ...m, status: "cancelled", cancelledAtMs: req.nowMs, error: cancelledError };
  return {
    atMs: req.nowMs,
    write: next,
    change: messageChange(next, req.nowMs),
    events: [{ agentId: m.toId, kind: "cancelled" }],
    result: { message: next, changed: true },
  };
}

/** Sender or recipient. */
export function visibleTo(current: MessageRow | undefined, req: { id: string; agentId: string; project: string }): MessageRow {
  const m = found(current, req);
  if (m.fromId !== req.agentId && m.toId !== req.agentId) {
    throw errors.messageForbidden("message is not visible to this agent", m.id);
  }
  return m;
}
