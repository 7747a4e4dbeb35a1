import { randomUUID } from "node:crypto";
import pg from "pg";
import {
  changesOf,
  StoreOpenError,
  type AgentLeasesDecision,
  type AgentRow,
  type ChangeOf,
  type HeldResource,
  type NamedWaiter,
  type ChangeRead,
  type ChangeStream,
  type CommitStats,
  type Decision,
  type HubStore,
  type LeaseDecision,
  type LeaseKey,
  type LeaseWaiter,
  type LeaseRow,
  type ListLeasesQuery,
  type MessageRow,
  type ProjectCounts,
  type RuntimeRow,
  type StoreClock,
  type StreamChange,
  type SyncRunView,
} from "../store.js";
import { byRegistration, ChangeListeners } from "../changes.js";
import { createTail } from "./tail.js";
import { runTransaction, storeError, type PgAccess, type PgRecordChange, type PgTx } from "./transaction.js";
import { migrate } from "./schema.js";
import { createPostgresMessages } from "./messages.js";
import { createPostgresSync, runsOfProject } from "./sync.js";
import { createPostgresTokens } from "./tokens.js";
import type { TokenStore } from "../token-store.js";
import { agentColumns } from "./rows.js";
import {
  agentFromDb,
  floorRow,
  leaseFromDb,
  messageFromDb,
  runFromDb,
  runtimeFromDb,
  waiterFromDb,
  type AgentDb,
  type LeaseDb,
  type MessageDb,
  type RunDb as RunViewDb,
  type RuntimeDb,
  type WaiterDb,
} from "../rows.js";

