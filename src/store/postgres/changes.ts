import { randomUUID } from "node:crypto";
import { purgeRotation, type ChangeFeed, type ChangeRead, type ChangeStream, type Listening, type StreamChange } from "../change-feed.js";
import { ChangeListeners } from "../change-listeners.js";
import { keyLists } from "./key-list.js";
import type { createTail } from "./tail.js";
import type { PgAccess, PgTx, Statement } from "./transaction.js";

/** Every stream a project's changes go to, in the order their head rows are locked (see lockHeads). */
const streams: readonly ChangeStream[] = ["leases", "messages", "presence", "runs", "tokens"];

/**
 * Locks the head rows of `projects` (every stream of each), in (project, stream) order, before
 * the transaction locks anything else, and reads them with the database's clock. Every
 * transaction that records a change does this first, so one that holds a head never waits for a
 * transaction that wants it: batches of decisions (batches.ts) hold their project's heads from
 * their first statement to their COMMIT without deadlocking with other hubs. Rows a project does
 * not have yet are created at the fence base (a head at the base is what no row means), then
 * locked in the same order. The database's clock is read above the lock (a subquery with a
 * locking clause is never flattened), as each row comes out of it: in the select list of the
 * locking query itself, a row's clock would be read before the wait for its lock, and a batch
 * that waited for another's heads would decide at the time it began waiting. The transaction's id
 * comes with them (locking the rows gave it one): a transaction whose COMMIT went out and whose
 * answer was lost is asked about by it (committed).
 */
const lockHeadRows = keyLists(
  (projects) => `SELECT h.project, h.stream, h.head, (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms, pg_current_xact_id()::text AS xid
  FROM (SELECT project, stream, head FROM watch_heads WHERE project IN (${projects}) ORDER BY project, stream FOR UPDATE) h`,
);
const createHeadRows = `INSERT INTO watch_heads (project, stream, head)
  SELECT p, s, f.floor FROM unnest($1::text[]) p, unnest($2::text[]) s, fence_base f WHERE f.id = 1 ORDER BY p, s
  ON CONFLICT (project, stream) DO NOTHING`;

/**
 * What a transaction's changes, numbered (numberChanges) from the heads it locked, write at its
 * end: the heads moved on, and the changes stored.
 */
const moveHeads = `UPDATE watch_heads w SET head = v.head FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v (project, stream, head)
  WHERE w.project = v.project AND w.stream = v.stream`;
const storeChanges = `INSERT INTO watch_changes (project, stream, seq, at_ms, body, origin)
  SELECT *, $6 FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[])`;

/** A change a decision recorded, not numbered yet. */
export type RecordedChange = Omit<StreamChange, "seq">;

/**
 * The head rows a transaction holds (by `project\0stream`), the database's clock when it had
 * locked them, and this process's monotonic clock when that answer arrived (`atMs`): a decision
 * later in the transaction is timed `nowMs + (performance.now() - atMs)`. `xid` is the
 * transaction's id (an `xid8`, as text), known once it has locked heads: every transaction that
 * records a change has.
 */
export interface LockedHeads {
  heads: Map<string, number>;
  nowMs: number;
  atMs: number;
  xid?: string;
}

const changeHead = `coalesce((SELECT head FROM watch_heads WHERE project = $1 AND stream = $2), (SELECT floor FROM fence_base WHERE id = 1))`;

/**
 * The change feed of the PostgreSQL store, and the statement that numbers and stores a change
 * inside a decision (the store's changeTx calls `append`, then `emit` once the decision has
 * committed). This store's own changes reach its listeners at commit; the other replicas' come
 * from the tail (tail.ts).
 */
