/**
 * The store interface: every method is one whole decision or one read, and every decision is
 * atomic. Decisions take a pure `decide` function from the domain: the store reads the current
 * row inside its transaction, calls `decide`, writes what it returns, so the rule lives in the
 * domain and the atomicity here. A `decide` that throws undoes everything that decision wrote.
 * The promise of a decision (or a read) resolves only once what it answers is durable; how the
 * store gets there (group commit: several decisions per transaction) is invisible above it.
 * Nothing outside `store/` may assume SQLite.
 */

import type { TokenStore } from "./token-store.js";

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
 * Which lease: a project and a name, always as two values. No joined string stands for a
 * lease anywhere below the views (README §5.1), so project `alpha/repo` and name `main` never
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
}

export interface RuntimeRow {
  project: string;
  runtimeId: string;
  host?: string;
  registeredAtMs: number;
  heartbeatAtMs: number;
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

/** A run fact as stored: its key, who pushed it, its hash, its canonical JSON and the fields views need. */
export interface SyncEventRow {
  projectId: string;
  runId: string;
  sequence: number;
  hubProject: string;
  homeRuntimeId: string;
  eventType: string;
  contentHash: string;
  receivedAtMs: number;
  occurredAt: string;
  /** payload.status of a run.* event. */
  runStatus?: string;
  workflowId?: string;
  displayTitle?: string;
  /** The canonical JSON text the hash covers. */
  record: string;
}

/** What the hub already holds that bears on storing one event. */
export interface IngestContext {
  /** The stored event under the same key. */
  existing?: { contentHash: string; hubProject: string };
  /** The hub project owning the event's projectId. */
  owner?: string;
  /** The run's home runtime. */
  home?: string;
}

export type IngestOutcome =
  | { outcome: "accepted" }
  | { outcome: "duplicate" }
  | { outcome: "conflict"; reason: "sequence_reused" | "project_mismatch" | "home_runtime_mismatch"; existingHash?: string };

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

/** The changes a push records for watchers of its hub project (WatchRuns), made by the domain. */
export interface SyncChanges {
  /** A run whose events the push stored, as it stands after the push. */
  run(view: SyncRunView): ChangeRecord;
  /** An event the push refused as a conflict. */
  conflict(event: SyncEventRow, outcome: Extract<IngestOutcome, { outcome: "conflict" }>): ChangeRecord;
}

/**
 * Which watchable history of a project a change belongs to (WatchPresence, WatchLeases,
 * WatchOpenMessages, WatchRuns), or `tokens`: the project's tokens revoked or expired, which the
 * streams opened with them follow (no RPC watches it).
 */
export type ChangeStream = "presence" | "leases" | "messages" | "runs" | "tokens";

/**
 * One stored change of a project's presence or leases. Each (project, stream) numbers its
 * changes from its base without gaps, in commit order on every hub: a watcher resumes after any
 * number it holds, on any hub, and a read that does not continue at that number + 1 tells it the
 * change it needs was purged. `body` is the domain's (JSON), as the decision stored it.
 */
export interface StreamChange {
  project: string;
  stream: ChangeStream;
  seq: number;
  atMs: number;
  body: unknown;
}

/** The changes after a cursor and the stream's newest number, read together. */
export interface ChangeRead {
  changes: StreamChange[];
  /** Number of the newest change (the stream's base when it has none). */
  head: number;
}

/**
 * What a decision writes (nothing when `write` is absent), the change it records for watchers
 * (in the same transaction, on the decision's own project), and what it answers.
 */
export interface Decision<Row, T> {
  write?: Row;
  /** One change, or several in order (a release that hands the lease to a waiter records both). */
  change?: ChangeRecord | ChangeRecord[];
  result: T;
}

export interface ChangeRecord {
  stream: ChangeStream;
  body: unknown;
}

/** A call waiting for a held lease (AcquireLease with waitMs), in the resource's queue. */
export interface LeaseWaiter {
  /** The waiting call's own id. */
  id: string;
  agentId: string;
  agentName: string;
  /** The TTL the lease is granted with when it comes to this waiter. */
  ttlMs: number;
  /** When the wait runs out: from then on the waiter is passed over. */
  deadlineMs: number;
  /** When it joined the queue. */
  sinceMs: number;
}

/** A waiter with the name of the lease it waits for. */
export interface NamedWaiter extends LeaseWaiter {
  name: string;
}

/** A lease decision may also change the resource's queue of waiters. */
export interface LeaseDecision<T> extends Decision<LeaseRow, T> {
  queue?: { add?: LeaseWaiter; remove?: string[] };
}

/**
 * A lease an agent holds (lapsed or not) or waits for, with its resource's queue: what ending an
 * agent's instance decides on.
 */
export interface HeldResource {
  lease: LeaseRow;
  waiters: LeaseWaiter[];
}

/**
 * A decision on an agent and every lease it holds, in one transaction (an eviction, a takeover
 * at registration): the agent's row, and one lease decision per resource it was shown.
 */
export interface AgentLeasesDecision<T> extends Decision<AgentRow, T> {
  /** Each on a lease it was shown (checked), with its queue changes and its changes for watchers. */
  leases?: { key: LeaseKey; decision: LeaseDecision<unknown> }[];
}

/** A sweep's change for each row it updates, made from the row and the sweep's time. */
export type ChangeOf<Row> = (row: Row, nowMs: number) => ChangeRecord;

/** A decision's changes as a list. */
export const changesOf = (d: { change?: ChangeRecord | ChangeRecord[] }): ChangeRecord[] =>
  d.change === undefined ? [] : Array.isArray(d.change) ? d.change : [d.change];

export interface ListLeasesQuery {
  project: string;
  /** Only names sorting after this one (paging). */
  afterName?: string;
  limit: number;
  /** Include leases whose expiresAtMs <= nowMs. */
  includeExpired: boolean;
  nowMs: number;
}

/** What the store holds of one project (ListProjects). */
export interface ProjectCounts {
  project: string;
  agents: number;
  onlineAgents: number;
  /** Leases held and not lapsed at the query's nowMs. */
  heldLeases: number;
  /** Messages queued or delivered. */
  openMessages: number;
}

/** What group commit has done since the store opened (metrics). */
export interface CommitStats {
  /** Transactions committed, each holding one or more decisions. */
  commits: number;
  /** Decisions in them (refusals included). */
  works: number;
}

/** What a store reads the time of a decision from (the hub clock, injected in tests). */
export interface StoreClock {
  now(): number;
}

/**
 * Every `decide*` callback gets `nowMs`, the time of the decision, read when the decision runs
 * (after its rows are locked): the hub's clock on SQLite; on a store several hubs share, the
 * database's clock, so hubs with skewed clocks agree on expiry (tests inject theirs instead).
 */
export interface HubStore {
  /** "sqlite", "memory" for an in-memory SQLite database, or "postgres". */
  readonly storage: "sqlite" | "memory" | "postgres";
  /**
   * On a store with a clock of its own (PostgreSQL's): its time now, as this process knows it
   * (the last reading, advanced by the time elapsed here). The hub's clock reads it (clock.ts,
   * clockWithTime). Absent: decisions are made on the hub's clock.
   */
  now?(): number;
  /** True when the store answers a trivial query (false once a commit could not be made durable). */
  ready(): Promise<boolean>;
  /** Commits what is queued, then closes. */
  close(): Promise<void>;
  commitStats(): Readonly<CommitStats>;
  /** Project tokens and the audit trail (token-store.ts). */
  readonly tokens: TokenStore;