export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/database` */
  url: string;
  /** Connections in the pool: decisions and reads in flight at once. Default 10. */
  poolSize?: number;
  /**
   * The time decisions are made at. Default: the database's clock, read inside each decision's
   * transaction, so hubs whose own clocks disagree still agree on every expiry. Tests inject
   * theirs.
   */
  clock?: StoreClock;
}

/**
 * How often a hub looks for what other hubs committed (inbox events, watch changes): the most a
 * message sent through one hub waits before a Subscribe stream on another hears of it, and a
 * change before a watcher there does (plus the commit of any older transaction still running).
 */
const tailIntervalMs = 20;

/** bigint columns come back as numbers: every one the hub stores (ms times, tokens) is below 2^53. */
export const bigintAsNumber = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === pg.types.builtins.INT8 ? Number : pg.types.getTypeParser(oid, format)) as pg.CustomTypesConfig["getTypeParser"],
};

const upsertAgent = `INSERT INTO agents (id, project, name, name_key, purpose, model, host, key_hash, connected_at, last_seen_at, online)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
  ON CONFLICT (id) DO UPDATE SET project = excluded.project, name = excluded.name, name_key = excluded.name_key,
    purpose = excluded.purpose, model = excluded.model, host = excluded.host, key_hash = excluded.key_hash,
    connected_at = excluded.connected_at, last_seen_at = excluded.last_seen_at, online = excluded.online`;

/**
 * Numbers and stores one change. The head row is locked from here to the commit, so the changes
 * of a (project, stream) are numbered in commit order without gaps on every replica; decisions
 * record their change last, to hold that lock for as short a time as they can. A stream's first
 * change is numbered from the fence base, which a restore raises.
 */
const recordChange = `WITH h AS (
    INSERT INTO watch_heads (project, stream, head) SELECT $1, $2, floor + 1 FROM fence_base WHERE id = 1
    ON CONFLICT (project, stream) DO UPDATE SET head = watch_heads.head + 1 RETURNING head)
  INSERT INTO watch_changes (project, stream, seq, at_ms, body, origin) SELECT $1, $2, head, $3, $4, $5 FROM h RETURNING seq`;

const changeHead = `coalesce((SELECT head FROM watch_heads WHERE project = $1 AND stream = $2), (SELECT floor FROM fence_base WHERE id = 1))`;

/**
 * The store for several hub replicas on one PostgreSQL database. Each decision is one
 * transaction on a pooled connection, answered once its COMMIT (durable in PostgreSQL) returns
 * (postgres/transaction.ts: decisions run concurrently and PostgreSQL flushes commits that arrive
 * together at once). A decision locks the rows it decides on (`FOR UPDATE`), so decisions on one
 * row made by different replicas are serialised by the database; reads see what is committed.
 */
export class PostgresStore implements HubStore {
  readonly storage = "postgres" as const;
  private readonly stats: CommitStats = { commits: 0, works: 0 };
  /** Decisions running now (close waits for them). */
  private readonly running = new Set<Promise<unknown>>();
  private readonly messages;
  private readonly sync;
  readonly tokens: TokenStore;
  private readonly changeListeners = new ChangeListeners();
  /** Marks the changes this store writes, so its tail skips them (they were handed over at commit). */
  private readonly origin = randomUUID();
  private readonly tail;
  /** The last reading of the database's clock, and when (performance.now()) it was read. */
  private reading = { dbMs: Date.now(), atMs: performance.now() };

  private constructor(
    private readonly pool: pg.Pool,
    private readonly clock: StoreClock | undefined,
  ) {
    const access: PgAccess = {
      tx: <T>(work: (tx: PgTx) => Promise<T>) => this.tx(work),
      changeTx: (work) => this.changeTx(work),
      rows: <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => this.rows<R>(sql, params),
      now: (tx: PgTx) => this.decisionTime(tx),
    };
    this.messages = createPostgresMessages(access);
    this.sync = createPostgresSync(access);
    this.tokens = createPostgresTokens(access);
    this.tail = createTail(access.rows, tailIntervalMs);
  }

  /** Connects, brings the schema to this release's version (or refuses the database), and opens. */
  static async open(o: PostgresStoreOptions): Promise<PostgresStore> {
    const pool = new pg.Pool({ connectionString: o.url, max: o.poolSize ?? 10, types: bigintAsNumber, connectionTimeoutMillis: 5_000 });
    // An idle connection the server dropped must not take the process down.
    pool.on("error", () => {});
    try {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (e) {
        // The URL is not repeated: it may hold a password.
        throw new StoreOpenError("runtime_store_unreachable", `cannot reach the PostgreSQL database: ${(e as Error).message}`);
      }
      try {
        await migrate(client);
      } finally {
        client.release();
      }
    } catch (e) {
      await pool.end();
      throw e;
    }
    const store = new PostgresStore(pool, o.clock);
    // The first reading of the database's clock, so the hub's views follow it from the start.
    await store.tx((tx) => store.decisionTime(tx));
    return store;
  }

  /**
   * The time of a decision, read after its rows are locked: the injected clock, else the
   * database's (which also refreshes the offset the hub's clock follows).
   */
  private async decisionTime(tx: PgTx): Promise<number> {
    if (this.clock) return this.clock.now();
    const r = await tx.query<{ now: number }>("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now");
    const dbNow = r.rows[0]!.now;
    this.reading = { dbMs: dbNow, atMs: performance.now() };
    return dbNow;
  }

  /**
   * The injected clock's time (tests); else the database's clock as last read inside a decision,
   * advanced by this process's monotonic time since (off by the read's latency, and by the
   * hosts' clock rates between decisions: milliseconds).
   */
  now(): number {
    if (this.clock) return this.clock.now();
    return Math.round(this.reading.dbMs + (performance.now() - this.reading.atMs));
  }

  private tx<T>(work: (tx: PgTx) => Promise<T>): Promise<T> {
    const p = runTransaction(this.pool, work).then((value) => {
      this.stats.commits++;
      this.stats.works++;
      return value;
    });
    this.running.add(p);
    const done = () => this.running.delete(p);
    p.then(done, done);
    return p;
  }

  /**
   * One decision that may record changes (`record`, inside its transaction); they are handed to
   * the change listeners once it has committed, never when it rolled back or ran again.
   */
  private changeTx<T>(work: (tx: PgTx, record: PgRecordChange) => Promise<T>): Promise<T> {
    let changes: StreamChange[] = [];
    return this.tx(async (tx) => {
      changes = [];
      return work(tx, async (project, stream, body, atMs) => {
        const r = await tx.query<{ seq: number }>(recordChange, [project, stream, atMs, JSON.stringify(body), this.origin]);
        changes.push({ project, stream, seq: r.rows[0]!.seq, atMs, body });
      });
    }).then((result) => {
      this.changeListeners.emit(changes);
      return result;
    });
  }

  private async rows<R extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<R[]> {
    try {
      return (await this.pool.query<R>(sql, params)).rows;
    } catch (e) {
      throw storeError(e);
    }
  }

  /** Committed decisions, one transaction each (a commit and a work per decision). */
  commitStats(): Readonly<CommitStats> {
    return this.stats;
  }

  async ready(): Promise<boolean> {
    try {
      return (await this.rows<{ ok: number }>("SELECT 1 AS ok"))[0]?.ok === 1;
    } catch {
      return false;
    }
  }

  /** Lets the decisions running now end, then closes the pool. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.running]);
    await this.pool.end();
  }

  async getAgent(id: string): Promise<AgentRow | undefined> {
    const [r] = await this.rows<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE id = $1`, [id]);
    return r && agentFromDb(r);
  }

  /** Committed in PostgreSQL means durable: the latest row is the durable one. */
  peekAgent(id: string): Promise<AgentRow | undefined> {
    return this.getAgent(id);
  }

  async listAgents(project: string): Promise<AgentRow[]> {
    return (await this.rows<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE project = $1 ORDER BY reg_seq`, [project])).map(agentFromDb);
  }

  async countOnlineAgents(): Promise<number> {
    return (await this.rows<{ n: number }>("SELECT count(*)::int AS n FROM agents WHERE online"))[0]!.n;
  }

  async listProjects(nowMs: number): Promise<ProjectCounts[]> {
    const rows = await this.rows<{ project: string; agents: number; online: number; held: number; open: number }>(
      `WITH names (project) AS (
         SELECT project FROM agents UNION SELECT project FROM leases WHERE holder_agent_id IS NOT NULL AND expires_at > $1
         UNION SELECT project FROM runtime_presence UNION SELECT hub_project FROM sync_runs)
       SELECT n.project,
         (SELECT count(*)::int FROM agents a WHERE a.project = n.project) AS agents,
         (SELECT count(*)::int FROM agents a WHERE a.project = n.project AND a.online) AS online,
         (SELECT count(*)::int FROM leases l WHERE l.project = n.project AND l.holder_agent_id IS NOT NULL AND l.expires_at > $1) AS held,
         (SELECT count(*)::int FROM messages m WHERE m.project = n.project AND m.status IN ('queued', 'delivered')) AS open
       FROM names n ORDER BY n.project`,
      [nowMs],
    );
    return rows.map((r) => ({ project: r.project, agents: r.agents, onlineAgents: r.online, heldLeases: r.held, openMessages: r.open }));
  }

  private async writeAgent(tx: PgTx, a: AgentRow): Promise<void> {
    await tx.query(upsertAgent, [
      a.id,
      a.project,
      a.name,
      a.name.toLowerCase(),
      a.purpose,
      a.model ?? null,
      a.host ?? null,
      a.keyHash,
      a.connectedAtMs,
      a.lastSeenAtMs,
      a.online,
    ]);
  }

  decideRegistration<T>(project: string, nameKey: string, decide: (existing: AgentRow | undefined, nowMs: number) => Decision<AgentRow, T>): Promise<T> {
    return this.changeTx(async (tx, record) => {
      const [r] = (await tx.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE project = $1 AND name_key = $2 FOR UPDATE`, [project, nameKey])).rows;
      const nowMs = await this.decisionTime(tx);
      const d = decide(r && agentFromDb(r), nowMs);
      if (d.write) await this.writeAgent(tx, d.write);
      for (const c of changesOf(d)) await record(project, c.stream, c.body, nowMs);
      return d.result;
    });
  }

  decideAgent<T>(id: string, decide: (current: AgentRow | undefined, nowMs: number) => Decision<AgentRow, T>): Promise<T> {
    return this.changeTx(async (tx, record) => {
      const [r] = (await tx.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE id = $1 FOR UPDATE`, [id])).rows;
      const nowMs = await this.decisionTime(tx);
      const d = decide(r && agentFromDb(r), nowMs);
      if (d.write) await this.writeAgent(tx, d.write);
      const project = d.write?.project ?? r?.project;
      for (const c of changesOf(d)) {
        if (project === undefined) throw new Error(`a decision on unknown agent ${id} recorded a change`);
        await record(project, c.stream, c.body, nowMs);
      }
      return d.result;
    });
  }

  /** Marks offline the agents `where` selects (locked in registration order), recording a change for each. */
  private offline(where: string, staleAfterMs: number | undefined, change: ChangeOf<AgentRow>): Promise<AgentRow[]> {
    return this.changeTx(async (tx, record) => {
      const nowMs = await this.decisionTime(tx);
      const params = staleAfterMs === undefined ? [] : [nowMs - staleAfterMs];
      const rows = (
        await tx.query<AgentDb & { reg: number }>(
          `WITH locked AS (SELECT id FROM agents WHERE ${where} ORDER BY reg_seq FOR UPDATE)
           UPDATE agents a SET online = false FROM locked WHERE a.id = locked.id RETURNING a.reg_seq AS reg, ${agentColumns.split(", ").map((c) => `a.${c}`).join(", ")}`,
          params,
        )
      ).rows;
      const swept = byRegistration(rows).map(agentFromDb);
      for (const a of swept) {
        const c = change(a, nowMs);
        await record(a.project, c.stream, c.body, nowMs);
      }
      return swept;
    });
  }

  async markAllAgentsOffline(change: ChangeOf<AgentRow>): Promise<void> {
    await this.offline("online", undefined, change);
  }

  sweepStaleAgents(staleAfterMs: number, change: ChangeOf<AgentRow>): Promise<AgentRow[]> {
    return this.offline("online AND last_seen_at < $1", staleAfterMs, change);
  }

  decideRuntime<T>(project: string, runtimeId: string, decide: (current: RuntimeRow | undefined, nowMs: number) => Decision<RuntimeRow, T>): Promise<T> {
    return this.changeTx(async (tx, record) => {
      const [r] = (await tx.query<RuntimeDb>("SELECT * FROM runtime_presence WHERE project = $1 AND runtime_id = $2 FOR UPDATE", [project, runtimeId])).rows;
      const nowMs = await this.decisionTime(tx);
      const d = decide(r && runtimeFromDb(r), nowMs);
      if (d.write) {
        await tx.query(
          `INSERT INTO runtime_presence (project, runtime_id, host, registered_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (project, runtime_id) DO UPDATE SET host = excluded.host,
             registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at, expiry_noted = false`,
          [d.write.project, d.write.runtimeId, d.write.host ?? null, d.write.registeredAtMs, d.write.heartbeatAtMs],
        );
      }
      for (const c of changesOf(d)) await record(project, c.stream, c.body, nowMs);
      return d.result;
    });
  }

  async listRuntimes(project: string): Promise<RuntimeRow[]> {
    return (await this.rows<RuntimeDb>("SELECT * FROM runtime_presence WHERE project = $1 ORDER BY runtime_id", [project])).map(runtimeFromDb);
  }

  sweepExpiredRuntimes(staleAfterMs: number, change: ChangeOf<RuntimeRow>): Promise<RuntimeRow[]> {
    return this.changeTx(async (tx, record) => {
      const nowMs = await this.decisionTime(tx);
      // Locked in key order, and skipped when another replica's sweep holds them: that sweep
      // records their lapse.
      const expired = (
        await tx.query<RuntimeDb>(
          `WITH due AS (SELECT project, runtime_id FROM runtime_presence WHERE NOT expiry_noted AND heartbeat_at <= $1
             ORDER BY project, runtime_id FOR UPDATE SKIP LOCKED)
           UPDATE runtime_presence r SET expiry_noted = true FROM due WHERE r.project = due.project AND r.runtime_id = due.runtime_id
           RETURNING r.*`,
          [nowMs - staleAfterMs],
        )
      ).rows
        .map(runtimeFromDb)
        .sort((a, b) => (a.project === b.project ? cmp(a.runtimeId, b.runtimeId) : cmp(a.project, b.project)));
      for (const r of expired) {
        const c = change(r, nowMs);
        await record(r.project, c.stream, c.body, nowMs);
      }
      return expired;
    });
  }

  decideLease<T>(
    key: LeaseKey,
    decide: (current: LeaseRow | undefined, nowMs: number, waiters: LeaseWaiter[], holder: AgentRow | undefined) => LeaseDecision<T>,
    holderId?: string,
  ): Promise<T> {
    return this.changeTx(async (tx, record) => {
      // The would-be holder first, share-locked: an eviction (agent, then its leases, both locked
      // for update) is either committed before this reads it, or waits for this decision.
      const [agent] =
        holderId === undefined ? [] : (await tx.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE id = $1 FOR SHARE`, [holderId])).rows;
      // The row, locked until the decision commits: decisions on one resource from every replica
      // take turns. A resource without a row stands on the fence base (0 until a restore raised it).
      const [row] = (await tx.query<LeaseDb>("SELECT * FROM leases WHERE project = $1 AND name = $2 FOR UPDATE", [key.project, key.name])).rows;
      let current = row;
      if (!current) {
        const base = (await tx.query<{ floor: number }>("SELECT floor FROM fence_base WHERE id = 1")).rows[0]?.floor ?? 0;
        if (base > 0) current = floorRow(key, base);
      }
      const nowMs = await this.decisionTime(tx);
      // The queue is read under the lease row's lock: waiters are added only by decisions that hold it.
      const waiters = row ? await this.waitersOf(tx, key) : [];
      const d = decide(current && leaseFromDb(current), nowMs, waiters, agent && agentFromDb(agent));
      await this.applyLease(tx, key, row, current, d, record, nowMs);
      return d.result;
    });
  }

  private async waitersOf(tx: PgTx, key: LeaseKey): Promise<LeaseWaiter[]> {
    return (await tx.query<WaiterDb>("SELECT * FROM lease_waiters WHERE project = $1 AND name = $2 ORDER BY seq", [key.project, key.name])).rows.map(waiterFromDb);
  }

  /**
   * Writes what a lease decision on `key` decided, inside the caller's transaction: `row` is the
   * locked row (absent: none yet), `current` what the decision was shown (a floor row for none).
   */
  private async applyLease(tx: PgTx, key: LeaseKey, row: LeaseDb | undefined, current: LeaseDb | undefined, d: LeaseDecision<unknown>, record: PgRecordChange, nowMs: number): Promise<void> {
    for (const id of d.queue?.remove ?? []) {
      await tx.query("DELETE FROM lease_waiters WHERE project = $1 AND name = $2 AND id = $3", [key.project, key.name, id]);
    }
    const add = d.queue?.add;
    if (add) {
      if (!row) throw new Error(`a waiter for ${JSON.stringify(key)} is queued behind no lease`);
      await tx.query(
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
      await tx.query(
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

  decideAgentLeases<T>(
    find: { agentId: string } | { project: string; nameKey: string },
    decide: (agent: AgentRow | undefined, held: HeldResource[], nowMs: number) => AgentLeasesDecision<T>,
  ): Promise<T> {
    return this.changeTx(async (tx, record) => {
      const [r] = (
        "agentId" in find
          ? await tx.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE id = $1 FOR UPDATE`, [find.agentId])
          : await tx.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE project = $1 AND name_key = $2 FOR UPDATE`, [find.project, find.nameKey])
      ).rows;
      // The leases it holds or waits for, locked in name order, then their queues.
      const rows = r
        ? (
            await tx.query<LeaseDb>(
              `SELECT * FROM leases WHERE project = $1 AND (holder_agent_id = $2
                 OR name IN (SELECT name FROM lease_waiters WHERE project = $1 AND agent_id = $2)) ORDER BY name FOR UPDATE`,
              [r.project, r.id],
            )
          ).rows
        : [];
      const nowMs = await this.decisionTime(tx);
      const held: HeldResource[] = [];
      for (const l of rows) held.push({ lease: leaseFromDb(l), waiters: await this.waitersOf(tx, l) });
      const d = decide(r && agentFromDb(r), held, nowMs);
      if (d.write) await this.writeAgent(tx, d.write);
      const project = d.write?.project ?? r?.project;
      if (project === undefined && (changesOf(d).length > 0 || d.leases?.length)) throw new Error("a decision on an unknown agent wrote leases or changes");
      for (const c of changesOf(d)) await record(project!, c.stream, c.body, nowMs);
      for (const { key, decision } of d.leases ?? []) {
        const row = rows.find((l) => l.project === key.project && l.name === key.name);
        if (!row) throw new Error(`an agent decision tried to decide lease ${JSON.stringify(key)}, which it was not shown`);
        await this.applyLease(tx, key, row, row, decision, record, nowMs);
      }
      return d.result;
    });
  }

  forgetAgents(retainMs: number): Promise<AgentRow[]> {
    return this.tx(async (tx) => {
      const nowMs = await this.decisionTime(tx);
      const rows = (
        await tx.query<AgentDb>(
          `DELETE FROM agents a WHERE a.id IN (
             SELECT id FROM agents c WHERE c.online = false AND c.last_seen_at <= $1
               AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.status IN ('queued', 'delivered') AND (m.to_id = c.id OR m.from_id = c.id))
               AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.project = c.project AND l.holder_agent_id = c.id AND l.expires_at > $2)
             ORDER BY c.reg_seq FOR UPDATE SKIP LOCKED)
           RETURNING ${agentColumns.split(", ").map((c) => `a.${c}`).join(", ")}`,
          [nowMs - retainMs, nowMs],
        )
      ).rows;
      const ids = rows.map((a) => a.id);
      if (ids.length > 0) {
        await tx.query("DELETE FROM inbox_events WHERE agent_id = ANY($1)", [ids]);
        await tx.query("DELETE FROM inbox_streams WHERE agent_id = ANY($1)", [ids]);
      }
      return rows.map(agentFromDb);
    });
  }

  async leaseWaiters(project: string, name?: string): Promise<NamedWaiter[]> {
    const rows =
      name === undefined
        ? await this.rows<WaiterDb & { name: string }>("SELECT * FROM lease_waiters WHERE project = $1 ORDER BY name, seq", [project])
        : await this.rows<WaiterDb & { name: string }>("SELECT * FROM lease_waiters WHERE project = $1 AND name = $2 ORDER BY seq", [project, name]);
    return rows.map((w) => ({ ...waiterFromDb(w), name: w.name }));
  }

  async clearLeaseWaiters(): Promise<void> {
    await this.tx((tx) => tx.query("DELETE FROM lease_waiters"));
  }

  async getLease(key: LeaseKey): Promise<LeaseRow | undefined> {
    const [r] = await this.rows<LeaseDb>("SELECT * FROM leases WHERE project = $1 AND name = $2", [key.project, key.name]);
    return r && leaseFromDb(r);
  }

  async listLeases(query: ListLeasesQuery): Promise<LeaseRow[]> {
    return (
      await this.rows<LeaseDb>(
        `SELECT * FROM leases WHERE project = $1 AND name > $2 AND holder_agent_id IS NOT NULL
           AND ($3 OR expires_at > $4) ORDER BY name LIMIT $5`,
        [query.project, query.afterName ?? "", query.includeExpired, query.nowMs, query.limit],
      )
    ).map(leaseFromDb);
  }

  purgeLapsedLeases(afterMs: number): Promise<LeaseRow[]> {
    return this.tx(async (tx) => {
      const cutoffMs = (await this.decisionTime(tx)) - afterMs;
      // The rows as they were, then cleared; their tokens stay as floors.
      const before = (await tx.query<LeaseDb>("SELECT * FROM leases WHERE holder_agent_id IS NOT NULL AND expires_at <= $1 ORDER BY project, name FOR UPDATE", [cutoffMs])).rows;
      await tx.query("UPDATE leases SET holder_agent_id = NULL, holder_agent_name = NULL WHERE holder_agent_id IS NOT NULL AND expires_at <= $1", [cutoffMs]);
      return before.map(leaseFromDb);
    });
  }

  decideSend: HubStore["decideSend"] = (query, decide) => this.messages.decideSend(query, decide);
  decideMessage: HubStore["decideMessage"] = (id, decide) => this.messages.decideMessage(id, decide);
  getMessage: HubStore["getMessage"] = (id) => this.messages.getMessage(id);
  listMessages: HubStore["listMessages"] = (query) => this.messages.listMessages(query);
  countMessages: HubStore["countMessages"] = () => this.messages.countMessages();
  listOpenMessages: HubStore["listOpenMessages"] = (project, limit) => this.messages.listOpenMessages(project, limit);
  expireMessages: HubStore["expireMessages"] = (error, change) => this.messages.expireMessages(error, change);
  purgeMessages: HubStore["purgeMessages"] = (retainMs) => this.messages.purgeMessages(retainMs);
  inboxState: HubStore["inboxState"] = (agentId) => this.messages.inboxState(agentId);
  readInbox: HubStore["readInbox"] = (agentId, afterSeq, limit) => this.messages.readInbox(agentId, afterSeq, limit);
  pendingMessages: HubStore["pendingMessages"] = (agentId, afterSeq, uptoSeq) => this.messages.pendingMessages(agentId, afterSeq, uptoSeq);

  tailInbox(onEvent: (agentId: string, seq: number) => void): () => void {
    return this.tail.add(this.messages.inboxReader(onEvent));
  }

  /**
   * Live leases and the head of the lease changes, read in one snapshot (REPEATABLE READ), so the
   * head is exactly the last change the leases reflect.
   */
  leaseSnapshot(project: string, nowMs: number): Promise<{ leases: LeaseRow[]; waiters: NamedWaiter[]; head: number }> {
    return this.snapshotRead(async (tx) => ({
      leases: (
        await tx.query<LeaseDb>(
          "SELECT * FROM leases WHERE project = $1 AND holder_agent_id IS NOT NULL AND expires_at > $2 ORDER BY name",
          [project, nowMs],
        )
      ).rows.map(leaseFromDb),
      waiters: (
        await tx.query<WaiterDb & { name: string }>("SELECT * FROM lease_waiters WHERE project = $1 ORDER BY name, seq", [project])
      ).rows.map((w) => ({ ...waiterFromDb(w), name: w.name })),
      head: (await tx.query<{ head: number }>(`SELECT ${changeHead} AS head`, [project, "leases"])).rows[0]!.head,
    }));
  }

  presenceSnapshot(project: string): Promise<{ agents: AgentRow[]; runtimes: RuntimeRow[]; head: number }> {
    return this.snapshotRead(async (tx) => ({
      agents: (await tx.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE project = $1 ORDER BY reg_seq`, [project])).rows.map(agentFromDb),
      runtimes: (await tx.query<RuntimeDb>("SELECT * FROM runtime_presence WHERE project = $1 ORDER BY runtime_id", [project])).rows.map(runtimeFromDb),
      head: (await tx.query<{ head: number }>(`SELECT ${changeHead} AS head`, [project, "presence"])).rows[0]!.head,
    }));
  }

  openMessagesSnapshot(project: string, limit: number): Promise<{ messages: MessageRow[]; total: number; head: number }> {
    const open = "project = $1 AND status IN ('queued', 'delivered')";
    return this.snapshotRead(async (tx) => ({
      messages: (
        await tx.query<MessageDb>(`SELECT * FROM messages WHERE ${open} ORDER BY created_at DESC, id DESC LIMIT $2`, [project, limit])
      ).rows.map(messageFromDb),
      total: (await tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM messages WHERE ${open}`, [project])).rows[0]!.n,
      head: (await tx.query<{ head: number }>(`SELECT ${changeHead} AS head`, [project, "messages"])).rows[0]!.head,
    }));
  }

  runsSnapshot(project: string): Promise<{ runs: SyncRunView[]; runtimes: RuntimeRow[]; head: number }> {
    return this.snapshotRead(async (tx) => ({
      runs: (await tx.query<RunViewDb>(runsOfProject, [project])).rows.map(runFromDb),
      runtimes: (await tx.query<RuntimeDb>("SELECT * FROM runtime_presence WHERE project = $1 ORDER BY runtime_id", [project])).rows.map(runtimeFromDb),
      head: (await tx.query<{ head: number }>(`SELECT ${changeHead} AS head`, [project, "runs"])).rows[0]!.head,
    }));
  }

  /** Several reads that see one snapshot of the database. */
  private async snapshotRead<T>(read: (tx: PgTx) => Promise<T>): Promise<T> {
    return runTransaction(this.pool, read, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
  }

  /** The changes and the head in one statement: one snapshot. */
  async readChanges(project: string, stream: ChangeStream, afterSeq: number, limit: number): Promise<ChangeRead> {
    const rows = await this.rows<{ head: number; seq: number | null; at_ms: number | null; body: string | null }>(
      `SELECT h.head, c.seq, c.at_ms, c.body FROM (SELECT ${changeHead} AS head) h
       LEFT JOIN LATERAL (SELECT seq, at_ms, body FROM watch_changes WHERE project = $1 AND stream = $2 AND seq > $3 ORDER BY seq LIMIT $4) c ON true
       ORDER BY c.seq`,
      [project, stream, afterSeq, limit],
    );
    return {
      head: rows[0]!.head,
      changes: rows
        .filter((r) => r.seq !== null)
        .map((r) => ({ project, stream, seq: r.seq!, atMs: r.at_ms!, body: JSON.parse(r.body!) as unknown })),
    };
  }

  /**
   * This store's own changes as soon as they commit; the other replicas' from the tail, every
   * `tailIntervalMs`, in the order of the transactions that wrote them (a watcher reads the store
   * for any gap that leaves).
   */
  tailChanges(onChange: (change: StreamChange) => void): () => void {
    const removeOwn = this.changeListeners.add(onChange);
    const removeTail = this.tail.add(async (from, to) => {
      const rows = await this.rows<{ project: string; stream: ChangeStream; seq: number; at_ms: number; body: string }>(
        `SELECT project, stream, seq, at_ms, body FROM watch_changes
         WHERE xid >= $1::xid8 AND xid < $2::xid8 AND origin <> $3 ORDER BY xid, project, stream, seq`,
        [from, to, this.origin],
      );
      for (const r of rows) onChange({ project: r.project, stream: r.stream, seq: r.seq, atMs: r.at_ms, body: JSON.parse(r.body) as unknown });
    });
    return () => {
      removeOwn();
      removeTail();
    };
  }

  /** Stream by stream, each its own transaction: a stream's old changes are a prefix of it. */
  async purgeChanges(retainMs: number, keep: number): Promise<number> {
    const heads = await this.rows<{ project: string; stream: string; head: number }>("SELECT project, stream, head FROM watch_heads");
    let purged = 0;
    for (const h of heads) {
      purged += await this.tx(async (tx) => {
        const cutoff = (await this.decisionTime(tx)) - retainMs;
        const r = await tx.query(
          `DELETE FROM watch_changes WHERE project = $1 AND stream = $2 AND seq < coalesce(
             (SELECT seq FROM watch_changes WHERE project = $1 AND stream = $2 AND seq >= $3 AND at_ms >= $4 ORDER BY seq LIMIT 1),
             $5 + 1)`,
          [h.project, h.stream, h.head - keep + 1, cutoff, h.head],
        );
        return r.rowCount ?? 0;
      });
    }
    return purged;
  }

  pushSyncEvents: HubStore["pushSyncEvents"] = (events, decide, changes) => this.sync.pushSyncEvents(events, decide, changes);
  getSyncCursor: HubStore["getSyncCursor"] = (hubProject, projectId, runId) => this.sync.getSyncCursor(hubProject, projectId, runId);
  listSyncRuns: HubStore["listSyncRuns"] = (hubProject) => this.sync.listSyncRuns(hubProject);

  /**
   * After the database was restored with PostgreSQL's own tools (README "Backup and restore"),
   * in ONE transaction: every resource's fence floor and the fence base go up by `margin`, every
   * lease is released, and every watch stream's numbers go up by `margin` with its stored changes
   * dropped, exactly as SQLite's restore does (store/sqlite/backup.ts, bumpFence); the same
   * transaction adds the `fence_raised` entry of the audit trail.
   */
  raiseFence(margin: number): Promise<{ resources: number; leasesReleased: number; highestTokenBefore: number; fenceBase: number }> {
    return this.tx(async (tx) => {
      // Locks the fence base first: decisions of hubs still running wait, or are refused after.
      const base = (await tx.query<{ floor: number }>("SELECT floor FROM fence_base WHERE id = 1 FOR UPDATE")).rows[0]!.floor;
      const [{ highest, held }] = (
        await tx.query<{ highest: number; held: number }>(
          "SELECT coalesce(max(fencing_token), 0)::bigint AS highest, (count(*) FILTER (WHERE holder_agent_id IS NOT NULL))::int AS held FROM leases",
        )
      ).rows as [{ highest: number; held: number }];
      if (Math.max(highest, base) + margin > Number.MAX_SAFE_INTEGER) {
        throw new RangeError(`token ${Math.max(highest, base)} + margin ${margin} would exceed ${Number.MAX_SAFE_INTEGER}`);
      }
      const bumped = await tx.query(
        "UPDATE leases SET fencing_token = fencing_token + $1, holder_agent_id = NULL, holder_agent_name = NULL",
        [margin],
      );
      await tx.query("UPDATE fence_base SET floor = floor + $1 WHERE id = 1", [margin]);
      await tx.query("UPDATE watch_heads SET head = head + $1", [margin]);
      await tx.query("DELETE FROM watch_changes");
      await tx.query("DELETE FROM lease_waiters");
      const summary = { resources: bumped.rowCount ?? 0, leasesReleased: held, highestTokenBefore: highest, fenceBase: base + margin };
      await tx.query("INSERT INTO audit_events (at_ms, project, kind, detail) VALUES ($1, '', 'fence_raised', $2)", [
        await this.decisionTime(tx),
        JSON.stringify({ margin, ...summary }),
      ]);
      return summary;
    });
  }
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
