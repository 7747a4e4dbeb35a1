import { changesOf } from "../change-feed.js";
import type { LeaseDecision, LeaseStore, LeaseWaiter, ListLeasesQuery, NamedWaiter } from "../lease-store.js";
import { agentFromDb, checkLeaseWrite, floorRow, leaseFromDb, leaseToDb, namedWaiterFromDb, waiterFromDb, type AgentDb, type LeaseDb, type WaiterDb } from "../rows.js";
import { agentColumns, leaseColumns, orphanedWaiter, waiterColumns } from "./rows.js";
import type { SegmentKind } from "./batches.js";
import type { PgAccess, PgRecordChange, PgTx, Statement } from "./transaction.js";
import type { AgentRow, LeaseKey, LeaseRow } from "../../domain.js";

/**
 * What a run of lease decisions of one project is shown (leaseSegment), in one statement, locked
 * in this order:
 * - their would-be holders, share-locked by id: an eviction (agent, then its leases, both locked
 *   for update) is either committed before this reads them, or waits for these decisions;
 * - their lease rows, locked by name until the batch commits (decisions on one resource from
 *   every replica take turns; a resource without a row stands on the fence base, 0 until a
 *   restore raised it);
 * - their queues. The statement's snapshot is taken after the batch locked the project's heads,
 *   and every transaction that changes a project's queues holds those heads (changes.ts
 *   lockHeads), so the queues it reads are the latest;
 * - whether the project has managed tokens, which a token decision writes holding the heads too.
 */
const loadSegment = `WITH a AS (SELECT ${agentColumns} FROM agents WHERE id = ANY($3::text[]) ORDER BY id FOR SHARE),
    l AS (SELECT ${leaseColumns} FROM leases WHERE project = $1 AND name = ANY($2::text[]) ORDER BY name FOR UPDATE)
  SELECT (SELECT coalesce(json_agg(a), '[]') FROM a) AS agents,
    (SELECT coalesce(json_agg(l), '[]') FROM l) AS leases,
    (SELECT coalesce(json_agg(w ORDER BY w.name, w.seq), '[]') FROM (SELECT ${waiterColumns} FROM lease_waiters WHERE project = $1 AND name = ANY($2::text[])) w) AS waiters,
    (SELECT floor FROM fence_base WHERE id = 1) AS floor,
    EXISTS (SELECT 1 FROM project_tokens WHERE project = $1) AS has_tokens`;

/** What a run of lease decisions decided: the waiters that left, and the rows written. */
const dropWaiters = `DELETE FROM lease_waiters WHERE project = $1 AND id = ANY($2::text[])`;
const writeLeases = `INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at, handed_to, handed_token)
  SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[], $9::bigint[])
  ON CONFLICT (project, name) DO UPDATE SET holder_agent_id = excluded.holder_agent_id, holder_agent_name = excluded.holder_agent_name,
    fencing_token = excluded.fencing_token, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, handed_to = excluded.handed_to,
    handed_token = excluded.handed_token`;

/**
 * The waiters a run of lease decisions queued, after dropWaiters removed those that left (a
 * queue's numbers may be used again), each with the replica that holds its call ($2, D79).
 */
const queueWaiters = `INSERT INTO lease_waiters (project, replica, name, seq, id, agent_id, agent_name, ttl_ms, deadline_ms, since_ms)
  SELECT $1, $2, * FROM unnest($3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::bigint[])`;

/** `rows` as one array per column, in the order of `keys` (the parameters of an `unnest`). */
const columns = <R, K extends keyof R>(rows: readonly R[], keys: readonly K[]): R[K][][] => keys.map((k) => rows.map((r) => r[k]));

/** One lease decision of a batch: what `decideLease` was given. */
interface LeaseItem {
  key: LeaseKey;
  decide: (current: LeaseRow | undefined, nowMs: number, waiters: LeaseWaiter[], holder: AgentRow | undefined, projectHasTokens: () => boolean) => LeaseDecision<unknown>;
  holderId: string | undefined;
}

/**
 * Checks what a lease decision on `key` decided, shown `current` (`row` when the resource has
 * one): the write every store checks (rows.ts checkLeaseWrite), and a waiter queued only behind
 * a row. A decision that breaks one of these is a bug, never a write: it throws.
 */
function checkLeaseDecision(key: LeaseKey, row: LeaseDb | undefined, current: LeaseDb | undefined, d: LeaseDecision<unknown>): void {
  if (d.queue?.add && !row) throw new Error(`a waiter for ${JSON.stringify(key)} is queued behind no lease`);
  checkLeaseWrite(key, current, d.write);
}

