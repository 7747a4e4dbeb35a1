import fs from "node:fs";
import type Database from "better-sqlite3";
import type { AgentStore } from "../agent-store.js";
import type { ChangeFeed, StreamChange } from "../change-feed.js";
import type { LeaseStore } from "../lease-store.js";
import type { MessageStore } from "../message-store.js";
import type { CommitStats, HubStore, ProjectCounts, StoreClock } from "../store.js";
import type { SyncStore } from "../sync-store.js";
import type { TokenStore } from "../token-store.js";
import { GroupCommit } from "../group-commit.js";
import { Checkpointer } from "./checkpointer.js";
import { fdatasyncWal, sqliteBatches, type RecordChange, type StoreAccess, type WalSync, type Work } from "./batch.js";
import { createSqliteAgents } from "./agents.js";
import { createSqliteChanges } from "./changes.js";
import { createSqliteLeases } from "./leases.js";
import { createSqliteMessages } from "./messages.js";
import { createSqliteSync } from "./sync.js";
import { createSqliteTokens } from "./tokens.js";
import type { StoreLock } from "./lock.js";
import { openDatabase } from "./open.js";

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
  /** How often, at most, a batch first checks that the data file is still the one its path names (ms; fileWatch). */
  fileCheckMs?: number;
  /** The time each decision is made at (default: the system clock; the hub passes its own). */
  clock?: StoreClock;
}

const systemTime: StoreClock = { now: () => Date.now() };

/**
 * The embedded store. Decisions go through group commit (store/group-commit.ts): those that
 * arrive together run in one IMMEDIATE transaction, a savepoint each, and are answered after one
 * COMMIT and one WAL sync. Reads wait while a committed batch is not durable yet. This class
 * opens the file and runs the batches; each concern's statements live in a file of their own
 * (agents.ts, leases.ts, messages.ts, sync.ts, changes.ts, tokens.ts), all on the one `StoreAccess`.
 */
export class SqliteStore implements HubStore {
  readonly storage: "sqlite" | "memory";
  private readonly db: Database.Database;
  private readonly lock: StoreLock | undefined;
  private readonly commits: GroupCommit<Work>;
  private walSync: WalSync | undefined;
  /** A write failed for want of the file, and none has succeeded since (ready() is false). */
  private unwritable = false;
  private readonly checkpointer: Checkpointer | undefined;
  private readonly q;
  private readonly clock: StoreClock;
  private readonly changeLog: ReturnType<typeof createSqliteChanges>;
  /** The lease concern, whose rows a rollback makes it read again (leases.ts `forget`). */
  private readonly leaseRows: ReturnType<typeof createSqliteLeases>;
  private readonly forgetAgentRows: () => void;
  readonly agents: AgentStore;
  readonly leases: LeaseStore;
  readonly messages: MessageStore;
  readonly sync: SyncStore;
  readonly changes: ChangeFeed;
  readonly tokens: TokenStore;