  getAgent(id: string): Promise<AgentRow | undefined>;
  /**
   * The agent as the latest commit left it, without waiting for that commit to be durable: for
   * authentication only, whose success is never an answer by itself (the call's own decision or
   * read comes after it, and waits). A refusal must come from getAgent.
   */
  peekAgent(id: string): Promise<AgentRow | undefined>;
  /** Agents of a project in registration order. */
  listAgents(project: string): Promise<AgentRow[]>;
  countOnlineAgents(): Promise<number>;
  /** Every project with agents, live leases, runtimes or runs, by name, with its counts. */
  listProjects(nowMs: number): Promise<ProjectCounts[]>;
  /** Register/resume under (project, case-folded name); `decide` sees the agent holding the name. */
  decideRegistration<T>(
    project: string,
    nameKey: string,
    decide: (existing: AgentRow | undefined, nowMs: number) => Decision<AgentRow, T>,
  ): Promise<T>;
  /**
   * One decision on an agent, found by id or by (project, case-folded name), and on every lease
   * naming it as holder or in its queue (each with its queue), all in one transaction: nobody can
   * renew, be granted or queue behind those leases in between.
   */
  decideAgentLeases<T>(
    find: { agentId: string } | { project: string; nameKey: string },
    decide: (agent: AgentRow | undefined, held: HeldResource[], nowMs: number) => AgentLeasesDecision<T>,
  ): Promise<T>;
  /**
   * Deletes every agent offline and last seen `retainMs` or more before the store's time that no
   * open message (to or from it) and no live lease names, with its stream. Returns them.
   */
  forgetAgents(retainMs: number): Promise<AgentRow[]>;
  /** Any other change to one agent (activity, heartbeat, unregister). */
  decideAgent<T>(id: string, decide: (current: AgentRow | undefined, nowMs: number) => Decision<AgentRow, T>): Promise<T>;
  /** Marks every online agent offline (hub start), recording `change` for each. */
  markAllAgentsOffline(change: ChangeOf<AgentRow>): Promise<void>;
  /**
   * Marks offline every online agent last seen more than `staleAfterMs` before the sweep's time
   * (the store's, as for decisions), recording `change` for each; returns them as updated.
   */
  sweepStaleAgents(staleAfterMs: number, change: ChangeOf<AgentRow>): Promise<AgentRow[]>;

