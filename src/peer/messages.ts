import { checkCaller, type AgentCaller } from "../caller.js";
import { errors } from "../errors.js";
import { newTimeOrderedId } from "../ids.js";
import type { Observer } from "../observe.js";
import type { MessageDecision, MessageStore } from "../store/message-store.js";
import { hasNul, idOf, intInRange, optionalString, requireString } from "../validate.js";
import {
  decideAck,
  decideCancel,
  decideReply,
  decideSend,
  expiredError,
  messageChange,
  requireInstance,
  visibleTo,
  type SendInput,
} from "./rules.js";
import { messageTtlRangeMs, sweepChunk, type AgentRow, type Delivery, type MessageRow, type MessageStatus } from "../domain.js";

/** Longer than any message id the hub issues (`msg_` and 32 characters). */
const maxMessageIdLength = 128;

export interface MessagesDeps {
  store: { messages: MessageStore };
  observer: Observer;
  /** Default TTL of a message (KXM_MESSAGE_TTL_MS). */
  messageTtlMs: number;
  /** How long ended messages are kept (KXM_MESSAGE_RETENTION_MS). */
  messageRetentionMs: number;
}

export const messageLimits = {
  contentMax: 32_000,
  ttlMinMs: messageTtlRangeMs.min,
  ttlMaxMs: messageTtlRangeMs.max,
  hopsMax: 100,
  maxHopsMin: 1,
  maxHopsMax: 20,
  maxHopsDefault: 5,
} as const;

/** The raw send request as both faces decode it. */
export interface SendRequest {
  target: string;
  content: string;
  /** followUp, steer or nextTurn; anything else is refused. */
  delivery?: string;
  correlationId?: string;
  replyTo?: string;
  hops?: number;
  maxHops?: number;
  ttlMs?: number;
  allowOffline?: boolean;
  idempotencyKey?: string;
}

const deliveries: readonly string[] = ["followUp", "steer", "nextTurn"] satisfies Delivery[];
const isDelivery = (d: string): d is Delivery => deliveries.includes(d);

const content = (value: string | undefined) => requireString("content", value, messageLimits.contentMax);

/** A decision on a message for the caller's instance only (requireInstance), the agent's row read in its transaction. */
const asInstance =
  <T>(caller: AgentCaller, decide: (current: MessageRow | undefined, nowMs: number) => MessageDecision<T>) =>
  (current: MessageRow | undefined, nowMs: number, actor: AgentRow | undefined): MessageDecision<T> => {
    requireInstance(actor, caller);
    return decide(current, nowMs);
  };

