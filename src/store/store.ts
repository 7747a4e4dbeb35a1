/**
 * The store interface: every method is one whole decision or one read, and every decision is
 * atomic. Decisions take a pure `decide` function from the domain: the store reads the current
 * row inside its transaction, calls `decide`, writes what it returns, so the rule lives in the
 * domain and the atomicity here. A `decide` that throws undoes everything that decision wrote.
 * The promise of a decision (or a read) resolves only once what it answers is durable; how the
 * store gets there (group commit: several decisions per transaction) is invisible above it.
 * Nothing outside `store/` may assume SQLite. The methods are grouped by concern, one narrow
 * interface each (agent-store.ts, lease-store.ts, message-store.ts, sync-store.ts,
 * change-feed.ts, token-store.ts), and every backend implements each in a file of its own.
 */

import type { AgentStore } from "./agent-store.js";
import type { ChangeFeed } from "./change-feed.js";
import type { LeaseStore } from "./lease-store.js";
import type { MessageStore } from "./message-store.js";
import type { SyncStore } from "./sync-store.js";
import type { TokenStore } from "./token-store.js";

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
 * The whole store: its lifecycle, and one member per concern, each a narrow interface that its
 * domain takes alone. Every `decide*` callback gets `nowMs`, the time of the decision, read when
 * the decision runs (after its rows are locked): the hub's clock on SQLite; on a store several
 * hubs share, the database's clock, so hubs with skewed clocks agree on expiry (tests inject
 * theirs instead).
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
  /** Every project with agents, live leases, runtimes or runs, by name, with its counts. */
  listProjects(nowMs: number): Promise<ProjectCounts[]>;

  /** Agents, their instances' leases as one decision, and runtimes (agent-store.ts). */
  readonly agents: AgentStore;
  /** Leases and their queues (lease-store.ts). */
  readonly leases: LeaseStore;
  /** Peer messages and inbox streams (message-store.ts). */
  readonly messages: MessageStore;
  /** Run facts and cursors (sync-store.ts). */
  readonly sync: SyncStore;
  /** The changes decisions record for watchers (change-feed.ts). */
  readonly changes: ChangeFeed;
  /** Project tokens and the audit trail (token-store.ts). */
  readonly tokens: TokenStore;
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
 * - `runtime_store_unreachable`: the PostgreSQL database cannot be reached or logged into;
 * - `runtime_driver_unavailable`: the SQLite driver's native module does not load in this Node.
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
      | "runtime_store_unreachable"
      | "runtime_driver_unavailable",
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