  /** Opens the file and holds its process lock until close(); throws StoreOpenError (open.ts). */
  constructor(options: SqliteStoreOptions) {
    this.storage = options.path === ":memory:" ? "memory" : "sqlite";
    this.clock = options.clock ?? systemTime;
    ({ db: this.db, lock: this.lock } = openDatabase(options.path));
    const db = this.db;
    const syncs = options.synchronous === "full" && this.storage === "sqlite";
    const openSync = options.walSync ?? fdatasyncWal;
    if (this.storage === "sqlite") {
      // Checkpoints run in a worker thread, never inside a COMMIT on this one (checkpointer.ts).
      // A restarted WAL is written again from its start, and truncated only when it grew past
      // 64 MiB: four times the size at which the store folds it back, which it overshoots by
      // what is committed while the worker copies. Truncating it at every restart (to 16 MiB,
      // before) freed and reallocated ~10 MiB of the file each time, and the COMMIT that did
      // it held the hub's thread 4-6 ms (bench/steps.md, "the savepoint journal and the WAL's
      // restart").
      db.pragma("wal_autocheckpoint = 0");
      db.pragma(`journal_size_limit = ${64 * 1024 * 1024}`);
      this.checkpointer = new Checkpointer(options.path, options.restartFrames);
    }
    const checkpointer = this.checkpointer;
    // The change numbering's hooks, bound once the change log exists (below).
    const numbering = () => this.changeLog.hooks;
    this.commits = new GroupCommit(
      sqliteBatches(db, () => (syncs ? (this.walSync ??= openSync(options.path)) : undefined), {
        beforeBatch: () => (checkpointer?.restartDue() ? checkpointer.fold() : undefined),
        wrote: () => {
          this.unwritable = false;
          checkpointer?.committed();
        },
        unwritable: () => (this.unwritable = true),
        ...(this.storage === "sqlite" && { fileLost: fileWatch(options.path, options.fileCheckMs) }),
        workStarted: () => numbering().workStarted(),
        workRolledBack: (wrote) => {
          numbering().workRolledBack();
          // A refusal (most rolled-back works) wrote nothing: what the lease concern holds stands.
          if (wrote) this.leaseRows.forget();
        },
        beforeCommit: () => numbering().beforeCommit(),
        batchRolledBack: () => {
          numbering().batchRolledBack();
          this.leaseRows.forget();
        },
      }),
      options.maxBatch,
    );
    this.q = {
      ping: db.prepare("SELECT 1 AS ok"),
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
    };
    const access: StoreAccess = {
      tx: (fn) => this.tx(fn),
      changeTx: (fn, plain) => this.changeTx(fn, plain),
      read: (fn) => this.read(fn),
      peek: (fn) => (this.commits.failed !== undefined ? Promise.reject(this.commits.failed) : Promise.resolve(fn())),
      now: () => this.clock.now(),
      head: (project, stream) => this.changeLog.head(project, stream),
    };
    this.changeLog = createSqliteChanges(db, access);
    this.changes = this.changeLog.feed;
    // The would-be holder of a lease decision is read as the agent concern sees it (its peeked rows).
    let agentRows: ReturnType<typeof createSqliteAgents> | undefined;
    const tokens = createSqliteTokens(db, access);
    this.tokens = tokens.store;
    const leases = createSqliteLeases(db, access, (id) => agentRows!.current(id), tokens.hasTokensInDecision);
    this.leases = leases.store;
    this.leaseRows = leases;
    const agents = (agentRows = createSqliteAgents(db, access, leases, tokens.hasTokens));
    this.agents = agents.store;
    this.forgetAgentRows = agents.forget;
    this.messages = createSqliteMessages(db, access, tokens.hasTokensInDecision);
    this.sync = createSqliteSync(db, access, agents.runtimesNow);
  }

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
  private changeTx<T>(fn: (record: RecordChange) => T, plain?: true): Promise<T> {
    const work: Work = () => {
      const changes: StreamChange[] = [];
      const result = fn((project, stream, body, atMs, text) => {
        changes.push(this.changeLog.append(project, stream, body, atMs, text));
      });
      return { result, changes };
    };
    if (plain) work.plain = true;
    return this.commits.submit<{ result: T; changes: StreamChange[] }>(work).then(({ result, changes }) => {
      this.changeLog.emit(changes);
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

  /**
   * Drops the rows the store keeps in memory (agents as peeked, leases and their queues), after
   * something other than this store wrote the file: a test setting up a state no call makes.
   * The hub itself never needs it; only the store writes its file while it runs.
   */
  forgetCachedRows(): void {
    this.forgetAgentRows();
    this.leaseRows.forget();
  }

  /** How many lease rows and queue keys the store keeps in memory (tests: they stay bounded). */
  keptLeaseRows(): { rows: number; queues: number } {
    return this.leaseRows.kept();
  }

  /** Batches committed and the decisions in them, since the store opened (metrics). */
  commitStats(): Readonly<CommitStats> {
    return this.commits.stats;
  }

  async ready(): Promise<boolean> {
    if (this.commits.failed !== undefined || this.unwritable) return false;
    try {
      return (this.q.ping.get() as { ok: number }).ok === 1;
    } catch {
      return false;
    }
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

  listProjects(nowMs: number): Promise<ProjectCounts[]> {
    return this.read(() =>
      this.q.projects
        .all(nowMs, nowMs)
        .map((r) => ({ project: r.project, agents: r.agents, onlineAgents: r.online, heldLeases: r.held, openMessages: r.open })),
    );
  }
}

/**
 * Whether the data file and its WAL are still the files the store has open: one removed (a data
 * directory cleaned under a running hub) or replaced (another file moved in its place) takes
 * every later write with it, and the next start would begin from nothing, its fencing tokens
 * from 1. Two stat calls, against the identities read when the store opened, at most every
 * `everyMs` (before a batch): at every batch they took a hundredth of the hub's thread under load.
 */
function fileWatch(dbPath: string, everyMs = 50): () => string | undefined {
  const identity = (file: string) => {
    const st = fs.statSync(file, { throwIfNoEntry: false });
    return st && `${st.dev}:${st.ino}`;
  };
  const files = [dbPath, `${dbPath}-wal`].map((file) => ({ file, id: identity(file) }));
  let nextAt = 0;
  let lost: string | undefined;
  return () => {
    if (lost !== undefined || performance.now() < nextAt) return lost;
    nextAt = performance.now() + everyMs;
    for (const f of files) {
      const now = identity(f.file);
      // A WAL not there at the open is made by the first write; it is watched from then on.
      if (f.id === undefined) f.id = now;
      else if (now !== f.id) return (lost = `${f.file} was ${now === undefined ? "removed" : "replaced"} while the hub ran: nothing more is written, since it would not be there after a restart`);
    }
    return undefined;
  };
}