  decideRuntime<T>(
    project: string,
    runtimeId: string,
    decide: (current: RuntimeRow | undefined, nowMs: number) => Decision<RuntimeRow, T>,
  ): Promise<T>;
  listRuntimes(project: string): Promise<RuntimeRow[]>;
  /**
   * Runtimes whose last heartbeat is more than `staleAfterMs` before the sweep's time and whose
   * expiry is not recorded yet: records `change` for each, once per lapse (a heartbeat after it
   * makes the next lapse count again). Returns them.
   */
  sweepExpiredRuntimes(staleAfterMs: number, change: ChangeOf<RuntimeRow>): Promise<RuntimeRow[]>;

  /**
   * One lease decision on one (project, name), which sees the resource's waiters in queue order
   * and may change that queue. `decide` may only write that same key and never a lower fencing
   * token; either is a bug and rolls the decision back.
   */
  decideLease<T>(
    key: LeaseKey,
    decide: (current: LeaseRow | undefined, nowMs: number, waiters: LeaseWaiter[], holder: AgentRow | undefined) => LeaseDecision<T>,
    /**
     * The agent the decision may make holder (an acquire): its row is read in the same
     * transaction (on a shared store, share-locked before the lease, in the order an eviction
     * locks them) and passed as `holder`, so a call authenticated just before its agent was
     * evicted or taken over sees the new key and is refused, instead of being granted a lease
     * under the id the new instance carries.
     */
    holderId?: string,
  ): Promise<T>;
  /** Forgets every waiter (a single hub's start: the calls that waited are gone). */
  clearLeaseWaiters(): Promise<void>;
  getLease(key: LeaseKey): Promise<LeaseRow | undefined>;
  /** Held leases of a project ordered by name (released floors are never listed). */
  listLeases(query: ListLeasesQuery): Promise<LeaseRow[]>;
  /**
   * Clears the holder of every lease that lapsed `afterMs` or more before the sweep's time,
   * keeping the row and its token as the resource's floor. Returns the leases as they were.
   */
  purgeLapsedLeases(afterMs: number): Promise<LeaseRow[]>;
  /** The waiters of a project's leases (of lease `name` only, when given), by lease name, first in line first. */
  leaseWaiters(project: string, name?: string): Promise<NamedWaiter[]>;
  /** The live leases of a project (expiresAtMs > nowMs) by name, their waiters, and the head of its lease changes they reflect. */
  leaseSnapshot(project: string, nowMs: number): Promise<{ leases: LeaseRow[]; waiters: NamedWaiter[]; head: number }>;
  /** The agents and runtimes of a project, and the head of its presence changes they reflect. */
  presenceSnapshot(project: string): Promise<{ agents: AgentRow[]; runtimes: RuntimeRow[]; head: number }>;
  /** The newest `limit` open messages of a project, how many it has, and the head of its message changes they reflect. */
  openMessagesSnapshot(project: string, limit: number): Promise<{ messages: MessageRow[]; total: number; head: number }>;
  /** The runs and runtimes of a project, and the head of its run changes they reflect. */
  runsSnapshot(project: string): Promise<{ runs: SyncRunView[]; runtimes: RuntimeRow[]; head: number }>;

