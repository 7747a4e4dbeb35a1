import type { AgentRow } from "./agent-store.js";
import type { ChangeOf, ChangeRecord } from "./change-feed.js";

/**
 * The peer-message concern of the store: messages, each agent's numbered stream of inbox events
 * and its cursors. Each backend implements it in one file (sqlite/messages.ts,
 * postgres/messages.ts); the peer domain takes this interface.
 */

export type MessageStatus = "queued" | "delivered" | "replied" | "cancelled" | "expired" | "error";
export type Delivery = "followUp" | "steer" | "nextTurn";

export interface MessageRow {
  id: string;
  project: string;
  fromId: string;
  fromName: string;
  toId: string;
  toName: string;
  content: string;
  delivery: Delivery;
  hops: number;
  maxHops: number;
  /** The number of the message's `message` event in the recipient's stream (store-assigned). */
  seq: number;
  correlationId?: string;
  replyTo?: string;
  idempotencyKey?: string;
  createdAtMs: number;
  expiresAtMs: number;
  deliveredAtMs?: number;
  repliedAtMs?: number;
  cancelledAtMs?: number;
  status: MessageStatus;
  reply?: { content: string; createdAtMs: number };
  error?: string;
}

export type InboxEventKind = "message" | "reply" | "cancelled" | "expired";

/** One event of an agent's stream, with the message as it is now. */
export interface InboxEvent {
  agentId: string;
  seq: number;
  kind: InboxEventKind;
  message: MessageRow;
}

/** Where an agent's stream stands. */
export interface InboxState {
  /** Number of the newest event (0 when none). */
  head: number;
  /** The cursor AckMessage advances (resume point when the client brings none). */
  ackedCursor: number;
  /** Events up to here may have been purged; resuming from before it is cursor_expired. */
  purgedThrough: number;
}

/** A message decision: the row to write, the stream events it makes, a cursor to advance. */
export interface MessageDecision<T> {
  /** Hub time of the decision; stamps its stream events. */
  atMs: number;
  write?: MessageRow;
  /** Appended to each agent's stream in order; a `message` event also numbers `write.seq`. */
  events?: { agentId: string; kind: InboxEventKind }[];
  /** Advance this agent's acked cursor to at least `seq`. */
  ack?: { agentId: string; seq: number };
  /** The change it records for watchers of the message's project (WatchOpenMessages), with `write`. */
  change?: ChangeRecord;
  result: T;
}

/** What a send decision sees. */
export interface SendContext {
  /** The sender's earlier message with the same idempotency key, if any. */
  existing?: MessageRow;
  /** Agents of the project whose id is the target or whose name matches it case-insensitively, in registration order. */
  candidates: AgentRow[];
}

export interface ListMessagesQuery {
  agentId: string;
  box: "inbox" | "outbox";
  /** Empty: every status. */
  statuses: MessageStatus[];
  /** Only messages older than this (createdAtMs, id) position (paging). */
  before?: { createdAtMs: number; id: string };
  limit: number;
}

export interface MessageStore {
  /** A send: sees the idempotent original and the target candidates, decides, writes. */
  decideSend<T>(
    query: { senderId: string; idempotencyKey?: string; project: string; target: string },
    decide: (ctx: SendContext, nowMs: number) => MessageDecision<T>,
  ): Promise<{ result: T; events: InboxEvent[] }>;
  /** Any later step of one message (ack, reply, cancel). */
  decideMessage<T>(
    id: string,
    decide: (current: MessageRow | undefined, nowMs: number) => MessageDecision<T>,
  ): Promise<{ result: T; events: InboxEvent[] }>;
  getMessage(id: string): Promise<MessageRow | undefined>;
  listMessages(query: ListMessagesQuery): Promise<MessageRow[]>;
  countMessages(): Promise<number>;
  /** Queued or delivered messages of a project, newest first, and how many there are. */
  listOpenMessages(project: string, limit: number): Promise<{ messages: MessageRow[]; total: number }>;
  /** The newest `limit` open messages of a project, how many it has, and the head of its message changes they reflect. */
  openMessagesSnapshot(project: string, limit: number): Promise<{ messages: MessageRow[]; total: number; head: number }>;
  /**
   * Expires every open message due at the store's time (status expired, `error` set); events to
   * both parties, and `change` for each.
   */
  expireMessages(error: string, change: ChangeOf<MessageRow>): Promise<InboxEvent[]>;
  /** Deletes ended messages whose end is `retainMs` or more before the store's time, and their stream events. */
  purgeMessages(retainMs: number): Promise<MessageRow[]>;
  inboxState(agentId: string): Promise<InboxState>;
  /** Stream events after `afterSeq`, oldest first. */
  readInbox(agentId: string, afterSeq: number, limit: number): Promise<InboxEvent[]>;
  /** Queued or delivered messages to the agent with afterSeq < seq <= uptoSeq, by seq. */
  pendingMessages(agentId: string, afterSeq: number, uptoSeq: number): Promise<MessageRow[]>;
  /**
   * For a store several hubs share (PostgreSQL): calls `onEvent` for each inbox event any hub
   * commits from now on (this one's included), each agent's in order, until the returned
   * function is called. Absent on a store only one process uses: its own decisions are all.
   */
  tailInbox?(onEvent: (agentId: string, seq: number) => void): () => void;
}