export function createPostgresChanges({ tx, rows, now }: Pick<PgAccess, "tx" | "rows" | "now">, tail: ReturnType<typeof createTail>) {
  const listeners = new ChangeListeners();
  /** Marks the changes this store writes, so its tail skips them (they were handed over at commit). */
  const origin = randomUUID();

  const rotation = purgeRotation();
  const feed: ChangeFeed = {
    /** The changes and the head in one statement: one snapshot. */
    async readChanges(project: string, stream: ChangeStream, afterSeq: number, limit: number): Promise<ChangeRead> {
      const found = await rows<{ head: number; seq: number | null; at_ms: number | null; body: string | null }>(
        `SELECT h.head, c.seq, c.at_ms, c.body FROM (SELECT ${changeHead} AS head) h
         LEFT JOIN LATERAL (SELECT seq, at_ms, body FROM watch_changes WHERE project = $1 AND stream = $2 AND seq > $3 ORDER BY seq LIMIT $4) c ON true
         ORDER BY c.seq`,
        [project, stream, afterSeq, limit],
      );
      return {
        head: found[0]!.head,
        changes: found
          .filter((r) => r.seq !== null)
          .map((r) => ({ project, stream, seq: r.seq!, atMs: r.at_ms!, body: JSON.parse(r.body!) as unknown })),
      };
    },

    /**
     * This store's own changes as soon as they commit; the other replicas' from the tail, every
     * tick of it, in the order of the transactions that wrote them (a watcher reads the store for
     * any gap that leaves).
     */
    tailChanges(onChange: (change: StreamChange) => void, listening?: Listening): () => void {
      const removeOwn = listeners.add(onChange);
      const removeTail = tail.add<{ project: string; stream: ChangeStream; seq: number; at_ms: number; body: string }>({
        sql: `SELECT coalesce(json_agg(json_build_object('project', project, 'stream', stream, 'seq', seq, 'at_ms', at_ms, 'body', body)
                ORDER BY xid, project, stream, seq), '[]')
              FROM watch_changes WHERE xid >= $1::xid8 AND xid < window_end AND origin <> $2`,
        params: [origin],
        listening,
        deliver: (found) => {
          for (const r of found) onChange({ project: r.project, stream: r.stream, seq: r.seq, atMs: r.at_ms, body: JSON.parse(r.body) as unknown });
        },
      });
      return () => {
        removeOwn();
        removeTail();
      };
    },

    /**
     * Stream by stream, each its own transaction: a stream's old changes are a prefix of it, and
     * at most `limit` of them in all (a stream's numbers have no gaps; least() skips the NULL of
     * a stream with no row left).
     */
    async purgeChanges(retainMs: number, keep: number, limit: number): Promise<number> {
      const heads = await rows<{ project: string; stream: string; head: number }>("SELECT project, stream, head FROM watch_heads");
      let purged = 0;
      let last: { project: string; stream: string } | undefined;
      for (const h of rotation.order(heads)) {
        if (purged >= limit) break;
        last = h;
        purged += await tx(async (t) => {
          const cutoff = (await now(t)) - retainMs;
          const r = await t.query(
            `DELETE FROM watch_changes WHERE project = $1 AND stream = $2 AND seq < least(
               coalesce(
                 (SELECT seq FROM watch_changes WHERE project = $1 AND stream = $2 AND seq >= $3 AND at_ms >= $4 ORDER BY seq LIMIT 1),
                 $5 + 1),
               (SELECT min(seq) FROM watch_changes WHERE project = $1 AND stream = $2) + $6)`,
            [h.project, h.stream, h.head - keep + 1, cutoff, h.head, limit - purged],
          );
          return r.rowCount ?? 0;
        });
      }
      rotation.stopped(purged >= limit ? last : undefined);
      return purged;
    },
  };

  return {
    feed,
    /** The newest number of a stream (its base when it has none), as `t` sees it. */
    async head(t: PgTx, project: string, stream: ChangeStream): Promise<number> {
      return (await t.query<{ head: number }>(`SELECT ${changeHead} AS head`, [project, stream])).rows[0]!.head;
    },
    /** Locks the head rows of `projects` before anything else in `t` (see lockHeadRows), into `into`. */
    async lockHeads(t: PgTx, projects: readonly string[], into: LockedHeads): Promise<void> {
      type Row = { project: string; stream: string; head: number; now_ms: number; xid: string };
      const lock = lockHeadRows(projects);
      let found = (await t.query<Row>(lock.text, lock.params)).rows;
      if (found.length < projects.length * streams.length) {
        await t.query(createHeadRows, [projects, streams]);
        found = (await t.query<Row>(lock.text, lock.params)).rows;
      }
      into.atMs = performance.now();
      into.xid = found[0]?.xid;
      let nowMs = 0;
      for (const r of found) {
        into.heads.set(`${r.project}\0${r.stream}`, r.head);
        nowMs = Math.max(nowMs, r.now_ms);
      }
      into.nowMs = nowMs;
    },
    /**
     * Numbers `recorded` in order from the heads in `locked` (which move on); returns them as the
     * listeners get them once their transaction has committed, and the statements that store
     * them and move their heads (none when there are none).
     */
    numberChanges(locked: LockedHeads, recorded: readonly RecordedChange[]): { changes: StreamChange[]; statements: Statement[] } {
      if (recorded.length === 0) return { changes: [], statements: [] };
      const moved = new Map<string, { project: string; stream: string; head: number }>();
      const changes = recorded.map((c) => {
        const key = `${c.project}\0${c.stream}`;
        const seq = locked.heads.get(key);
        if (seq === undefined) throw new Error(`a change in ${c.project}/${c.stream} was recorded without its head locked`);
        locked.heads.set(key, seq + 1);
        moved.set(key, { project: c.project, stream: c.stream, head: seq + 1 });
        return { ...c, seq: seq + 1 };
      });
      const heads = [...moved.values()];
      return {
        changes,
        statements: [
          { text: moveHeads, values: [heads.map((h) => h.project), heads.map((h) => h.stream), heads.map((h) => h.head)] },
          {
            text: storeChanges,
            values: [
              changes.map((c) => c.project),
              changes.map((c) => c.stream),
              changes.map((c) => c.seq),
              changes.map((c) => c.atMs),
              changes.map((c) => JSON.stringify(c.body)),
              origin,
            ],
          },
        ],
      };
    },
    /** Hands a committed decision's changes to the listeners. */
    emit: (changes: readonly StreamChange[]) => listeners.emit(changes),
    /**
     * Whether the transaction `xid`, whose COMMIT went out but whose answer was lost (its
     * connection failed), committed: PostgreSQL's own record of it (`pg_xact_status`), asked
     * until it has ended. Its backend, while idle in it, is ended here: its COMMIT never arrived
     * and cannot now (the connection is gone), and it would hold its rows (its project's heads)
     * until the server noticed. One still running a statement (the COMMIT itself: a slow flush,
     * a synchronous standby, a deferred trigger) is waited for. Another transaction's changes
     * tell nothing: a store's changes all carry its `origin`, and after this one rolled back
     * another of the same store may have written the same numbers. Throws when it cannot be told
     * (the database is out of reach, the transaction is still running after about 3 s, or it is
     * too old for PostgreSQL to remember).
     */
    async committed(xid: string | undefined): Promise<boolean> {
      if (xid === undefined) throw new Error("a transaction in doubt without its id");
      for (let i = 0; ; i++) {
        const [{ status }] = (await rows<{ status: string | null }>(xactStatus, [xid])) as [{ status: string | null }];
        if (status === "committed") return true;
        if (status === "aborted") return false;
        if (status === null) throw new Error(`transaction ${xid} in doubt is too old to tell`);
        if (i === inDoubtPolls) throw new Error(`transaction ${xid} in doubt is still running`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    /**
     * A transaction in doubt whose outcome cannot be told now (`committed` threw: the database
     * is out of reach, or its COMMIT is still running): asks again, backing off from 100 ms to
     * about a minute in all, and hands its changes to this hub's listeners once it learns they
     * committed. This hub's tail skips the rows it wrote, so without this its own watchers would
     * never hear of them, while the other hubs' do. A listener skips what it already has (a
     * watcher that read the store for a later change's gap), so a late hand-over repeats nothing.
     */
    settleLater(changes: readonly StreamChange[], xid: string | undefined): void {
      void (async () => {
        for (let waitMs = 100; waitMs <= settleWithinMs; waitMs *= 2) {
          await new Promise((r) => setTimeout(r, waitMs).unref());
          try {
            if (await this.committed(xid)) listeners.emit(changes);
            return;
          } catch {
            // Still out of reach, or still running: ask again later.
          }
        }
      })();
    },
  };
}

/**
 * What became of transaction $1 (an `xid8`): 'committed', 'aborted', 'in progress', or null when
 * it is too old to tell. Its backend is ended when idle in it (see committed); that shows in the
 * next look. The `xid8` is cast to the 32-bit `xid` of pg_stat_activity, unique among the
 * transactions running.
 */
const xactStatus = `SELECT pg_xact_status($1::xid8) AS status,
  (SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_xid = $1::xid8::xid AND state LIKE 'idle in transaction%') AS ended`;

/** How long, at most, a transaction in doubt is asked about before it is given up (settleLater). */
const settleWithinMs = 60_000;

/** How many times, 10 ms apart, a transaction in doubt is asked about before the question is given up (for now). */
const inDoubtPolls = 300;
