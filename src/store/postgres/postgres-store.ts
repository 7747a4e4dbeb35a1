import { randomUUID } from "node:crypto";
import pg from "pg";
import type { AgentStore } from "../agent-store.js";
import type { ChangeFeed, StreamChange } from "../change-feed.js";
import type { LeaseStore } from "../lease-store.js";
import type { MessageStore } from "../message-store.js";
import { StoreOpenError, StoreUnavailable, type CommitStats, type HubStore, type ProjectCounts, type StoreClock } from "../store.js";
import type { SyncStore } from "../sync-store.js";
import type { TokenStore } from "../token-store.js";
import { createPostgresAgents } from "./agents.js";
import { createPostgresChanges, type LockedHeads, type RecordedChange } from "./changes.js";
import { StoreClient } from "./client.js";
import { listenForInbox, newReplicaKey } from "./inbox-notify.js";
import { createPostgresLeases } from "./leases.js";
import { createPostgresMessages } from "./messages.js";
import { migrate } from "./schema.js";
import { createPostgresSync } from "./sync.js";
import { createTail } from "./tail.js";
import { createPostgresTokens } from "./tokens.js";
import { InFlight } from "../../in-flight.js";
import { GroupCommit } from "../group-commit.js";
import { pgBatches, recorder, type BatchWork, type SegmentKind } from "./batches.js";
import { namedStatement, runTransaction, storeError, together, type PgAccess, type PgChangeWork, type PgTx } from "./transaction.js";

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
  /**
   * How often the tail looks for what other replicas committed (tail.ts). Default 20 ms; inbox
   * events also wake it at once (inbox-notify.ts). Tests set it long to see the wake alone.
   */
  tailIntervalMs?: number;
  /**
   * How often it looks while nobody on this hub listens (ChangeFeed.tailChanges `listening`).
   * Default 1 s; someone starting to listen makes it look at once.
   */
  tailIdleMs?: number;
  /** How long a look of the tail may go unanswered before it is given up (tail.ts; tests shorten it). */
  tailLookTimeoutMs?: number;
  /**
   * How long the server lets a transaction of this hub sit idle before it ends it with its
   * session (sessionSetup). Default 10 s; tests shorten it.
   */
  idleInTransactionMs?: number;
}

/**
 * What every connection of a hub (the pool's, and the one that listens) is made with: a
 * connection whose peer went silent errors in the end (the kernel's probes of this side's
 * socket), and is let go, instead of holding what it was asked forever (the tail also gives up a
 * look: tail.ts). What it asks the server for its session is `sessionSetup`.
 */
function connectionOptions(url: string): pg.ClientConfig {
  return { connectionString: url, connectionTimeoutMillis: 5_000, keepAlive: true, keepAliveInitialDelayMillis: 10_000 };
}

/**
 * The first statement on every connection of a hub, before anything else it is asked (D90):
 * - `kxm.replica`, what its notifications name it by (migration 010);
 * - a transaction left idle longer than $2 is ended by the server, with its session
 *   (`idle_in_transaction_session_timeout`). A hub's transactions are idle only between its round
 *   trips, for milliseconds: one idle for seconds belongs to a hub that is gone or stuck;
 * - a connection silent for 10 s is probed every 5 s, and dropped after 3 probes unanswered
 *   (`tcp_keepalives_*`, the server's side of the socket; a Unix socket has none), and one whose
 *   data sent has gone unacknowledged for 25 s is dropped too (`tcp_user_timeout`: probes are
 *   only sent on a connection with nothing in flight, such as a notification to a gone hub).
 * Each only where the server has it (`tcp_user_timeout` from PostgreSQL 12) and nothing else set
 * it (`pg_settings.source` is 'default'): a value from the server's configuration, the
 * database's or the role's settings, or the database URL wins.
 * Settings, not startup parameters: a pooler in front of the server (PgBouncer) refuses
 * parameters it does not know at connection time.
 * So a hub whose host is gone without closing its connections (powered off, cut off from the
 * network) holds its project's head rows, and what its batch locked, for $2 at most: the other
 * hubs' decisions on that project wait that long, not until the server's kernel gives up on the
 * socket (two hours by default). Its liveness lock (D79), held by a session outside any
 * transaction, goes within about 25 s.
 * @NOTE decision D90.
 */