/**
 * Lease decisions run together in a batch (batches.ts): their rows, holders and queues read in
 * one statement, each decided in order against them (a later decision on the same resource sees
 * what the earlier one decided), and what they decided written in one or two statements.
 */
const leaseSegment = (replica: number): SegmentKind<LeaseItem> => ({
  open(project) {
    const rows = new Map<string, LeaseDb>();
    const queues = new Map<string, WaiterDb[]>();
    const holders = new Map<string, AgentDb>();
    let floor = 0;
    let hasTokens = false;
    const tokens = () => hasTokens;
    const written = new Set<string>();
    const left: string[] = [];
    const queued: (WaiterDb & { name: string })[] = [];
    return {
      async load(tx, items) {
        const names = [...new Set(items.map((i) => i.key.name))];
        const ids = [...new Set(items.flatMap((i) => (i.holderId === undefined ? [] : [i.holderId])))];
        const found = (
          await tx.query<{ agents: AgentDb[]; leases: LeaseDb[]; waiters: (WaiterDb & { name: string })[]; floor: number | null; has_tokens: boolean }>(loadSegment, [
            project,
            names,
            ids,
          ])
        ).rows[0]!;
        for (const a of found.agents) holders.set(a.id, a);
        for (const l of found.leases) rows.set(l.name, l);
        for (const w of found.waiters) (queues.get(w.name) ?? queues.set(w.name, []).get(w.name)!).push(w);
        floor = found.floor ?? 0;
        hasTokens = found.has_tokens;
      },
      decide({ key, decide, holderId }, nowMs, record) {
        const row = rows.get(key.name);
        const current = row ?? (floor > 0 ? floorRow(key, floor) : undefined);
        const queue = row ? (queues.get(key.name) ?? []) : [];
        const holder = holderId === undefined ? undefined : holders.get(holderId);
        const d = decide(current && leaseFromDb(current), nowMs, queue.map(waiterFromDb), holder && agentFromDb(holder), tokens);
        // Everything that may throw comes first: a refusal changes nothing.
        const result = d.result;
        checkLeaseDecision(key, row, current, d);
        const remove = new Set(d.queue?.remove ?? []);
        let next = queue.filter((w) => !remove.has(w.id));
        for (const w of queue) if (remove.has(w.id)) left.push(w.id);
        const add = d.queue?.add;
        if (add) {
          const w = {
            seq: next.reduce((max, x) => Math.max(max, x.seq), 0) + 1,
            id: add.id,
            agent_id: add.agentId,
            agent_name: add.agentName,
            ttl_ms: add.ttlMs,
            deadline_ms: add.deadlineMs,
            since_ms: add.sinceMs,
          };
          next = [...next, w];
          queued.push({ ...w, name: key.name });
        }
        queues.set(key.name, next);
        if (d.write) {
          rows.set(key.name, leaseToDb(d.write));
          written.add(key.name);
        }
        for (const c of changesOf(d)) record(c.stream, c.body, nowMs);
        return result;
      },
      flush() {
        // A waiter queued and gone again within the run was never written: it is neither deleted nor inserted.
        const stays = queued.filter((w) => !left.includes(w.id));
        const newIds = new Set(queued.map((w) => w.id));
        const gone = left.filter((id) => !newIds.has(id));
        const leases = [...written].map((name) => rows.get(name)!);
        const first: Statement[] = [];
        if (gone.length > 0) first.push({ text: dropWaiters, values: [project, gone] });
        if (leases.length > 0) {
          first.push({
            text: writeLeases,
            values: [project, ...columns(leases, ["name", "holder_agent_id", "holder_agent_name", "fencing_token", "acquired_at", "expires_at", "handed_to", "handed_token"])],
          });
        }
        const after: Statement[] = [];
        if (stays.length > 0) {
          after.push({
            text: queueWaiters,
            values: [project, replica, ...columns(stays, ["name", "seq", "id", "agent_id", "agent_name", "ttl_ms", "deadline_ms", "since_ms"])],
          });
        }
        return { together: first, after };
      },
    };
  },
});

/**
 * The lease concern of the PostgreSQL store, the same decisions as on SQLite (sqlite/leases.ts).
 * A decision locks the would-be holder (shared), then the lease row, until it commits: decisions
 * on one resource from every replica take turns. `apply` and `waitersOf` serve the agent
 * decisions that end an instance (agents.ts). `replica` is the key of this replica's liveness
 * lock, which every waiter it queues carries (D79).
 */
