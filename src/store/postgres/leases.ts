import { changesOf } from "../change-feed.js";
import type { LeaseDecision, LeaseStore, LeaseWaiter, ListLeasesQuery, NamedWaiter } from "../lease-store.js";
import { agentFromDb, floorRow, leaseFromDb, namedWaiterFromDb, waiterFromDb, type AgentDb, type LeaseDb, type WaiterDb } from "../rows.js";
import { agentColumns } from "./rows.js";
import type { PgAccess, PgRecordChange, PgTx } from "./transaction.js";
import type { LeaseKey, LeaseRow } from "../../domain.js";

/**
 * What a lease decision is shown, in one statement, locked in this order:
 * - the would-be holder (when there is one), share-locked: an eviction (agent, then its leases,
 *   both locked for update) is either committed before this reads it, or waits for this decision;
 * - the lease row, locked until the decision commits (decisions on one resource from every
 *   replica take turns; a resource without a row stands on the fence base, 0 until a restore
 *   raised it);
 * - its queue. The statement's snapshot is taken after the decision's transaction locked the
 *   project's heads, and every transaction that changes a project's queues holds those heads
 *   (changes.ts lockHeads), so the queue it reads is the latest.
 */
const decisionRows = `WITH l AS (SELECT * FROM leases WHERE project = $1 AND name = $2 FOR UPDATE)
  SELECT (SELECT to_json(a) FROM (SELECT ${agentColumns} FROM agents WHERE id = $3 FOR SHARE) a) AS agent,
    (SELECT to_json(l) FROM l) AS lease,
    (SELECT coalesce(json_agg(w ORDER BY w.seq), '[]') FROM lease_waiters w WHERE w.project = $1 AND w.name = $2) AS waiters`;

/**
 * The lease concern of the PostgreSQL store, the same decisions as on SQLite (sqlite/leases.ts).
 * A decision locks the would-be holder (shared), then the lease row, until it commits: decisions
 * on one resource from every replica take turns. `apply` and `waitersOf` serve the agent
 * decisions that end an instance (agents.ts).
 */