const sessionSetup = `SELECT set_config('kxm.replica', $1, false),
  (SELECT count(set_config(s.name, s.value, false))
   FROM (VALUES ('idle_in_transaction_session_timeout', $2::text), ('tcp_keepalives_idle', '10'), ('tcp_keepalives_interval', '5'), ('tcp_keepalives_count', '3'),
     ('tcp_user_timeout', '25000')) AS s (name, value)
   JOIN pg_settings p ON p.name = s.name WHERE p.source = 'default') AS set`;

/** How long the server lets a transaction of a hub sit idle before it ends it (sessionSetup). */
const idleInTransactionMs = 10_000;

/**
 * How often a hub looks for what other hubs committed (inbox events, watch changes): the most a
 * message sent through one hub waits before a Subscribe stream on another hears of it, and a
 * change before a watcher there does (plus the commit of any older transaction still running).
 */
const tailIntervalMs = 20;
/** How many projects' idle batches a hub keeps (batchOf). */
const idleBatchesKept = 256;

/**
 * The most decisions of one project a batch holds. A batch holds the project's head rows from its
 * first statement to its COMMIT, so the decisions of other hubs on that project wait for it.
 */
const maxBatch = 64;

/** bigint columns come back as numbers: every one the hub stores (ms times, tokens) is below 2^53. */
export const bigintAsNumber = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === pg.types.builtins.INT8 ? Number : pg.types.getTypeParser(oid, format)) as pg.CustomTypesConfig["getTypeParser"],
};

/**
 * The store for several hub replicas on one PostgreSQL database. The decisions of one project run
 * in batches, one transaction each on a pooled connection, answered once its COMMIT (durable in
 * PostgreSQL) returns (postgres/batches.ts, D55); other work is a transaction of its own
 * (postgres/transaction.ts). A decision locks the rows it decides on (`FOR UPDATE`), so decisions
 * on one row made by different replicas are serialised by the database; reads see what is committed.
 * This class opens the pool and runs the transactions; each concern's statements live in a file
 * of their own (agents.ts, leases.ts, messages.ts, sync.ts, changes.ts, tokens.ts), all on the
 * one `PgAccess`.
 */
export class PostgresStore implements HubStore {
  readonly storage = "postgres" as const;
  private readonly stats: CommitStats = { commits: 0, works: 0 };
  /** Decisions running now (close waits for them). */
  private readonly running = new InFlight<Promise<unknown>>();
  /** The batches of each project this hub decided on lately, idle ones included (batches.ts; batchOf). */
  private readonly batches = new Map<string, GroupCommit<BatchWork>>();
  /** Past how many projects' batches the idle ones are dropped (batchOf). */
  private sweepAbove = idleBatchesKept;
  private readonly changeLog: ReturnType<typeof createPostgresChanges>;
  readonly agents: AgentStore;
  readonly leases: LeaseStore;
  readonly messages: MessageStore;
  readonly sync: SyncStore;
  readonly changes: ChangeFeed;
  readonly tokens: TokenStore;
  /** The last reading of the database's clock, and when (performance.now()) it was read. */
  private reading = { dbMs: Date.now(), atMs: performance.now() };

  /** What tells the tail that another replica committed inbox events (inbox-notify.ts). */
  private readonly listener: { listening: Promise<void>; close(): Promise<void> };