export function createPostgresLeases({ tx, batched, rows, now, snapshot, head }: PgAccess, replica: number) {
  const segment = leaseSegment(replica);

  async function waitersOf(t: PgTx, key: LeaseKey): Promise<LeaseWaiter[]> {
    return (await t.query<WaiterDb>(`SELECT ${waiterColumns} FROM lease_waiters WHERE project = $1 AND name = $2 ORDER BY seq`, [key.project, key.name])).rows.map(waiterFromDb);
  }

  /**
   * Writes what a lease decision on `key` decided, inside the caller's transaction: `row` is the
   * locked row (absent: none yet), `current` what the decision was shown (a floor row for none).
   */
  async function apply(t: PgTx, key: LeaseKey, row: LeaseDb | undefined, current: LeaseDb | undefined, d: LeaseDecision<unknown>, record: PgRecordChange, nowMs: number): Promise<void> {
    checkLeaseDecision(key, row, current, d);
    for (const id of d.queue?.remove ?? []) {
      await t.query("DELETE FROM lease_waiters WHERE project = $1 AND name = $2 AND id = $3", [key.project, key.name, id]);
    }
    const add = d.queue?.add;
    if (add) {
      await t.query(
        `INSERT INTO lease_waiters (project, name, seq, id, agent_id, agent_name, ttl_ms, deadline_ms, since_ms, replica)
         SELECT $1, $2, coalesce(max(seq), 0) + 1, $3, $4, $5, $6, $7, $8, $9 FROM lease_waiters WHERE project = $1 AND name = $2`,
        [key.project, key.name, add.id, add.agentId, add.agentName, add.ttlMs, add.deadlineMs, add.sinceMs, replica],
      );
    }
    if (d.write) {
      const w = leaseToDb(d.write);
      const values = [w.project, w.name, w.holder_agent_id, w.holder_agent_name, w.fencing_token, w.acquired_at, w.expires_at, w.handed_to, w.handed_token];
      await t.query(
        row
          ? `UPDATE leases SET holder_agent_id = $3, holder_agent_name = $4, fencing_token = $5, acquired_at = $6, expires_at = $7, handed_to = $8,
               handed_token = $9 WHERE project = $1 AND name = $2`
          : `INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at, handed_to, handed_token)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
        values,
      );
    }
    for (const c of changesOf(d)) await record(key.project, c.stream, c.body, nowMs);
  }

  const store: LeaseStore = {
    decideLease<T>(key: LeaseKey, decide: LeaseItem["decide"], holderId?: string) {
      return batched<LeaseItem, T>(key.project, segment, { key, decide, holderId });
    },

    async leaseWaiters(project: string, name?: string): Promise<NamedWaiter[]> {
      const found =
        name === undefined
          ? await rows<WaiterDb & { name: string }>(`SELECT ${waiterColumns} FROM lease_waiters WHERE project = $1 ORDER BY name, seq`, [project])
          : await rows<WaiterDb & { name: string }>(`SELECT ${waiterColumns} FROM lease_waiters WHERE project = $1 AND name = $2 ORDER BY seq`, [project, name]);
      return found.map(namedWaiterFromDb);
    },

    async clearLeaseWaiters(): Promise<void> {
      await tx((t) => t.query("DELETE FROM lease_waiters"));
    },

    async orphanedQueues(): Promise<LeaseKey[]> {
      return rows<LeaseKey>(`SELECT DISTINCT project, name FROM lease_waiters WHERE ${orphanedWaiter} ORDER BY project, name`);
    },

    async getLease(key: LeaseKey): Promise<LeaseRow | undefined> {
      const [r] = await rows<LeaseDb>(`SELECT ${leaseColumns} FROM leases WHERE project = $1 AND name = $2`, [key.project, key.name]);
      return r && leaseFromDb(r);
    },

    async listLeases(query: ListLeasesQuery): Promise<LeaseRow[]> {
      return (
        await rows<LeaseDb>(
          `SELECT ${leaseColumns} FROM leases WHERE project = $1 AND name > $2 AND holder_agent_id IS NOT NULL
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
          await t.query<LeaseDb>(`SELECT ${leaseColumns} FROM leases WHERE holder_agent_id IS NOT NULL AND expires_at <= $1 ORDER BY project, name FOR UPDATE SKIP LOCKED`, [cutoffMs])
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
          await t.query<LeaseDb>(`SELECT ${leaseColumns} FROM leases WHERE project = $1 AND holder_agent_id IS NOT NULL AND expires_at > $2 ORDER BY name`, [project, nowMs])
        ).rows.map(leaseFromDb),
        waiters: (await t.query<WaiterDb & { name: string }>(`SELECT ${waiterColumns} FROM lease_waiters WHERE project = $1 ORDER BY name, seq`, [project])).rows.map(namedWaiterFromDb),
        head: await head(t, project, "leases"),
      }));
    },
  };

  return { store, apply, waitersOf };
}