export function createPostgresLeases({ tx, changeTx, rows, now, snapshot, head }: PgAccess) {
  async function waitersOf(t: PgTx, key: LeaseKey): Promise<LeaseWaiter[]> {
    return (await t.query<WaiterDb>("SELECT * FROM lease_waiters WHERE project = $1 AND name = $2 ORDER BY seq", [key.project, key.name])).rows.map(waiterFromDb);
  }

  /**
   * Writes what a lease decision on `key` decided, inside the caller's transaction: `row` is the
   * locked row (absent: none yet), `current` what the decision was shown (a floor row for none).
   */
  async function apply(t: PgTx, key: LeaseKey, row: LeaseDb | undefined, current: LeaseDb | undefined, d: LeaseDecision<unknown>, record: PgRecordChange, nowMs: number): Promise<void> {
    for (const id of d.queue?.remove ?? []) {
      await t.query("DELETE FROM lease_waiters WHERE project = $1 AND name = $2 AND id = $3", [key.project, key.name, id]);
    }
    const add = d.queue?.add;
    if (add) {
      if (!row) throw new Error(`a waiter for ${JSON.stringify(key)} is queued behind no lease`);
      await t.query(
        `INSERT INTO lease_waiters (project, name, seq, id, agent_id, agent_name, ttl_ms, deadline_ms, since_ms)
         SELECT $1, $2, coalesce(max(seq), 0) + 1, $3, $4, $5, $6, $7, $8 FROM lease_waiters WHERE project = $1 AND name = $2`,
        [key.project, key.name, add.id, add.agentId, add.agentName, add.ttlMs, add.deadlineMs, add.sinceMs],
      );
    }
    if (d.write) {
      // A decision writes the row it was shown, never another key: that is the isolation.
      if (d.write.project !== key.project || d.write.name !== key.name) {
        throw new Error(`a lease decision on ${JSON.stringify(key)} tried to write another lease`);
      }
      if (current && d.write.fencingToken < current.fencing_token) {
        // The fence only grows; a decision that would lower it is a bug, never a write.
        throw new Error(`fencing token for ${JSON.stringify(key)} would go down from ${current.fencing_token}`);
      }
      const values = [
        d.write.project,
        d.write.name,
        d.write.holderAgentId,
        d.write.holderAgentName,
        d.write.fencingToken,
        d.write.acquiredAtMs,
        d.write.expiresAtMs,
      ];
      // A new row is a plain INSERT: if another replica inserted it meanwhile, this one waits
      // for it and fails with unique_violation, and the decision runs again on its row.
      await t.query(
        row
          ? `UPDATE leases SET holder_agent_id = $3, holder_agent_name = $4, fencing_token = $5, acquired_at = $6, expires_at = $7
             WHERE project = $1 AND name = $2`
          : `INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)`,
        values,
      );
    }
    for (const c of changesOf(d)) await record(key.project, c.stream, c.body, nowMs);
  }

  const store: LeaseStore = {
    decideLease(key, decide, holderId) {
      return changeTx(key.project, async (t, record) => {
        const { agent, lease: row, waiters: queued } = (
          await t.query<{ agent: AgentDb | null; lease: LeaseDb | null; waiters: WaiterDb[] }>(decisionRows, [key.project, key.name, holderId ?? null])
        ).rows[0]!;
        let current = row ?? undefined;
        if (!current) {
          const base = (await t.query<{ floor: number }>("SELECT floor FROM fence_base WHERE id = 1")).rows[0]?.floor ?? 0;
          if (base > 0) current = floorRow(key, base);
        }
        const nowMs = await now(t);
        const waiters = row ? queued.map(waiterFromDb) : [];
        const d = decide(current && leaseFromDb(current), nowMs, waiters, agent ? agentFromDb(agent) : undefined);
        await apply(t, key, row ?? undefined, current, d, record, nowMs);
        return d.result;
      });
    },

    async leaseWaiters(project: string, name?: string): Promise<NamedWaiter[]> {
      const found =
        name === undefined
          ? await rows<WaiterDb & { name: string }>("SELECT * FROM lease_waiters WHERE project = $1 ORDER BY name, seq", [project])
          : await rows<WaiterDb & { name: string }>("SELECT * FROM lease_waiters WHERE project = $1 AND name = $2 ORDER BY seq", [project, name]);
      return found.map(namedWaiterFromDb);
    },

    async clearLeaseWaiters(): Promise<void> {
      await tx((t) => t.query("DELETE FROM lease_waiters"));
    },

    async getLease(key: LeaseKey): Promise<LeaseRow | undefined> {
      const [r] = await rows<LeaseDb>("SELECT * FROM leases WHERE project = $1 AND name = $2", [key.project, key.name]);
      return r && leaseFromDb(r);
    },

    async listLeases(query: ListLeasesQuery): Promise<LeaseRow[]> {
      return (
        await rows<LeaseDb>(
          `SELECT * FROM leases WHERE project = $1 AND name > $2 AND holder_agent_id IS NOT NULL
             AND ($3 OR expires_at > $4) ORDER BY name LIMIT $5`,
          [query.project, query.afterName ?? "", query.includeExpired, query.nowMs, query.limit],
        )
      ).map(leaseFromDb);
    },

    purgeLapsedLeases(afterMs: number): Promise<LeaseRow[]> {
      return tx(async (t) => {
        const cutoffMs = (await now(t)) - afterMs;
        // The rows as they were, then cleared; their tokens stay as floors. A row a decision holds
        // is skipped, not waited for (that decision may hold rows this one locked: the next sweep
        // clears it).
        const before = (
          await t.query<LeaseDb>("SELECT * FROM leases WHERE holder_agent_id IS NOT NULL AND expires_at <= $1 ORDER BY project, name FOR UPDATE SKIP LOCKED", [cutoffMs])
        ).rows;
        await t.query("UPDATE leases SET holder_agent_id = NULL, holder_agent_name = NULL WHERE (project, name) IN (SELECT * FROM unnest($1::text[], $2::text[]))", [
          before.map((l) => l.project),
          before.map((l) => l.name),
        ]);
        return before.map(leaseFromDb);
      });
    },

    /**
     * Live leases and the head of the lease changes, read in one snapshot (REPEATABLE READ), so the
     * head is exactly the last change the leases reflect.
     */
    leaseSnapshot(project: string, nowMs: number) {
      return snapshot(async (t) => ({
        leases: (
          await t.query<LeaseDb>("SELECT * FROM leases WHERE project = $1 AND holder_agent_id IS NOT NULL AND expires_at > $2 ORDER BY name", [project, nowMs])
        ).rows.map(leaseFromDb),
        waiters: (await t.query<WaiterDb & { name: string }>("SELECT * FROM lease_waiters WHERE project = $1 ORDER BY name, seq", [project])).rows.map(namedWaiterFromDb),
        head: await head(t, project, "leases"),
      }));
    },
  };

  return { store, apply, waitersOf };
}
