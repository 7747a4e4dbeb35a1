/**
 * The domain's records, in one place on the ground floor: what the hub knows of agents, runtimes,
 * leases, messages, runs and tokens, as the domain decides on them, the store keeps them and the
 * faces convert them. Every layer may import this module; it imports nothing.
 */

/**
 * The most rows one sweep decision expires or purges. A sweep with more to do runs decision after
 * decision until one does less, so none holds the store (SQLite's thread, PostgreSQL's locks) for
 * long: deleting 50,000 stored changes in one decision held the hub's thread 53 ms.
 */
export const sweepChunk = 500;

/** The TTL a message may have, in ms (reference-hub.md: 1,000..604,800,000): a send's own, and the hub's default (KXM_MESSAGE_TTL_MS). */
export const messageTtlRangeMs = { min: 1_000, max: 604_800_000 } as const;

/** The lease attached to lease refusals (REST extra `lease`, RPC typed detail). */
export interface LeaseView {
  resource: string;
  project: string;
  name: string;
  holderAgentId: string;
  holderAgentName: string;
  fencingToken: number;
  acquiredAtMs: number;
  expiresAtMs: number;
  /** The calls waiting in its queue, first in line first (views and changes; absent in refusals). */
  waiters?: WaiterView[];
}

/** A call waiting in a lease's queue, as views show it. */
export interface WaiterView {
  agentId: string;
  agentName: string;
  sinceMs: number;
  deadlineMs: number;
}

export interface AgentRow {
  id: string;
  project: string;
  name: string;
  purpose: string;
  model?: string;
  host?: string;
  /** SHA-256 hex of the current agent key; the key itself is never stored. */
  keyHash: string;
  connectedAtMs: number;
  lastSeenAtMs: number;
  online: boolean;
}

/**
 * Whether an agent's row, as a decision reads it, still carries the key a call presented (its
 * hash; a call without one is any instance of the agent): a takeover keeps the agent's id (D26),
 * so a call of the instance it ended is told apart by its key alone.
 */
export const holdsKey = (agent: AgentRow | undefined, keyHash: string | undefined): agent is AgentRow =>
  agent !== undefined && (keyHash === undefined || agent.keyHash === keyHash);

export interface RuntimeRow {
  project: string;
  runtimeId: string;
  host?: string;
  registeredAtMs: number;
  heartbeatAtMs: number;
}

/**
 * Which lease: a project and a name, always as two values. No joined string stands for a
 * lease anywhere below the views (decision D44), so project `alpha/repo` and name `main` never
 * meet project `alpha` and name `repo/main`.
 */
export interface LeaseKey {
  project: string;
  name: string;
}

/**
 * A resource's lease row, keyed by (project, name). A released resource keeps its row with no
 * holder: its token is the floor the next grant goes above.
 */
export interface LeaseRow extends LeaseKey {
  holderAgentId: string | null;
  holderAgentName: string | null;
  fencingToken: number;
  acquiredAtMs: number;
  expiresAtMs: number;
  /**
   * The waiting call the queue handed this lease to (its waiter id), kept while the lease is
   * renewed; absent when a call took it itself. Kept in the store's row only, never shown (D64).
   */
  handedTo?: string;
  /**
   * The holder was written by a release that did not record hand-overs (before D64, or an older
   * hub sharing the database): any call of the holder may take the lease as handed to it.
   */
  handOverUnknown?: true;
}

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

/**
 * A run as its gapless prefix (sequences 1..cursor) describes it, for the operator views: the
 * last value of each field in the prefix.
 */
export interface SyncRunView {
  projectId: string;
  runId: string;
  homeRuntimeId: string;
  cursor: number;
  /** Events stored for the run, prefix or not. */
  stored: number;
  /** occurredAt of the prefix's last event. */
  updatedAt?: string;
  /** payload.status of the prefix's last run.* event that has one. */
  status?: string;
  workflowId?: string;
  displayTitle?: string;
}

/** What a project token may do; each scope allows what the ones after it allow. */
export type TokenScope = "agent" | "read" | "check";

/** A project token as stored: its secret only as a SHA-256 hash (hex). */
export interface ProjectTokenRow {
  /** `pt_` and 16 hex digits. */
  id: string;
  project: string;
  scope: TokenScope;
  label: string;
  hash: string;
  createdAtMs: number;
  expiresAtMs?: number;
  revokedAtMs?: number;
  /** The sweep has recorded its expiry (audit entry, change for open streams). */
  expiryNoted: boolean;
}

/** What the audit trail keeps: what happened, to which project ("" for the hub as a whole). */
export type AuditKind =
  | "token_created"
  | "token_revoked"
  | "token_expired"
  | "restore"
  | "fence_raised"
  | "sync_conflict"
  | "auth_refusals";

export interface AuditRecord {
  kind: AuditKind;
  /** The project it concerns; "" for the hub as a whole. */
  project: string;
  /** Facts for people and tools; never a secret. */
  detail: Record<string, unknown>;
}

export interface AuditRow extends AuditRecord {
  /** Numbered in the order the entries were stored. */
  seq: number;
  atMs: number;
}

/**
 * "Agent X's stream has a committed, durable event N." With the event as the store returned it
 * when this hub decided it: a live stream that is exactly one event behind takes it from here
 * instead of reading it back (peer/inbox-stream.ts). Without it when another hub on the same
 * database decided it (the store's inbox tail): the stream reads it from the store.
 */
export interface InboxNotice {
  agentId: string;
  seq: number;
  event?: InboxEvent;
}
