import type Database from "better-sqlite3";
import { changesOf } from "../change-feed.js";
import type { LeaseDecision, LeaseStore, LeaseWaiter, ListLeasesQuery, NamedWaiter } from "../lease-store.js";
import { checkLeaseWrite, floorRow, leaseFromDb, leaseToDb, namedWaiterFromDb, waiterFromDb, type LeaseDb, type WaiterDb } from "../rows.js";
import type { RecordChange, StoreAccess } from "./batch.js";
import type { AgentRow, LeaseKey, LeaseRow } from "../../domain.js";

/**
 * The lease concern of the SQLite store. A decision reads the row (or the resource's floor), its
 * queue and the would-be holder, decides, and writes row, queue and changes in one savepoint of
 * a batch. `apply` and `heldBy` serve the agent decisions that end an instance (agents.ts).
 *
 * A decision on a lease decided before reads nothing: `known` holds the rows as the decisions
 * so far left them, the running batch's own writes included, and `queued` the resources whose
 * queue may hold a waiter (any other's is empty), so the lease path's three reads (row, queue,
 * holder) cost a map lookup each (bench/steps.md, fourteenth step). Both are exact because only
 * this store writes the file, and every statement here that writes a row or a queue keeps them:
 * `apply` puts the row it wrote, a queue's insert adds its key, a purge empties `known`. A work
 * or a batch rolled back leaves the file as it was before it, so the store calls `forget`, and
 * both are read again from the file. `holderOf` gives the would-be holder's row as the running
 * batch sees it (agents.ts `current`).
 */
