import type Database from "better-sqlite3";
import { purgeRotation, type ChangeFeed, type ChangeRead, type ChangeStream, type StreamChange } from "../change-feed.js";
import { ChangeListeners } from "../change-listeners.js";
import type { StoreAccess } from "./batch.js";

/**
 * The change feed of the SQLite store, and the statements that number and store a change inside
 * a decision (the store's changeTx calls `append`, then `emit` once the decision is durable).
 * Only this store writes the file: its own changes are all there are.
 */
export function createSqliteChanges(db: Database.Database, { tx, read, now }: StoreAccess) {
  const q = {
    // A stream's head is written once per batch (hooks.beforeCommit); its first change is numbered
    // from the fence base, which a restore raises (changeHead).
    writeHead: db.prepare<[string, string, number]>(
      "INSERT INTO watch_heads (project, stream, head) VALUES (?, ?, ?) ON CONFLICT (project, stream) DO UPDATE SET head = excluded.head",
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
    // first one to keep (recent enough, and among the last `keep`), and at most `limit` of them
    // (its numbers have no gaps). With no row left, min() is NULL and nothing matches.
    purgeStream: db.prepare<{ project: string; stream: string; cutoff: number; lowest: number; head: number; limit: number }>(
      `DELETE FROM watch_changes WHERE project = @project AND stream = @stream AND seq < min(
         coalesce(
           (SELECT seq FROM watch_changes WHERE project = @project AND stream = @stream AND seq >= @lowest AND at_ms >= @cutoff ORDER BY seq LIMIT 1),
           @head + 1),
         (SELECT min(seq) FROM watch_changes WHERE project = @project AND stream = @stream) + @limit)`,
    ),
  };
  const listeners = new ChangeListeners();
  const rotation = purgeRotation();

  /**
   * The heads of the streams this store has numbered changes of, so numbering one reads and
   * writes no head row: a stream's head is read from the file at its first change, advanced by
   * each change, and written back once per batch, before its COMMIT (`beforeCommit`). A work
   * rolled back puts back the heads it advanced (`workRolledBack`), and a batch rolled back
   * forgets them all, to be read again (`batchRolledBack`): a number is never skipped. Only
   * streams with changes are kept: reading the head of any other (a watch of a project nobody
   * writes to) reads the file and keeps nothing.
   */
  interface Head {
    project: string;
    stream: ChangeStream;
    head: number;
  }
  const heads = new Map<string, Head>();
  /** The heads advanced by this batch, to write before its COMMIT. */
  const advanced = new Set<Head>();
  /** What the current work advanced, and from where: undone if it is rolled back. */
  let undo: [Head, number][] = [];
  const keyOf = (project: string, stream: ChangeStream) => `${stream}\u0000${project}`;
  const fileHead = (project: string, stream: ChangeStream) => q.changeHead.get(project, stream)!.head;
  const head = (project: string, stream: ChangeStream) => heads.get(keyOf(project, stream))?.head ?? fileHead(project, stream);

  const feed: ChangeFeed = {
    readChanges(project: string, stream: ChangeStream, afterSeq: number, limit: number): Promise<ChangeRead> {
      return read(() => ({
        changes: q.changesAfter
          .all(project, stream, afterSeq, limit)
          .map((r) => ({ project, stream, seq: r.seq, atMs: r.at_ms, body: JSON.parse(r.body) as unknown })),
        head: head(project, stream),
      }));
    },

    tailChanges(onChange: (change: StreamChange) => void): () => void {
      return listeners.add(onChange);
    },

    purgeChanges(retainMs: number, keep: number, limit: number): Promise<number> {
      return tx(() => {
        const cutoff = now() - retainMs;
        let purged = 0;
        let last: { project: string; stream: string } | undefined;
        for (const s of rotation.order(q.heads.all())) {
          if (purged >= limit) break;
          const h = head(s.project, s.stream as ChangeStream);
          purged += q.purgeStream.run({ project: s.project, stream: s.stream, cutoff, lowest: h - keep + 1, head: h, limit: limit - purged }).changes;
          last = s;
        }
        rotation.stopped(purged >= limit ? last : undefined);
        return purged;
      });
    },
  };

  return {
    feed,
    /** The newest number of a stream (its base when it has none), inside the caller's read or decision. */
    head,
    /** Numbers and stores one change, inside the caller's decision; returns it as listeners get it. */
    append(project: string, stream: ChangeStream, body: unknown, atMs: number, text = JSON.stringify(body)): StreamChange {
      const key = keyOf(project, stream);
      let h = heads.get(key);
      if (!h) heads.set(key, (h = { project, stream, head: fileHead(project, stream) }));
      const seq = h.head + 1;
      q.insertChange.run(project, stream, seq, atMs, text);
      undo.push([h, h.head]);
      h.head = seq;
      advanced.add(h);
      return { project, stream, seq, atMs, body };
    },
    /** What the store's batches tell the numbering (batch.ts BatchHooks). */
    hooks: {
      workStarted() {
        undo = [];
      },
      workRolledBack() {
        for (let i = undo.length - 1; i >= 0; i--) undo[i]![0].head = undo[i]![1];
        undo = [];
      },
      beforeCommit() {
        for (const h of advanced) q.writeHead.run(h.project, h.stream, h.head);
        advanced.clear();
      },
      batchRolledBack() {
        heads.clear();
        advanced.clear();
        undo = [];
      },
    },
    /** Hands a durable decision's changes to the listeners. */
    emit: (changes: readonly StreamChange[]) => listeners.emit(changes),
  };
}