  /** Up to `limit` changes of a stream after `afterSeq`, oldest first, and its head. */
  readChanges(project: string, stream: ChangeStream, afterSeq: number, limit: number): Promise<ChangeRead>;
  /**
   * Calls `onChange` for each change committed from now on, this hub's own as soon as they are
   * durable and, on a store several hubs share, the others' as this hub learns of them: each
   * stream's in order, but a stream's changes from two hubs may come out of order or late (a
   * watcher reads the store for a gap). Until the returned function is called.
   */
  tailChanges(onChange: (change: StreamChange) => void): () => void;
  /**
   * Deletes each stream's changes made more than `retainMs` before the sweep's time, and all but
   * its last `keep`; what stays of a stream is always its newest changes. Returns how many.
   */
  purgeChanges(retainMs: number, keep: number): Promise<number>;

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

  /**
   * Stores a batch of run facts in one transaction, deciding each in order (later events see
   * what earlier ones stored), and records a change for each conflict and for each run it stored
   * events of (all of one hub project). Returns one outcome per event and the cursor of every
   * run with an accepted or duplicate event.
   */
  pushSyncEvents(
    events: SyncEventRow[],
    decide: (event: SyncEventRow, ctx: IngestContext) => IngestOutcome,
    changes: SyncChanges,
  ): Promise<{ outcomes: IngestOutcome[]; cursors: { projectId: string; runId: string; cursor: number }[] }>;
  /** A run's cursor as seen by a hub project (0 when it has none of the run). */
  getSyncCursor(hubProject: string, projectId: string, runId: string): Promise<number>;
  /** Every run of a hub project, as its gapless prefix describes it. */
  listSyncRuns(hubProject: string): Promise<SyncRunView[]>;
}

/**
 * The database a store shares with other hubs cannot be reached (connection refused or lost, the
 * server shutting down or starting). Nothing of the call is answered or applied; a retry, later
 * or on another hub, is safe.
 */
export class StoreUnavailable extends Error {
  constructor(message: string, options?: { cause: unknown }) {
    super(message, options);
    this.name = "StoreUnavailable";
  }
}

/**
 * The store refused to open (the hub does not start) or to be restored into:
 * - `runtime_schema_outdated` / `runtime_schema_newer`: a schema this release cannot use;
 * - `runtime_schema_shape_invalid`: tables or keys are not the ones its version must have;
 * - `runtime_store_invalid`: the file is not a SQLite database (or a damaged one);
 * - `runtime_path_invalid`: the path (or its directory) cannot be opened or created;
 * - `runtime_store_locked`: another hub process holds the file (one process per data file);
 * - `runtime_store_unreachable`: the PostgreSQL database cannot be reached or logged into.
 */
export class StoreOpenError extends Error {
  constructor(
    readonly code:
      | "runtime_schema_outdated"
      | "runtime_schema_newer"
      | "runtime_schema_shape_invalid"
      | "runtime_store_invalid"
      | "runtime_path_invalid"
      | "runtime_store_locked"
      | "runtime_store_unreachable",
    message: string,
  ) {
    super(message);
    this.name = "StoreOpenError";
  }
}

/**
 * A backup the store will not write or restore: `backup_exists` (the output file or its
 * manifest is already there; nothing is overwritten), `backup_corrupt` (the manifest is missing
 * or unreadable, or the file does not match its sha256).
 */
export class BackupError extends Error {
  constructor(
    readonly code: "backup_exists" | "backup_corrupt",
    message: string,
  ) {
    super(message);
    this.name = "BackupError";
  }
}
