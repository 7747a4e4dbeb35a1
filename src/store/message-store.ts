import type { ChangeOf, ChangeRecord, Listening } from "./change-feed.js";
import type { AgentRow, InboxEvent, InboxEventKind, InboxNotice, MessageRow, MessageStatus } from "../domain.js";

/**
 * The peer-message concern of the store: messages, each agent's numbered stream of inbox events
 * and its cursors. Each backend implements it in one file (sqlite/messages.ts,
 * postgres/messages.ts); the peer domain takes this interface.
 */

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
  /**
   * The sender's row as the send's transaction reads it (undefined when it is gone), so that a
   * send authenticated just before its agent was taken over, evicted or unregistered sees the
   * new key and is refused (D26).
   */
  sender?: AgentRow;
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
  /**
   * A send: sees the idempotent original, the target candidates and the sender's row, decides,
   * writes. `projectHasTokens` says, as the same transaction reads it, whether the project has,
   * or ever had, a managed token (caller.ts checkCaller).
   */
  decideSend<T>(
    query: { senderId: string; idempotencyKey?: string; project: string; target: string },
    decide: (ctx: SendContext, nowMs: number, projectHasTokens: () => boolean) => MessageDecision<T>,
  ): Promise<{ result: T; events: InboxEvent[] }>;
  /**
   * Any later step of one message (ack, reply, cancel). `actorId`: the agent deciding, whose row
   * the same transaction reads (on a shared store share-locked, before the message) and passes as
   * `actor`, so that a call authenticated just before its agent was taken over, evicted or
   * unregistered sees the new key and is refused (D26).
   */
  decideMessage<T>(
    id: string,
    decide: (current: MessageRow | undefined, nowMs: number, actor: AgentRow | undefined) => MessageDecision<T>,
    actorId?: string,
  ): Promise<{ result: T; events: InboxEvent[] }>;
  getMessage(id: string): Promise<MessageRow | undefined>;
  listMessages(query: ListMessagesQuery): Promise<MessageRow[]>;
  countMessages(): Promise<number>;
  /** Queued or delivered messages of a project, newest first, and how many there are. */
  listOpenMessages(project: string, limit: number): Promise<{ messages: MessageRow[]; total: number }>;
  /** The newest `limit` open messages of a project, how many it has, and the head of its message changes they reflect. */
  openMessagesSnapshot(project: string, limit: number): Promise<{ messages: MessageRow[]; total: number; head: number }>;
  /**
   * Expires the open messages due at the store's time (status expired, `error` set), at most
   * `limit`, the earliest due first; events to both parties, and `change` for each.
   */
  expireMessages(error: string, change: ChangeOf<MessageRow>, limit: number): Promise<InboxEvent[]>;
  /**
   * Deletes ended messages whose end is `retainMs` or more before the store's time, and their
   * stream events; at most `limit`, returned.
   */
  purgeMessages(retainMs: number, limit: number): Promise<MessageRow[]>;
  inboxState(agentId: string): Promise<InboxState>;
  /** Stream events after `afterSeq`, oldest first. */
  readInbox(agentId: string, afterSeq: number, limit: number): Promise<InboxEvent[]>;
  /** Queued or delivered messages to the agent with afterSeq < seq <= uptoSeq, by seq: the first `limit`. */
  pendingMessages(agentId: string, afterSeq: number, uptoSeq: number, limit: number): Promise<MessageRow[]>;
  /**
   * Every inbox event once it is durable, each agent's in order, until the returned function is
   * called: this store's own decisions with the event itself (the same channel as the change
   * feed's), and on PostgreSQL the ones every hub commits, by agent and sequence, soon while
   * `listening` is active (ChangeFeed.tailChanges).
   */
  tailInbox(onNotice: (notice: InboxNotice) => void, listening?: Listening): () => void;
}
