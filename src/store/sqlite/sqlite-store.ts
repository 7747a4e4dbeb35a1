import type Database from "better-sqlite3";
import { changesOf } from "../store.js";
import type {
  AgentLeasesDecision,
  AgentRow,
  ChangeOf,
  HeldResource,
  NamedWaiter,
  ChangeRead,
  ChangeStream,
  CommitStats,
  Decision,
  HubStore,
  LeaseDecision,
  LeaseKey,
  LeaseRow,
  ListLeasesQuery,
  ProjectCounts,
  RuntimeRow,
  StoreClock,
  LeaseWaiter,
  MessageRow,
  StreamChange,
  SyncRunView,
} from "../store.js";
import { GroupCommit } from "../group-commit.js";
import { Checkpointer } from "./checkpointer.js";
import { fdatasyncWal, sqliteBatches, type RecordChange, type StoreAccess, type WalSync, type Work } from "./batch.js";
import { createSqliteMessages } from "./messages.js";
import { createSqliteTokens } from "./tokens.js";
import type { TokenStore } from "../token-store.js";
import { createSqliteSync } from "./sync.js";
import type { StoreLock } from "./lock.js";
import { openDatabase } from "./open.js";
import { agentFromDb, floorRow, leaseFromDb, runtimeFromDb, waiterFromDb, type AgentDb, type LeaseDb, type RuntimeDb, type WaiterDb } from "../rows.js";
import { byRegistration, ChangeListeners } from "../changes.js";

export interface SqliteStoreOptions {
  /** File path, or ":memory:". */
  path: string;
  /**
   * FULL (default): the WAL is synced after every commit and before any of its decisions is
   * answered, so every answered decision (a fencing token handed out, an accepted event)
   * survives a crash of the process and of the machine. NORMAL survives a process crash but may
   * lose the last commits on power loss.
   */
  synchronous: "full" | "normal";
  /** How FULL syncs the WAL (default: fdatasync of the `-wal` file, off the event loop). */
  walSync?: (file: string) => WalSync;
  /** Most decisions one batch commits together (default 128). */
  maxBatch?: number;
  /** WAL frames past which the store folds the WAL back itself (checkpointer.ts; default 4,096). */
  restartFrames?: number;
  /** The time each decision is made at (default: the system clock; the hub passes its own). */
  clock?: StoreClock;
}

const systemTime: StoreClock = { now: () => Date.now() };

/**
 * The embedded store. Decisions go through group commit (store/group-commit.ts): those that
 * arrive together run in one IMMEDIATE transaction, a savepoint each, and are answered after one
 * COMMIT and one WAL sync. Reads wait while a committed batch is not durable yet.
 */
export class SqliteStore implements HubStore {
  readonly storage: "sqlite" | "memory";
  private readonly db: Database.Database;
  private readonly lock: StoreLock | undefined;
  private readonly commits: GroupCommit<Work>;
  private walSync: WalSync | undefined;
  private readonly checkpointer: Checkpointer | undefined;
  private readonly q;
  private readonly messages;
  private readonly sync;
  readonly tokens: TokenStore;
  private readonly clock: StoreClock;
  private readonly changeListeners = new ChangeListeners();

