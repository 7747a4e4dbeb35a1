import pg from "pg";
import { StoreOpenError, type AgentRow, type CommitStats, type Decision, type HubStore, type LeaseKey, type LeaseRow, type ListLeasesQuery, type ProjectCounts, type RuntimeRow, type StoreClock } from "../store.js";
import { runTransaction, storeError, type PgTx } from "./transaction.js";
import { migrate } from "./schema.js";
import { createPostgresMessages } from "./messages.js";
import { createPostgresSync } from "./sync.js";
import { agentColumns } from "./rows.js";
import { agentFromDb, floorRow, leaseFromDb, runtimeFromDb, type AgentDb, type LeaseDb, type RuntimeDb } from "../rows.js";

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
 * How often a hub looks for inbox events other hubs committed: the most a message sent through
 * one hub waits before a Subscribe stream on another hears of it (plus the commit of any older
 * transaction still running).
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

  private constructor(
    private readonly pool: pg.Pool,
    private readonly clock: StoreClock | undefined,
  ) {
    const access = {
      tx: <T>(work: (tx: PgTx) => Promise<T>) => this.tx(work),
      rows: <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => this.rows<R>(sql, params),
      now: (tx: PgTx) => this.now(tx),
    };
    this.messages = createPostgresMessages(access);
    this.sync = createPostgresSync(access);
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
    return new PostgresStore(pool, o.clock);
  }

  /** The time of a decision, read after its rows are locked: the injected clock, else the database's. */
  private async now(tx: PgTx): Promise<number> {
    if (this.clock) return this.clock.now();
    const r = await tx.query<{ now: number }>("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now");
    return r.rows[0]!.now;
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
    const rows = await this.rows<{ project: string; agents: number; online: number; held: number }>(
      `WITH names (project) AS (
         SELECT project FROM agents UNION SELECT project FROM leases WHERE holder_agent_id IS NOT NULL AND expires_at > $1
         UNION SELECT project FROM runtime_presence UNION SELECT hub_project FROM sync_runs)
       SELECT n.project,
         (SELECT count(*)::int FROM agents a WHERE a.project = n.project) AS agents,
         (SELECT count(*)::int FROM agents a WHERE a.project = n.project AND a.online) AS online,
         (SELECT count(*)::int FROM leases l WHERE l.project = n.project AND l.holder_agent_id IS NOT NULL AND l.expires_at > $1) AS held
       FROM names n ORDER BY n.project`,
      [nowMs],
    );
    return rows.map((r) => ({ project: r.project, agents: r.agents, onlineAgents: r.online, heldLeases: r.held }));
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
    return this.tx(async (tx) => {
      const [r] = (await tx.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE project = $1 AND name_key = $2 FOR UPDATE`, [project, nameKey])).rows;
      const d = decide(r && agentFromDb(r), await this.now(tx));
      if (d.write) await this.writeAgent(tx, d.write);
      return d.result;
    });
  }

  decideAgent<T>(id: string, decide: (current: AgentRow | undefined, nowMs: number) => Decision<AgentRow, T>): Promise<T> {
    return this.tx(async (tx) => {
      const [r] = (await tx.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE id = $1 FOR UPDATE`, [id])).rows;
      const d = decide(r && agentFromDb(r), await this.now(tx));
      if (d.write) await this.writeAgent(tx, d.write);
      return d.result;
    });
  }

  async markAllAgentsOffline(): Promise<void> {
    await this.tx((tx) => tx.query("UPDATE agents SET online = false WHERE online"));
  }

  sweepStaleAgents(cutoffMs: number): Promise<AgentRow[]> {
    return this.tx(async (tx) =>
      (
        await tx.query<AgentDb>(
          `WITH swept AS (UPDATE agents SET online = false WHERE online AND last_seen_at < $1 RETURNING reg_seq, ${agentColumns})
           SELECT ${agentColumns} FROM swept ORDER BY reg_seq`,
          [cutoffMs],
        )
      ).rows.map(agentFromDb),
    );
  }

  decideRuntime<T>(project: string, runtimeId: string, decide: (current: RuntimeRow | undefined, nowMs: number) => Decision<RuntimeRow, T>): Promise<T> {
    return this.tx(async (tx) => {
      const [r] = (await tx.query<RuntimeDb>("SELECT * FROM runtime_presence WHERE project = $1 AND runtime_id = $2 FOR UPDATE", [project, runtimeId])).rows;
      const d = decide(r && runtimeFromDb(r), await this.now(tx));
      if (d.write) {
        await tx.query(
          `INSERT INTO runtime_presence (project, runtime_id, host, registered_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (project, runtime_id) DO UPDATE SET host = excluded.host,
             registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at`,
          [d.write.project, d.write.runtimeId, d.write.host ?? null, d.write.registeredAtMs, d.write.heartbeatAtMs],
        );
      }
      return d.result;
    });
  }

  async listRuntimes(project: string): Promise<RuntimeRow[]> {
    return (await this.rows<RuntimeDb>("SELECT * FROM runtime_presence WHERE project = $1 ORDER BY runtime_id", [project])).map(runtimeFromDb);
  }

  async listRuntimesHeartbeatBetween(afterMs: number, uptoMs: number): Promise<RuntimeRow[]> {
    return (
      await this.rows<RuntimeDb>(
        "SELECT * FROM runtime_presence WHERE heartbeat_at > $1 AND heartbeat_at <= $2 ORDER BY project, runtime_id",
        [afterMs, uptoMs],
      )
    ).map(runtimeFromDb);
  }

  decideLease<T>(key: LeaseKey, decide: (current: LeaseRow | undefined, nowMs: number) => Decision<LeaseRow, T>): Promise<T> {
    return this.tx(async (tx) => {
      // The row, locked until the decision commits: decisions on one resource from every replica
      // take turns. A resource without a row stands on the fence base (0 until a restore raised it).
      const [row] = (await tx.query<LeaseDb>("SELECT * FROM leases WHERE project = $1 AND name = $2 FOR UPDATE", [key.project, key.name])).rows;
      let current = row;
      if (!current) {
        const base = (await tx.query<{ floor: number }>("SELECT floor FROM fence_base WHERE id = 1")).rows[0]?.floor ?? 0;
        if (base > 0) current = floorRow(key, base);
      }
      const d = decide(current && leaseFromDb(current), await this.now(tx));
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
      return d.result;
    });
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

  purgeLapsedLeases(cutoffMs: number): Promise<LeaseRow[]> {
    return this.tx(async (tx) => {
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
  expireMessages: HubStore["expireMessages"] = (nowMs, error) => this.messages.expireMessages(nowMs, error);
  purgeMessages: HubStore["purgeMessages"] = (cutoffMs) => this.messages.purgeMessages(cutoffMs);
  inboxState: HubStore["inboxState"] = (agentId) => this.messages.inboxState(agentId);
  readInbox: HubStore["readInbox"] = (agentId, afterSeq, limit) => this.messages.readInbox(agentId, afterSeq, limit);
  pendingMessages: HubStore["pendingMessages"] = (agentId, afterSeq, uptoSeq) => this.messages.pendingMessages(agentId, afterSeq, uptoSeq);

  tailInbox(onEvent: (agentId: string, seq: number) => void): () => void {
    return this.messages.tailInbox(onEvent, tailIntervalMs);
  }

  pushSyncEvents: HubStore["pushSyncEvents"] = (events, decide) => this.sync.pushSyncEvents(events, decide);
  getSyncCursor: HubStore["getSyncCursor"] = (hubProject, projectId, runId) => this.sync.getSyncCursor(hubProject, projectId, runId);
  listSyncRuns: HubStore["listSyncRuns"] = (hubProject) => this.sync.listSyncRuns(hubProject);
}