export function createSqliteLeases(
  db: Database.Database,
  { tx, changeTx, read, now, head }: StoreAccess,
  holderOf: (id: string) => AgentRow | undefined,
  /** Whether a project has managed tokens, inside a decision (tokens.ts hasTokensInDecision). */
  projectHasTokens: (project: string) => boolean,
) {
  const q = {
    lease: db.prepare<[string, string], LeaseDb>("SELECT * FROM leases WHERE project = ? AND name = ?"),
    fenceBase: db.prepare<[], { floor: number }>("SELECT coalesce(max(floor), 0) AS floor FROM fence_base"),
    upsertLease: db.prepare(
      `INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at, handed_to, handed_token)
       VALUES (@project, @name, @holder_agent_id, @holder_agent_name, @fencing_token, @acquired_at, @expires_at, @handed_to, @handed_token)
       ON CONFLICT (project, name) DO UPDATE SET holder_agent_id = excluded.holder_agent_id,
         holder_agent_name = excluded.holder_agent_name, fencing_token = excluded.fencing_token,
         acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, handed_to = excluded.handed_to,
         handed_token = excluded.handed_token`,
    ),
    // A decision on a row it read updates that row in place: no insert tried first.
    updateLease: db.prepare<[string | null, string | null, number, number, number, string | null, number | null, string, string]>(
      `UPDATE leases SET holder_agent_id = ?, holder_agent_name = ?, fencing_token = ?, acquired_at = ?, expires_at = ?, handed_to = ?,
         handed_token = ? WHERE project = ? AND name = ?`,
    ),
    listLeases: db.prepare<[string, string, number, number, number], LeaseDb>(
      `SELECT * FROM leases WHERE project = ? AND name > ? AND holder_agent_id IS NOT NULL
         AND (? = 1 OR expires_at > ?) ORDER BY name LIMIT ?`,
    ),
    lapsedLeases: db.prepare<[number], LeaseDb>("SELECT * FROM leases WHERE holder_agent_id IS NOT NULL AND expires_at <= ?"),
    purgeLeases: db.prepare(
      `UPDATE leases SET holder_agent_id = NULL, holder_agent_name = NULL
       WHERE holder_agent_id IS NOT NULL AND expires_at <= ?`,
    ),
    liveLeases: db.prepare<[string, number], LeaseDb>(
      "SELECT * FROM leases WHERE project = ? AND holder_agent_id IS NOT NULL AND expires_at > ? ORDER BY name",
    ),
    // No ORDER BY: with it, SQLite re-plans the statement at every binding (about 7 us each on
    // the lease path; bench/steps.md), so the queue is sorted below.
    waiters: db.prepare<[string, string], WaiterDb>("SELECT * FROM lease_waiters WHERE project = ? AND name = ?"),
    removeWaiter: db.prepare("DELETE FROM lease_waiters WHERE project = ? AND name = ? AND id = ?"),
    addWaiter: db.prepare(
      `INSERT INTO lease_waiters (project, name, seq, id, agent_id, agent_name, ttl_ms, deadline_ms, since_ms)
       SELECT @project, @name, coalesce(max(seq), 0) + 1, @id, @agent_id, @agent_name, @ttl_ms, @deadline_ms, @since_ms
       FROM lease_waiters WHERE project = @project AND name = @name`,
    ),
    clearWaiters: db.prepare("DELETE FROM lease_waiters"),
    queuedKeys: db.prepare<[], { project: string; name: string }>("SELECT DISTINCT project, name FROM lease_waiters"),
    waitersOfProject: db.prepare<[string], WaiterDb & { name: string }>("SELECT * FROM lease_waiters WHERE project = ? ORDER BY name, seq"),
    leasesOfAgent: db.prepare<{ project: string; agent: string }, LeaseDb>(
      `SELECT * FROM leases WHERE project = @project AND (holder_agent_id = @agent
         OR name IN (SELECT name FROM lease_waiters WHERE project = @project AND agent_id = @agent)) ORDER BY name`,
    ),
  };

  /** The floor row of a resource that has none, or undefined while the fence base is 0. */
  function floorOf(key: LeaseKey): LeaseDb | undefined {
    const base = q.fenceBase.get()!.floor;
    return base > 0 ? floorRow(key, base) : undefined;
  }

  const keyOf = (project: string, name: string) => `${project}\0${name}`;
  const known = new Map<string, LeaseDb>();
  const knownMax = 65_536;
  const queued = new Set<string>();
  /** Past this many keys, `queued` is listed again from the file (keys of emptied queues go). */
  let queuedMax = 65_536;
  /** The file's queues could not be listed: every decision reads its own. */
  let queuesUnknown = false;
  const listQueues = () => {
    queued.clear();
    queuesUnknown = true;
    try {
      for (const k of q.queuedKeys.all()) queued.add(keyOf(k.project, k.name));
      queuesUnknown = false;
    } catch {
      // A read that fails here (an I/O error after a rollback) leaves every queue to be read.
    }
    queuedMax = Math.max(65_536, 2 * queued.size);
  };
  /** Forgets what the file may no longer hold (a rollback): rows are read again, queues listed again. */
  const forget = () => {
    known.clear();
    listQueues();
  };
  forget();
  const know = (key: string, row: LeaseDb) => {
    if (known.size >= knownMax) known.clear();
    known.set(key, row);
  };
  /** The stored row of `key`, as the decisions so far left it. */
  const rowOf = (project: string, name: string): LeaseDb | undefined => {
    const key = keyOf(project, name);
    const hit = known.get(key);
    if (hit) return hit;
    const row = q.lease.get(project, name);
    if (row) know(key, row);
    return row;
  };
  const waitersOf = (project: string, name: string): LeaseWaiter[] => {
    const key = keyOf(project, name);
    if (!queuesUnknown && !queued.has(key)) return [];
    const rows = q.waiters.all(project, name);
    if (rows.length === 0) queued.delete(key);
    return (rows.length > 1 ? rows.sort((a, b) => a.seq - b.seq) : rows).map(waiterFromDb);
  };

  /**
   * What a lease decision on `key` decided, checked (checkLeaseWrite) and made ready to write:
   * the row, and each change with its JSON. Nothing here writes, and nothing after it throws
   * but a failing statement: a plain work (batch.ts) needs every check before its first write.
   */
  function prepared(key: LeaseKey, r: LeaseDb | undefined, d: LeaseDecision<unknown>) {
    checkLeaseWrite(key, r, d.write);
    return {
      row: d.write && leaseToDb(d.write),
      changes: changesOf(d).map((c) => ({ stream: c.stream, body: c.body, text: JSON.stringify(c.body) })),
    };
  }

  /**
   * Writes a prepared decision on `key` (`stored`: its row is in the file), inside the caller's
   * transaction. `waiting`: how many waiters the decision was shown, when it was shown the whole
   * queue; a decision that empties it takes its key out of `queued`.
   */
  function write(
    key: LeaseKey,
    d: LeaseDecision<unknown>,
    ready: ReturnType<typeof prepared>,
    stored: boolean,
    record: RecordChange,
    nowMs: number,
    waiting?: number,
  ): void {
    let removed = 0;
    for (const id of d.queue?.remove ?? []) removed += q.removeWaiter.run(key.project, key.name, id).changes;
    const add = d.queue?.add;
    if (add) {
      if (queued.size >= queuedMax) listQueues();
      queued.add(keyOf(key.project, key.name));
    } else if (waiting !== undefined && removed > 0 && waiting - removed === 0) {
      queued.delete(keyOf(key.project, key.name));
    }
    if (add) q.addWaiter.run({ project: key.project, name: key.name, id: add.id, agent_id: add.agentId, agent_name: add.agentName, ttl_ms: add.ttlMs, deadline_ms: add.deadlineMs, since_ms: add.sinceMs });
    const row = ready.row;
    if (row) {
      if (stored) q.updateLease.run(row.holder_agent_id, row.holder_agent_name, row.fencing_token, row.acquired_at, row.expires_at, row.handed_to, row.handed_token, row.project, row.name);
      else q.upsertLease.run(row);
      know(keyOf(key.project, key.name), row);
    }
    for (const c of ready.changes) record(key.project, c.stream, c.body, nowMs, c.text);
  }

  /**
   * Writes what a lease decision on `key` decided (its row `r` as read: `stored` when it is the
   * stored row, not the fence base's floor), inside the caller's transaction.
   */
  function apply(key: LeaseKey, r: LeaseDb | undefined, d: LeaseDecision<unknown>, record: RecordChange, nowMs: number, stored = r !== undefined): void {
    write(key, d, prepared(key, r, d), stored, record, nowMs);
  }

  const store: LeaseStore = {
    decideLease(key, decide, holderId) {
      return changeTx((record) => {
        // A resource without a row stands on the store's fence base (0 until a restore raised it):
        // the rules see it as a released floor, so its first grant is base + 1 (decision D45).
        const row = rowOf(key.project, key.name);
        const r = row ?? floorOf(key);
        const nowMs = now();
        const h = holderId === undefined ? undefined : holderOf(holderId);
        const waiters = waitersOf(key.project, key.name);
        const d = decide(r && leaseFromDb(r), nowMs, waiters, h, () => projectHasTokens(key.project));
        // A plain work: every check (the result's too) before the first write.
        const result = d.result;
        write(key, d, prepared(key, r, d), row !== undefined, record, nowMs, waiters.length);
        return result;
      }, true);
    },

    leaseWaiters(project: string, name?: string): Promise<NamedWaiter[]> {
      return read(() =>
        name === undefined
          ? q.waitersOfProject.all(project).map(namedWaiterFromDb)
          : q.waiters.all(project, name).map((w) => ({ ...waiterFromDb(w), name })),
      );
    },

    async clearLeaseWaiters(): Promise<void> {
      await tx(() => {
        q.clearWaiters.run();
        queued.clear();
      });
    },

    // One hub: its queues are cleared when it starts, and every call in them is its own.
    orphanedQueues: () => Promise.resolve([]),

    getLease(key: LeaseKey): Promise<LeaseRow | undefined> {
      return read(() => {
        const r = q.lease.get(key.project, key.name);
        return r && leaseFromDb(r);
      });
    },

    listLeases(query: ListLeasesQuery): Promise<LeaseRow[]> {
      return read(() =>
        q.listLeases.all(query.project, query.afterName ?? "", query.includeExpired ? 1 : 0, query.nowMs, query.limit).map(leaseFromDb),
      );
    },

    purgeLapsedLeases(afterMs: number): Promise<LeaseRow[]> {
      return tx(() => {
        const cutoffMs = now() - afterMs;
        const before = q.lapsedLeases.all(cutoffMs);
        q.purgeLeases.run(cutoffMs);
        known.clear();
        return before.map(leaseFromDb);
      });
    },

    leaseSnapshot(project: string, nowMs: number) {
      return read(() => ({
        leases: q.liveLeases.all(project, nowMs).map(leaseFromDb),
        waiters: q.waitersOfProject.all(project).map(namedWaiterFromDb),
        head: head(project, "leases"),
      }));
    },
  };

  return {
    store,
    apply,
    waitersOf,
    forget,
    /** How many lease rows and queue keys are kept in memory (tests). */
    kept: () => ({ rows: known.size, queues: queued.size }),
    /** The leases an agent of `project` holds or waits for, by name, inside the caller's decision. */
    heldBy: (project: string, agentId: string): LeaseDb[] => q.leasesOfAgent.all({ project, agent: agentId }),
  };
}