  /** Opens the file and holds its process lock until close(); throws StoreOpenError (open.ts). */
  constructor(options: SqliteStoreOptions) {
    this.storage = options.path === ":memory:" ? "memory" : "sqlite";
    this.clock = options.clock ?? systemTime;
    ({ db: this.db, lock: this.lock } = openDatabase(options.path));
    const db = this.db;
    const syncs = options.synchronous === "full" && this.storage === "sqlite";
    const openSync = options.walSync ?? fdatasyncWal;
    if (this.storage === "sqlite") {
      // Checkpoints run in a worker thread, never inside a COMMIT on this one (checkpointer.ts);
      // a restarted WAL is truncated back to 16 MiB.
      db.pragma("wal_autocheckpoint = 0");
      db.pragma(`journal_size_limit = ${16 * 1024 * 1024}`);
      this.checkpointer = new Checkpointer(options.path, options.restartFrames);
    }
    const checkpointer = this.checkpointer;
    this.commits = new GroupCommit(
      sqliteBatches(db, () => (syncs ? (this.walSync ??= openSync(options.path)) : undefined), {
        beforeBatch() {
          if (!checkpointer?.restartDue()) return;
          db.pragma("wal_checkpoint(PASSIVE)");
          checkpointer.restarted();
        },
        wrote: () => checkpointer?.committed(),
      }),
      options.maxBatch,
    );
    this.q = {
      ping: db.prepare("SELECT 1 AS ok"),
      agentById: db.prepare<[string], AgentDb>("SELECT * FROM agents WHERE id = ?"),
      agentByName: db.prepare<[string, string], AgentDb>("SELECT * FROM agents WHERE project = ? AND name_key = ?"),
      agentsOfProject: db.prepare<[string], AgentDb>("SELECT * FROM agents WHERE project = ? ORDER BY rowid"),
      onlineCount: db.prepare<[], { n: number }>("SELECT count(*) AS n FROM agents WHERE online = 1"),
      projects: db.prepare<[number, number], { project: string; agents: number; online: number; held: number; open: number }>(
        `WITH names (project) AS (
           SELECT project FROM agents UNION SELECT project FROM leases WHERE holder_agent_id IS NOT NULL AND expires_at > ?
           UNION SELECT project FROM runtime_presence UNION SELECT hub_project FROM sync_runs)
         SELECT n.project,
           (SELECT count(*) FROM agents a WHERE a.project = n.project) AS agents,
           (SELECT count(*) FROM agents a WHERE a.project = n.project AND a.online = 1) AS online,
           (SELECT count(*) FROM leases l WHERE l.project = n.project AND l.holder_agent_id IS NOT NULL AND l.expires_at > ?) AS held,
           (SELECT count(*) FROM messages m WHERE m.project = n.project AND m.status IN ('queued', 'delivered')) AS open
         FROM names n ORDER BY n.project`,
      ),
      upsertAgent: db.prepare(
        `INSERT INTO agents (id, project, name, name_key, purpose, model, host, key_hash, connected_at, last_seen_at, online)
         VALUES (@id, @project, @name, @name_key, @purpose, @model, @host, @key_hash, @connected_at, @last_seen_at, @online)
         ON CONFLICT (id) DO UPDATE SET project = excluded.project, name = excluded.name, name_key = excluded.name_key,
           purpose = excluded.purpose, model = excluded.model, host = excluded.host, key_hash = excluded.key_hash,
           connected_at = excluded.connected_at, last_seen_at = excluded.last_seen_at, online = excluded.online`,
      ),
      allOffline: db.prepare<[], AgentDb & { reg: number }>("UPDATE agents SET online = 0 WHERE online = 1 RETURNING rowid AS reg, *"),
      staleAgents: db.prepare<[number], AgentDb & { reg: number }>(
        "UPDATE agents SET online = 0 WHERE online = 1 AND last_seen_at < ? RETURNING rowid AS reg, *",
      ),
      runtime: db.prepare<[string, string], RuntimeDb>(
        "SELECT * FROM runtime_presence WHERE project = ? AND runtime_id = ?",
      ),
      runtimesOfProject: db.prepare<[string], RuntimeDb>(
        "SELECT * FROM runtime_presence WHERE project = ? ORDER BY runtime_id",
      ),
      expiredRuntimes: db.prepare<[number], RuntimeDb>(
        "UPDATE runtime_presence SET expiry_noted = 1 WHERE expiry_noted = 0 AND heartbeat_at <= ? RETURNING *",
      ),
      upsertRuntime: db.prepare(
        `INSERT INTO runtime_presence (project, runtime_id, host, registered_at, heartbeat_at)
         VALUES (@project, @runtime_id, @host, @registered_at, @heartbeat_at)
         ON CONFLICT (project, runtime_id) DO UPDATE SET host = excluded.host,
           registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at, expiry_noted = 0`,
      ),
      lease: db.prepare<[string, string], LeaseDb>("SELECT * FROM leases WHERE project = ? AND name = ?"),
      fenceBase: db.prepare<[], { floor: number }>("SELECT coalesce(max(floor), 0) AS floor FROM fence_base"),
      upsertLease: db.prepare(
        `INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at)
         VALUES (@project, @name, @holder_agent_id, @holder_agent_name, @fencing_token, @acquired_at, @expires_at)
         ON CONFLICT (project, name) DO UPDATE SET holder_agent_id = excluded.holder_agent_id,
           holder_agent_name = excluded.holder_agent_name, fencing_token = excluded.fencing_token,
           acquired_at = excluded.acquired_at, expires_at = excluded.expires_at`,
      ),
      listLeases: db.prepare<[string, string, number, number, number], LeaseDb>(
        `SELECT * FROM leases WHERE project = ? AND name > ? AND holder_agent_id IS NOT NULL
           AND (? = 1 OR expires_at > ?) ORDER BY name LIMIT ?`,
      ),
      lapsedLeases: db.prepare<[number], LeaseDb>(
        "SELECT * FROM leases WHERE holder_agent_id IS NOT NULL AND expires_at <= ?",
      ),
      purgeLeases: db.prepare(
        `UPDATE leases SET holder_agent_id = NULL, holder_agent_name = NULL
         WHERE holder_agent_id IS NOT NULL AND expires_at <= ?`,
      ),
      liveLeases: db.prepare<[string, number], LeaseDb>(
        "SELECT * FROM leases WHERE project = ? AND holder_agent_id IS NOT NULL AND expires_at > ? ORDER BY name",
      ),
      nextChange: db.prepare<[string, string], { head: number }>(
        "UPDATE watch_heads SET head = head + 1 WHERE project = ? AND stream = ? RETURNING head",
      ),
      // A stream's first change is numbered from the fence base, which a restore raises.
      firstChange: db.prepare<[string, string], { head: number }>(
        "INSERT INTO watch_heads (project, stream, head) SELECT ?, ?, coalesce(max(floor), 0) + 1 FROM fence_base RETURNING head",
      ),
      insertChange: db.prepare("INSERT INTO watch_changes (project, stream, seq, at_ms, body) VALUES (?, ?, ?, ?, ?)"),
      changeHead: db.prepare<[string, string], { head: number }>(
        `SELECT coalesce((SELECT head FROM watch_heads WHERE project = ? AND stream = ?),
           (SELECT coalesce(max(floor), 0) FROM fence_base)) AS head`,
      ),
      changesAfter: db.prepare<[string, string, number, number], { seq: number; at_ms: number; body: string }>(
        "SELECT seq, at_ms, body FROM watch_changes WHERE project = ? AND stream = ? AND seq > ? ORDER BY seq LIMIT ?",
      ),
      heads: db.prepare<[], { project: string; stream: string; head: number }>("SELECT project, stream, head FROM watch_heads"),
      // A stream's changes are in commit order, so its old ones are a prefix: the rows before the
      // first one to keep (recent enough, and among the last `keep`).
      waiters: db.prepare<[string, string], WaiterDb>("SELECT * FROM lease_waiters WHERE project = ? AND name = ? ORDER BY seq"),
      removeWaiter: db.prepare("DELETE FROM lease_waiters WHERE project = ? AND name = ? AND id = ?"),
      addWaiter: db.prepare(
        `INSERT INTO lease_waiters (project, name, seq, id, agent_id, agent_name, ttl_ms, deadline_ms, since_ms)
         SELECT @project, @name, coalesce(max(seq), 0) + 1, @id, @agent_id, @agent_name, @ttl_ms, @deadline_ms, @since_ms
         FROM lease_waiters WHERE project = @project AND name = @name`,
      ),
      clearWaiters: db.prepare("DELETE FROM lease_waiters"),
      waitersOfProject: db.prepare<[string], WaiterDb & { name: string }>("SELECT * FROM lease_waiters WHERE project = ? ORDER BY name, seq"),
      leasesOfAgent: db.prepare<{ project: string; agent: string }, LeaseDb>(
        `SELECT * FROM leases WHERE project = @project AND (holder_agent_id = @agent
           OR name IN (SELECT name FROM lease_waiters WHERE project = @project AND agent_id = @agent)) ORDER BY name`,
      ),
      forgettable: db.prepare<[number, number], AgentDb>(
        `SELECT * FROM agents a WHERE online = 0 AND last_seen_at <= ?
           AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.status IN ('queued', 'delivered') AND (m.to_id = a.id OR m.from_id = a.id))
           AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.project = a.project AND l.holder_agent_id = a.id AND l.expires_at > ?)
         ORDER BY rowid`,
      ),
      deleteAgent: db.prepare("DELETE FROM agents WHERE id = ?"),
      deleteInboxStream: db.prepare("DELETE FROM inbox_streams WHERE agent_id = ?"),
      deleteInboxEvents: db.prepare("DELETE FROM inbox_events WHERE agent_id = ?"),
      purgeStream: db.prepare<{ project: string; stream: string; cutoff: number; lowest: number; head: number }>(
        `DELETE FROM watch_changes WHERE project = @project AND stream = @stream AND seq < coalesce(
           (SELECT seq FROM watch_changes WHERE project = @project AND stream = @stream AND seq >= @lowest AND at_ms >= @cutoff ORDER BY seq LIMIT 1),
           @head + 1)`,
      ),
    };
    const access: StoreAccess = {
      tx: (fn) => this.tx(fn),
      changeTx: (fn) => this.changeTx(fn),
      read: (fn) => this.read(fn),
      peek: (fn) => (this.commits.failed !== undefined ? Promise.reject(this.commits.failed) : Promise.resolve(fn())),
      now: () => this.clock.now(),
    };
    this.messages = createSqliteMessages(db, access);
    this.sync = createSqliteSync(db, access);
    this.tokens = createSqliteTokens(db, access);
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
  pendingMessages: HubStore["pendingMessages"] = (agentId, afterSeq, uptoSeq) =>
    this.messages.pendingMessages(agentId, afterSeq, uptoSeq);

  pushSyncEvents: HubStore["pushSyncEvents"] = (events, decide, changes) => this.sync.pushSyncEvents(events, decide, changes);
  getSyncCursor: HubStore["getSyncCursor"] = (hubProject, projectId, runId) =>
    this.sync.getSyncCursor(hubProject, projectId, runId);
  listSyncRuns: HubStore["listSyncRuns"] = (hubProject) => this.sync.listSyncRuns(hubProject);

  /**
   * Runs `fn` as one decision of the next batch (its own savepoint in the batch's transaction;
   * never spans an `await`); resolves once the batch is durable.
   */
  private tx<T>(fn: () => T): Promise<T> {
    return this.commits.submit<T>(fn);
  }

  /**
   * Runs `fn` as one decision that may record changes (`record`); they are handed to the change
   * listeners once the decision is durable, never when it is rolled back.
   */
  private changeTx<T>(fn: (record: RecordChange) => T): Promise<T> {
    return this.tx(() => {
      const changes: StreamChange[] = [];
      const result = fn((project, stream, body, atMs) => {
        const seq = (this.q.nextChange.get(project, stream) ?? this.q.firstChange.get(project, stream)!).head;
        this.q.insertChange.run(project, stream, seq, atMs, JSON.stringify(body));
        changes.push({ project, stream, seq, atMs, body });
      });
      return { result, changes };
    }).then(({ result, changes }) => {
      this.changeListeners.emit(changes);
      return result;
    });
  }

  /** Runs a read once every commit made so far is durable. */
  private async read<T>(fn: () => T): Promise<T> {
    const pending = this.commits.durable();
    if (pending) await pending;
    if (this.commits.failed !== undefined) throw this.commits.failed;
    return fn();
  }

  /** Batches committed and the decisions in them, since the store opened (metrics). */
  commitStats(): Readonly<CommitStats> {
    return this.commits.stats;
  }

  async ready(): Promise<boolean> {
    if (this.commits.failed !== undefined) return false;
    try {
      return (this.q.ping.get() as { ok: number }).ok === 1;
    } catch {
      return false;
    }
  }

  /** The floor row of a resource that has none, or undefined while the fence base is 0. */
  private floorOf(key: LeaseKey): LeaseDb | undefined {
    const base = this.q.fenceBase.get()!.floor;
    return base > 0 ? floorRow(key, base) : undefined;
  }

  /** Commits what is queued, then closes the file and releases its lock. */
  async close(): Promise<void> {
    await this.commits.idle();
    await this.checkpointer?.close();
    this.walSync?.close();
    this.walSync = undefined;
    if (this.db.open) this.db.close();
    this.lock?.release();
  }

  private agentRow(id: string): AgentRow | undefined {
    const r = this.q.agentById.get(id);
    return r && agentFromDb(r);
  }

  getAgent(id: string): Promise<AgentRow | undefined> {
    return this.read(() => this.agentRow(id));
  }

  async peekAgent(id: string): Promise<AgentRow | undefined> {
    if (this.commits.failed !== undefined) throw this.commits.failed;
    return this.agentRow(id);
  }

  listAgents(project: string): Promise<AgentRow[]> {
    return this.read(() => this.q.agentsOfProject.all(project).map(agentFromDb));
  }

  countOnlineAgents(): Promise<number> {
    return this.read(() => this.q.onlineCount.get()!.n);
  }

  listProjects(nowMs: number): Promise<ProjectCounts[]> {
    return this.read(() =>
      this.q.projects
        .all(nowMs, nowMs)
        .map((r) => ({ project: r.project, agents: r.agents, onlineAgents: r.online, heldLeases: r.held, openMessages: r.open })),
    );
  }

  private writeAgent(a: AgentRow): void {
    this.q.upsertAgent.run({
      id: a.id,
      project: a.project,
      name: a.name,
      name_key: a.name.toLowerCase(),
      purpose: a.purpose,
      model: a.model ?? null,
      host: a.host ?? null,
      key_hash: a.keyHash,
      connected_at: a.connectedAtMs,
      last_seen_at: a.lastSeenAtMs,
      online: a.online ? 1 : 0,
    });
  }

  decideRegistration<T>(
    project: string,
    nameKey: string,
    decide: (existing: AgentRow | undefined, nowMs: number) => Decision<AgentRow, T>,
  ): Promise<T> {
    return this.changeTx((record) => {
      const r = this.q.agentByName.get(project, nameKey);
      const nowMs = this.clock.now();
      const d = decide(r && agentFromDb(r), nowMs);
      if (d.write) this.writeAgent(d.write);
      for (const c of changesOf(d)) record(project, c.stream, c.body, nowMs);
      return d.result;
    });
  }

  decideAgent<T>(id: string, decide: (current: AgentRow | undefined, nowMs: number) => Decision<AgentRow, T>): Promise<T> {
    return this.changeTx((record) => {
      const r = this.q.agentById.get(id);
      const nowMs = this.clock.now();
      const d = decide(r && agentFromDb(r), nowMs);
      if (d.write) this.writeAgent(d.write);
      const project = d.write?.project ?? r?.project;
      for (const c of changesOf(d)) {
        if (project === undefined) throw new Error(`a decision on unknown agent ${id} recorded a change`);
        record(project, c.stream, c.body, nowMs);
      }
      return d.result;
    });
  }

  async markAllAgentsOffline(change: ChangeOf<AgentRow>): Promise<void> {
    await this.sweep(() => byRegistration(this.q.allOffline.all()).map(agentFromDb), change);
  }

  sweepStaleAgents(staleAfterMs: number, change: ChangeOf<AgentRow>): Promise<AgentRow[]> {
    return this.sweep((nowMs) => byRegistration(this.q.staleAgents.all(nowMs - staleAfterMs)).map(agentFromDb), change);
  }

  /** One sweep decision: the rows `update` changes at the store's time, each recorded with its change. */
  private sweep<R extends { project: string }>(update: (nowMs: number) => R[], change: ChangeOf<R>): Promise<R[]> {
    return this.changeTx((record) => {
      const nowMs = this.clock.now();
      const rows = update(nowMs);
      for (const row of rows) {
        const c = change(row, nowMs);
        record(row.project, c.stream, c.body, nowMs);
      }
      return rows;
    });
  }

  decideRuntime<T>(
    project: string,
    runtimeId: string,
    decide: (current: RuntimeRow | undefined, nowMs: number) => Decision<RuntimeRow, T>,
  ): Promise<T> {
    return this.changeTx((record) => {
      const r = this.q.runtime.get(project, runtimeId);
      const nowMs = this.clock.now();
      const d = decide(r && runtimeFromDb(r), nowMs);
      if (d.write) {
        this.q.upsertRuntime.run({
          project: d.write.project,
          runtime_id: d.write.runtimeId,
          host: d.write.host ?? null,
          registered_at: d.write.registeredAtMs,
          heartbeat_at: d.write.heartbeatAtMs,
        });
      }
      for (const c of changesOf(d)) record(project, c.stream, c.body, nowMs);
      return d.result;
    });
  }

  listRuntimes(project: string): Promise<RuntimeRow[]> {
    return this.read(() => this.q.runtimesOfProject.all(project).map(runtimeFromDb));
  }

  sweepExpiredRuntimes(staleAfterMs: number, change: ChangeOf<RuntimeRow>): Promise<RuntimeRow[]> {
    return this.sweep(
      (nowMs) =>
        this.q.expiredRuntimes
          .all(nowMs - staleAfterMs)
          .map(runtimeFromDb)
          .sort((a, b) => (a.project === b.project ? cmp(a.runtimeId, b.runtimeId) : cmp(a.project, b.project))),
      change,
    );
  }

  decideLease<T>(
    key: LeaseKey,
    decide: (current: LeaseRow | undefined, nowMs: number, waiters: LeaseWaiter[], holder: AgentRow | undefined) => LeaseDecision<T>,
    holderId?: string,
  ): Promise<T> {
    return this.changeTx((record) => {
      // A resource without a row stands on the store's fence base (0 until a restore raised it):
      // the rules see it as a released floor, so its first grant is base + 1 (README §5.2).
      const r = this.q.lease.get(key.project, key.name) ?? this.floorOf(key);
      const nowMs = this.clock.now();
      const holder = holderId === undefined ? undefined : this.agentRow(holderId);
      const d = decide(r && leaseFromDb(r), nowMs, this.q.waiters.all(key.project, key.name).map(waiterFromDb), holder);
      this.applyLease(key, r, d, record, nowMs);
      return d.result;
    });
  }

  /** Writes what a lease decision on `key` decided (its row `r` as read), inside the caller's transaction. */
  private applyLease(key: LeaseKey, r: LeaseDb | undefined, d: LeaseDecision<unknown>, record: RecordChange, nowMs: number): void {
    for (const id of d.queue?.remove ?? []) this.q.removeWaiter.run(key.project, key.name, id);
    const add = d.queue?.add;
    if (add) this.q.addWaiter.run({ project: key.project, name: key.name, id: add.id, agent_id: add.agentId, agent_name: add.agentName, ttl_ms: add.ttlMs, deadline_ms: add.deadlineMs, since_ms: add.sinceMs });
    if (d.write) {
      // A decision writes the row it was shown, never another key: that is the isolation.
      if (d.write.project !== key.project || d.write.name !== key.name) {
        throw new Error(`a lease decision on ${JSON.stringify(key)} tried to write another lease`);
      }
      if (r && d.write.fencingToken < r.fencing_token) {
        // The fence only grows; a decision that would lower it is a bug, never a write.
        throw new Error(`fencing token for ${JSON.stringify(key)} would go down from ${r.fencing_token}`);
      }
      this.q.upsertLease.run({
        project: d.write.project,
        name: d.write.name,
        holder_agent_id: d.write.holderAgentId,
        holder_agent_name: d.write.holderAgentName,
        fencing_token: d.write.fencingToken,
        acquired_at: d.write.acquiredAtMs,
        expires_at: d.write.expiresAtMs,
      });
    }
    for (const c of changesOf(d)) record(key.project, c.stream, c.body, nowMs);
  }

  decideAgentLeases<T>(
    find: { agentId: string } | { project: string; nameKey: string },
    decide: (agent: AgentRow | undefined, held: HeldResource[], nowMs: number) => AgentLeasesDecision<T>,
  ): Promise<T> {
    return this.changeTx((record) => {
      const r = "agentId" in find ? this.q.agentById.get(find.agentId) : this.q.agentByName.get(find.project, find.nameKey);
      const nowMs = this.clock.now();
      const rows = r ? this.q.leasesOfAgent.all({ project: r.project, agent: r.id }) : [];
      const held = rows.map((l) => ({ lease: leaseFromDb(l), waiters: this.q.waiters.all(l.project, l.name).map(waiterFromDb) }));
      const d = decide(r && agentFromDb(r), held, nowMs);
      if (d.write) this.writeAgent(d.write);
      const project = d.write?.project ?? r?.project;
      if (project === undefined && (changesOf(d).length > 0 || d.leases?.length)) throw new Error("a decision on an unknown agent wrote leases or changes");
      for (const c of changesOf(d)) record(project!, c.stream, c.body, nowMs);
      for (const { key, decision } of d.leases ?? []) {
        const row = rows.find((l) => l.project === key.project && l.name === key.name);
        if (!row) throw new Error(`an agent decision tried to decide lease ${JSON.stringify(key)}, which it was not shown`);
        this.applyLease(key, row, decision, record, nowMs);
      }
      return d.result;
    });
  }

  forgetAgents(retainMs: number): Promise<AgentRow[]> {
    return this.tx(() => {
      const nowMs = this.clock.now();
      const gone = this.q.forgettable.all(nowMs - retainMs, nowMs).map(agentFromDb);
      for (const a of gone) {
        this.q.deleteInboxEvents.run(a.id);
        this.q.deleteInboxStream.run(a.id);
        this.q.deleteAgent.run(a.id);
      }
      return gone;
    });
  }

  leaseWaiters(project: string, name?: string): Promise<NamedWaiter[]> {
    return this.read(() =>
      name === undefined
        ? this.q.waitersOfProject.all(project).map((w) => ({ ...waiterFromDb(w), name: w.name }))
        : this.q.waiters.all(project, name).map((w) => ({ ...waiterFromDb(w), name })),
    );
  }

  async clearLeaseWaiters(): Promise<void> {
    await this.tx(() => this.q.clearWaiters.run());
  }

  getLease(key: LeaseKey): Promise<LeaseRow | undefined> {
    return this.read(() => {
      const r = this.q.lease.get(key.project, key.name);
      return r && leaseFromDb(r);
    });
  }

  listLeases(query: ListLeasesQuery): Promise<LeaseRow[]> {
    return this.read(() =>
      this.q.listLeases
        .all(query.project, query.afterName ?? "", query.includeExpired ? 1 : 0, query.nowMs, query.limit)
        .map(leaseFromDb),
    );
  }

  purgeLapsedLeases(afterMs: number): Promise<LeaseRow[]> {
    return this.tx(() => {
      const cutoffMs = this.clock.now() - afterMs;
      const before = this.q.lapsedLeases.all(cutoffMs);
      this.q.purgeLeases.run(cutoffMs);
      return before.map(leaseFromDb);
    });
  }

  leaseSnapshot(project: string, nowMs: number): Promise<{ leases: LeaseRow[]; waiters: NamedWaiter[]; head: number }> {
    return this.read(() => ({
      leases: this.q.liveLeases.all(project, nowMs).map(leaseFromDb),
      waiters: this.q.waitersOfProject.all(project).map((w) => ({ ...waiterFromDb(w), name: w.name })),
      head: this.q.changeHead.get(project, "leases")!.head,
    }));
  }

  openMessagesSnapshot(project: string, limit: number): Promise<{ messages: MessageRow[]; total: number; head: number }> {
    return this.read(() => ({ ...this.messages.openNow(project, limit), head: this.q.changeHead.get(project, "messages")!.head }));
  }

  runsSnapshot(project: string): Promise<{ runs: SyncRunView[]; runtimes: RuntimeRow[]; head: number }> {
    return this.read(() => ({
      runs: this.sync.runsNow(project),
      runtimes: this.q.runtimesOfProject.all(project).map(runtimeFromDb),
      head: this.q.changeHead.get(project, "runs")!.head,
    }));
  }

  presenceSnapshot(project: string): Promise<{ agents: AgentRow[]; runtimes: RuntimeRow[]; head: number }> {
    return this.read(() => ({
      agents: this.q.agentsOfProject.all(project).map(agentFromDb),
      runtimes: this.q.runtimesOfProject.all(project).map(runtimeFromDb),
      head: this.q.changeHead.get(project, "presence")!.head,
    }));
  }

  readChanges(project: string, stream: ChangeStream, afterSeq: number, limit: number): Promise<ChangeRead> {
    return this.read(() => ({
      changes: this.q.changesAfter
        .all(project, stream, afterSeq, limit)
        .map((r) => ({ project, stream, seq: r.seq, atMs: r.at_ms, body: JSON.parse(r.body) as unknown })),
      head: this.q.changeHead.get(project, stream)!.head,
    }));
  }

  /** Only this store writes the file: its own changes are all there are. */
  tailChanges(onChange: (change: StreamChange) => void): () => void {
    return this.changeListeners.add(onChange);
  }

  purgeChanges(retainMs: number, keep: number): Promise<number> {
    return this.tx(() => {
      const cutoff = this.clock.now() - retainMs;
      let purged = 0;
      for (const h of this.q.heads.all()) {
        purged += this.q.purgeStream.run({ project: h.project, stream: h.stream, cutoff, lowest: h.head - keep + 1, head: h.head }).changes;
      }
      return purged;
    });
  }
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