/** Peer messages: validation in the reference's order, one store decision per call (the store hands each inbox event to the streams once durable: MessageStore.tailInbox). */
export function createMessages(deps: MessagesDeps) {
  const { store, observer } = deps;

  const logFields = (m: MessageRow) => ({
    messageId: m.id,
    project: m.project,
    status: m.status,
    delivery: m.delivery,
    from: m.fromId,
    fromName: m.fromName,
    to: m.toId,
    toName: m.toName,
  });

  /**
   * Expires due messages (lazily before reads, and on the sweep), `sweepChunk` a decision, until
   * none is due.
   */
  async function expireDue(): Promise<number> {
    let total = 0;
    for (;;) {
      const events = await store.messages.expireMessages(expiredError, messageChange, sweepChunk);
      const expired = new Map<string, MessageRow>();
      for (const e of events) expired.set(e.message.id, e.message);
      for (const m of expired.values()) {
        observer.count("messagesExpired");
        observer.log("message_expired", logFields(m));
      }
      total += expired.size;
      if (expired.size < sweepChunk) return total;
    }
  }

  /** Deletes ended messages past retention (their idempotency keys are forgotten), `sweepChunk` a decision. */
  async function purge(): Promise<number> {
    let total = 0;
    for (;;) {
      const purged = await store.messages.purgeMessages(deps.messageRetentionMs, sweepChunk);
      for (const m of purged) {
        observer.count("messagesPurged");
        observer.log("message_purged", logFields(m));
      }
      total += purged.length;
      if (purged.length < sweepChunk) return total;
    }
  }

  function validateSend(req: SendRequest): SendInput {
    const target = requireString("target", req.target, 80);
    const text = content(req.content);
    const delivery = req.delivery ?? "followUp";
    if (!isDelivery(delivery)) throw errors.protocol("delivery must be steer, followUp, or nextTurn", "delivery");
    const correlationId = optionalString("correlationId", req.correlationId, 128);
    const replyTo = optionalString("replyTo", req.replyTo, 80);
    const hops = intInRange("hops", req.hops, 0, messageLimits.hopsMax, 0);
    const maxHops = intInRange(
      "maxHops",
      req.maxHops,
      messageLimits.maxHopsMin,
      messageLimits.maxHopsMax,
      messageLimits.maxHopsDefault,
    );
    if (hops >= maxHops) throw errors.hopLimitReached(hops, maxHops);
    const ttlMs = intInRange("ttlMs", req.ttlMs, messageLimits.ttlMinMs, messageLimits.ttlMaxMs, deps.messageTtlMs);
    const idempotencyKey = optionalString("idempotencyKey", req.idempotencyKey, 128);
    return {
      target,
      content: text,
      delivery,
      ...(correlationId !== undefined && { correlationId }),
      ...(replyTo !== undefined && { replyTo }),
      hops,
      maxHops,
      ttlMs,
      allowOffline: req.allowOffline ?? false,
      ...(idempotencyKey !== undefined && { idempotencyKey }),
    };
  }

  return {
    expireDue,
    purge,

    /**
     * Sends to an agent of the caller's project. Throws protocol_error, hop_limit_reached,
     * idempotency_conflict, target_not_found, self_target.
     */
    async send(caller: AgentCaller, req: SendRequest): Promise<{ message: MessageRow; idempotent: boolean }> {
      const input = validateSend(req);
      // A replay answers the original as it stands now, so apply expiry first when one is possible.
      if (input.idempotencyKey !== undefined) await expireDue();
      const { result, events } = await store.messages.decideSend(
        { senderId: caller.agentId, idempotencyKey: input.idempotencyKey, project: caller.project, target: input.target },
        (ctx, nowMs, projectHasTokens) => {
          checkCaller(caller, ctx.sender, projectHasTokens);
          return decideSend(ctx, { sender: caller, input, id: newTimeOrderedId("msg", nowMs), nowMs });
        },
      );
      if (!result.idempotent) {
        observer.count("messagesSent");
        observer.log("message_sent", { ...logFields(result.message), hops: result.message.hops });
      }
        return { message: events[0]?.message ?? result.message, idempotent: result.idempotent };
    },

    /** Recipient acknowledges; advances its stream cursor. */
    async ack(caller: AgentCaller, id: string): Promise<MessageRow> {
      idOf("id", id, maxMessageIdLength);
      await expireDue();
      await purge();
      const { result } = await store.messages.decideMessage(
        id,
        asInstance(caller, (cur, nowMs) => decideAck(cur, { id, agentId: caller.agentId, project: caller.project, nowMs })),
        caller.agentId,
      );
      return result;
    },

    /** Recipient replies once; the sender's stream gets a reply event. */
    async reply(caller: AgentCaller, id: string, text: string | undefined): Promise<MessageRow> {
      idOf("id", id, maxMessageIdLength);
      await expireDue();
      const { result } = await store.messages.decideMessage(
        id,
        asInstance(caller, (cur, nowMs) => decideReply(cur, { id, agentId: caller.agentId, project: caller.project, nowMs, content: () => content(text) })),
        caller.agentId,
      );
      observer.count("messagesReplied");
      observer.log("message_replied", logFields(result));
      return result;
    },

    /** Sender cancels; the recipient's stream gets a cancelled event. */
    async cancel(caller: AgentCaller, id: string): Promise<MessageRow> {
      idOf("id", id, maxMessageIdLength);
      await expireDue();
      const { result } = await store.messages.decideMessage(
        id,
        asInstance(caller, (cur, nowMs) => decideCancel(cur, { id, agentId: caller.agentId, project: caller.project, nowMs })),
        caller.agentId,
      );
      if (result.changed) {
        observer.count("messagesCancelled");
        observer.log("message_cancelled", logFields(result.message));
      }
      return result.message;
    },

    /** A message the caller sent or received. */
    async get(caller: AgentCaller, id: string): Promise<MessageRow> {
      idOf("id", id, maxMessageIdLength);
      await expireDue();
      return visibleTo(await store.messages.getMessage(id), { id, agentId: caller.agentId, project: caller.project });
    },

    /** The caller's inbox or outbox, newest first; the page token is the last item's position. */
    async list(
      caller: AgentCaller,
      req: { box: "inbox" | "outbox"; statuses: MessageStatus[]; pageSize: number; pageToken: string },
    ): Promise<{ messages: MessageRow[]; nextPageToken: string }> {
      const limit = req.pageSize === 0 ? 50 : intInRange("pageSize", req.pageSize, 1, 200, 50);
      const before = req.pageToken === "" ? undefined : decodePosition(req.pageToken);
      await expireDue();
      const rows = await store.messages.listMessages({ agentId: caller.agentId, box: req.box, statuses: req.statuses, before, limit: limit + 1 });
      const page = rows.slice(0, limit);
      const last = page[page.length - 1];
      return { messages: page, nextPageToken: rows.length > limit && last ? encodePosition(last) : "" };
    },
  };
}

const encodePosition = (m: MessageRow) => Buffer.from(`${m.createdAtMs}:${m.id}`, "utf8").toString("base64url");

function decodePosition(token: string): { createdAtMs: number; id: string } {
  const [ms, id] = Buffer.from(token, "base64url").toString("utf8").split(":");
  // A time past 2^53 is none the hub wrote, and PostgreSQL would refuse it as a bigint.
  if (!ms || !id || !/^\d+$/.test(ms) || !Number.isSafeInteger(Number(ms)) || hasNul(id)) throw errors.protocol("pageToken is invalid", "pageToken");
  return { createdAtMs: Number(ms), id };
}

export type Messages = ReturnType<typeof createMessages>;
