import type { Decision } from "./change-feed.js";
import type { AgentRow, LeaseKey, LeaseRow } from "../domain.js";

/**
 * The lease concern of the store: leases by (project, name), their fences and their queues of
 * waiters. Each backend implements it in one file (sqlite/leases.ts, postgres/leases.ts); the
 * lease domain takes this interface (with the change feed it watches).
 */

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
  /**
   * The hub that holds the call is gone (a replica killed or cut off from the database: its
   * liveness lock is free, D79): nobody will ever answer the call, so no lease goes to it.
   * Only the PostgreSQL store says so; a single hub's queue is cleared when it starts.
   */
  orphaned?: true;
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

export interface ListLeasesQuery {
  project: string;
  /** Only names sorting after this one (paging). */
  afterName?: string;
  limit: number;
  /** Include leases whose expiresAtMs <= nowMs. */
  includeExpired: boolean;
  nowMs: number;
}

export interface LeaseStore {
  /**
   * One lease decision on one (project, name), which sees the resource's waiters in queue order
   * and may change that queue. `decide` may only write that same key and never a lower fencing
   * token; either is a bug and rolls the decision back.
   */
  decideLease<T>(
    key: LeaseKey,
    decide: (current: LeaseRow | undefined, nowMs: number, waiters: LeaseWaiter[], holder: AgentRow | undefined, projectHasTokens: () => boolean) => LeaseDecision<T>,
    /**
     * The agent deciding (an acquire's would-be holder, a renew's or a release's holder): its row
     * is read in the same transaction (on a shared store, share-locked before the lease, in the
     * order an eviction locks them) and passed as `holder`, so a call authenticated just before
     * its agent was evicted or taken over sees the new key and is refused, instead of being
     * granted a lease under the id the new instance carries. `projectHasTokens` says, as the same transaction
     * reads it, whether the key's project has, or ever had, a managed token (caller.ts checkCaller).
     */
    holderId?: string,
  ): Promise<T>;
  /** Forgets every waiter (a single hub's start: the calls that waited are gone). */
  clearLeaseWaiters(): Promise<void>;
  /**
   * The leases whose queues hold calls of a hub that is gone (LeaseWaiter `orphaned`): what a
   * starting replica takes them out of (D79). None on SQLite, whose start clears every queue.
   */
  orphanedQueues(): Promise<LeaseKey[]>;
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
}
