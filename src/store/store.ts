/**
 * The store interface: every method is one whole decision or one read, and every decision is
 * one transaction. Decisions take a pure `decide` function from the domain: the store reads the
 * current row inside its transaction, calls `decide`, writes what it returns and commits, so the
 * rule lives in the domain and the atomicity here. A `decide` that throws rolls everything back.
 * Nothing outside `store/` may assume SQLite.
 */

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
 * A resource's lease row. A released resource keeps its row with no holder: its token is the
 * floor the next grant goes above.
 */
export interface LeaseRow {
  resource: string;
  project: string;
  name: string;
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

/** What a decision writes (nothing when `write` is absent) and what it answers. */
export interface Decision<Row, T> {
  write?: Row;
  result: T;
}

export interface ListLeasesQuery {
  project: string;
  /** Only names sorting after this one (paging). */
  afterName?: string;
  limit: number;
  /** Include leases whose expiresAtMs <= nowMs. */
  includeExpired: boolean;
  nowMs: number;
}

export interface HubStore {
  /** "sqlite", or "memory" for an in-memory database. */
  readonly storage: "sqlite" | "memory";
  /** True when the store answers a trivial query. */
  ready(): Promise<boolean>;
  close(): Promise<void>;

  getAgent(id: string): Promise<AgentRow | undefined>;
  /** Agents of a project in registration order. */
  listAgents(project: string): Promise<AgentRow[]>;
  countOnlineAgents(): Promise<number>;
  /** Register/resume under (project, case-folded name); `decide` sees the agent holding the name. */
  decideRegistration<T>(
    project: string,
    nameKey: string,
    decide: (existing: AgentRow | undefined) => Decision<AgentRow, T>,
  ): Promise<T>;
  /** Any other change to one agent (activity, heartbeat, unregister). */
  decideAgent<T>(id: string, decide: (current: AgentRow | undefined) => Decision<AgentRow, T>): Promise<T>;
  /** Marks every agent offline (hub start). */
  markAllAgentsOffline(): Promise<void>;
  /** Marks offline every online agent last seen before `cutoffMs`; returns them as updated. */
  sweepStaleAgents(cutoffMs: number): Promise<AgentRow[]>;

  decideRuntime<T>(
    project: string,
    runtimeId: string,
    decide: (current: RuntimeRow | undefined) => Decision<RuntimeRow, T>,
  ): Promise<T>;
  listRuntimes(project: string): Promise<RuntimeRow[]>;

  /** One lease decision on one resource. */
  decideLease<T>(resource: string, decide: (current: LeaseRow | undefined) => Decision<LeaseRow, T>): Promise<T>;
  getLease(resource: string): Promise<LeaseRow | undefined>;
  /** Held leases of a project ordered by name (released floors are never listed). */
  listLeases(query: ListLeasesQuery): Promise<LeaseRow[]>;
  /**
   * Clears the holder of every lease that lapsed at or before `cutoffMs`, keeping the row and
   * its token as the resource's floor. Returns the leases as they were.
   */
  purgeLapsedLeases(cutoffMs: number): Promise<LeaseRow[]>;
}

/** The store refused to open; the hub does not start. */
export class StoreOpenError extends Error {
  constructor(
    readonly code:
      | "runtime_schema_outdated"
      | "runtime_schema_newer"
      | "runtime_schema_shape_invalid"
      | "runtime_path_invalid",
    message: string,
  ) {
    super(message);
    this.name = "StoreOpenError";
  }
}