  private constructor(
    private readonly pool: pg.Pool,
    private readonly clock: StoreClock | undefined,
    tailEveryMs: number,
    tailIdleMs: number | undefined,
    tailLookTimeoutMs: number | undefined,
    listenerConfig: pg.ClientConfig,
    name: string,
    session: { text: string; values: unknown[] },
  ) {
    const access: PgAccess = {
      tx: <T>(work: (tx: PgTx) => Promise<T>) => this.tx(work),
      changeTx: (projects, work) => this.changeTx(projects, work),
      batched: <I, T>(project: string, kind: SegmentKind<I>, item: I) => this.track(this.batchOf(project).submit<T>({ kind: kind as SegmentKind<unknown>, item })),
      rows: <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => this.rows<R>(sql, params),
      alone: <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) =>
        this.track(
          this.rows<R>(sql, params).then((found) => {
            this.stats.commits++;
            this.stats.works++;
            return found;
          }),
        ),
      now: (tx: PgTx) => this.decisionTime(tx),
      hubNow: () => this.now(),
      snapshot: (read) => this.snapshotRead(read),
      head: (tx, project, stream) => this.changeLog.head(tx, project, stream),
    };
    // One loop looks for what other replicas committed, for every reader (tail.ts).
    // Unnamed: a prepared statement's generic plan would not know how narrow a window is.
    const tail = createTail((sql, params) => this.rows(sql, params, false), tailEveryMs, undefined, tailIdleMs, tailLookTimeoutMs);
    // The key of the lock that says this replica lives, held by its listening connection: the
    // lease waiters it queues carry it (D79).
    const replicaKey = newReplicaKey();
    this.listener = listenForInbox(listenerConfig, name, () => tail.wake(), replicaKey, session);
    this.changeLog = createPostgresChanges(access, tail);
    this.changes = this.changeLog.feed;
    const leases = createPostgresLeases(access, replicaKey);
    this.leases = leases.store;
    this.agents = createPostgresAgents(access, leases);
    this.messages = createPostgresMessages(access, tail);
    this.sync = createPostgresSync(access);
    this.tokens = createPostgresTokens(access);
  }

  /** Connects, brings the schema to this release's version (or refuses the database), and opens. */
  static async open(o: PostgresStoreOptions): Promise<PostgresStore> {
    // Each replica names its connections, and names itself in what it notifies (inbox-notify.ts).
    const name = `kxm-hub ${randomUUID()}`;
    const pool = new pg.Pool({
      ...connectionOptions(o.url),
      max: o.poolSize ?? 10,
      types: bigintAsNumber,
      pipeline: true,
      Client: StoreClient,
      application_name: name,
    });
    // An idle connection the server dropped must not take the process down.
    pool.on("error", () => {});
    // Sent before anything the pool's user asks on the connection. An application_name in the
    // URL would override the one above.
    const session = { text: sessionSetup, values: [name, String(o.idleInTransactionMs ?? idleInTransactionMs)] };
    pool.on("connect", (client) => {
      client.query(session.text, session.values).catch(() => {});
    });
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
    const store = new PostgresStore(pool, o.clock, o.tailIntervalMs ?? tailIntervalMs, o.tailIdleMs, o.tailLookTimeoutMs, { ...connectionOptions(o.url), application_name: "kxm-hub listener" }, name, session);
    // The first reading of the database's clock, so the hub's views follow it from the start.
    // A store that cannot take it is closed: its pool and its listening connection go with it.
    // So is one whose listening connection does not hold the replica's liveness lock in time: a
    // call it queued for a lease would look, to every replica, like one whose hub is gone (D79).
    try {
      await store.tx((tx) => store.decisionTime(tx));
      await listened(store.listener.listening, listenTimeoutMs);
    } catch (e) {
      await store.close();
      throw e;
    }
    return store;
  }

  /**
   * The time of a decision, read after its rows are locked: the injected clock, else the
   * database's (which also refreshes the offset the hub's clock follows).
   */
  private async decisionTime(tx: PgTx): Promise<number> {
    if (this.clock) return this.clock.now();
    const dbNow = tx.clockMs
      ? tx.clockMs()
      : (await tx.query<{ now: number }>("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now")).rows[0]!.now;
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
    return this.track(p);
  }

  private track<T>(p: Promise<T>): Promise<T> {
    const entry = this.running.add(p);
    const done = () => this.running.delete(entry);
    p.then(done, done);
    return p;
  }

  /**
   * One decision that may record changes in the projects it declares. A decision on one project
   * joins the next batch of that project on this hub (batches.ts); one on several (a sweep), or
   * on none, is a transaction of its own that locks their heads first, in the same order. Its
   * changes are handed to the listeners once it has committed, never when it rolled back.
   */
  private changeTx<T>(projects: string | readonly string[], work: PgChangeWork<T>): Promise<T> {
    const declared = typeof projects === "string" ? [projects] : [...new Set(projects)];
    if (declared.length === 1) return this.track(this.batchOf(declared[0]!).submit<T>(work as PgChangeWork));
    let changes: StreamChange[] = [];
    const locked: LockedHeads = { heads: new Map(), nowMs: 0, atMs: 0 };
    return this.tx(async (tx) => {
      // Each attempt afresh (a lost race runs the decision again).
      changes = [];
      locked.heads.clear();
      locked.xid = undefined;
      const recorded: RecordedChange[] = [];
      if (declared.length > 0) await this.changeLog.lockHeads(tx, declared, locked);
      const result = await work(tx, recorder(tx, declared, this.changeLog, locked, recorded));
      const numbered = this.changeLog.numberChanges(locked, recorded);
      const write = together(numbered.statements);
      if (write) await tx.query(write.text, write.values);
      changes = numbered.changes;
      return result;
    }).then(
      (result) => {
        this.changeLog.emit(changes);
        return result;
      },
      (e: unknown) => {
        // Its COMMIT went out and its answer was lost: it may have committed, or be committing
        // still. Learned later from its transaction's status, its changes go to this hub's
        // listeners then (the other hubs' tails have them).
        if (changes.length > 0 && e instanceof StoreUnavailable) this.changeLog.settleLater(changes, locked.xid);
        throw e;
      },
    );
  }

  /**
   * The batches of `project`, made on its first decision and kept while idle: dropped each time
   * they went idle (many times a second under load), they made this Map keep, through V8's
   * replaced tables, every project's last batch (D88). Past `idleBatchesKept` projects, the idle
   * ones are dropped together; with more than that busy at once, the next drop waits until there
   * are twice as many as were left, so that a batch going idle does not walk the Map each time.
   * (Batches that stopped, which this backend never makes, would be made again.)
   */
  private batchOf(project: string): GroupCommit<BatchWork> {
    let batches = this.batches.get(project);
    if (batches && batches.failed === undefined) return batches;
    const backend = pgBatches(this.pool, project, this.changeLog, (tx) => this.decisionTime(tx), (works) => {
      this.stats.commits++;
      this.stats.works += works;
    });
    batches = new GroupCommit(backend, maxBatch, () => {
      if (this.batches.size <= this.sweepAbove) return;
      for (const [p, b] of this.batches) if (!b.busy) this.batches.delete(p);
      this.sweepAbove = Math.max(idleBatchesKept, 2 * this.batches.size);
    });
    this.batches.set(project, batches);
    return batches;
  }

  private async rows<R extends pg.QueryResultRow>(sql: string, params: unknown[] = [], named = true): Promise<R[]> {
    try {
      const s = named ? namedStatement(sql) : undefined;
      return (await (s ? this.pool.query<R>({ name: s.name, text: sql, values: params }) : this.pool.query<R>(sql, params))).rows;
    } catch (e) {
      throw storeError(e);
    }
  }

  /** Committed transactions (a batch of a project's decisions is one) and the decisions in them. */
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
    await Promise.allSettled(this.running.values());
    await this.listener.close();
    await this.pool.end();
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

  /** Several reads that see one snapshot of the database. */
  private async snapshotRead<T>(read: (tx: PgTx) => Promise<T>): Promise<T> {
    return runTransaction(this.pool, read, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
  }

  /**
   * After the database was restored with PostgreSQL's own tools (docs/operations.md, "Backup and restore"),
   * in ONE transaction: every resource's fence floor and the fence base go up by `margin`, every
   * lease is released, and every watch stream's numbers go up by `margin` with its stored changes
   * dropped, exactly as SQLite's restore does (store/sqlite/backup.ts, bumpFence); the same
   * transaction adds the `fence_raised` entry of the audit trail.
   */
  raiseFence(margin: number): Promise<{ resources: number; leasesReleased: number; highestTokenBefore: number; fenceBase: number }> {
    return this.tx(async (tx) => {
      // The heads' table first, as every batch locks its heads before anything else (batches.ts):
      // this waits for each decision in flight and holds back the next until the commit. A lock
      // on the rows would not do: a project's first decision creates its head rows at the old
      // base, and a row not committed yet is one this transaction's snapshot misses. Plain reads
      // go on meanwhile.
      await tx.query("LOCK TABLE watch_heads IN EXCLUSIVE MODE");
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
      // As a SQLite restore (sqlite/backup.ts): inboxes number on from above anything handed out,
      // so a reader's cursor from after the dump is ahead of the head (cursor_expired), never
      // passed by new messages; and every agent's instance ends, offline with its key rotated to
      // one nobody holds, so a key rotated away after the dump (an eviction) does not work again.
      await tx.query("UPDATE inbox_streams SET next_seq = next_seq + $1", [margin]);
      await tx.query("UPDATE agents SET online = false, key_hash = encode(sha256(convert_to(gen_random_uuid()::text || clock_timestamp()::text, 'UTF8')), 'hex')");
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

/** How long a starting store waits for its listening connection (connect, liveness lock, LISTEN). */
const listenTimeoutMs = 15_000;

async function listened(listening: Promise<void>, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new StoreOpenError("runtime_store_unreachable", `the PostgreSQL listening connection was not open within ${timeoutMs} ms (too many connections?)`)),
      timeoutMs,
    );
  });
  try {
    await Promise.race([listening, late]);
  } finally {
    clearTimeout(timer);
  }
}
