import type Database from "better-sqlite3";
import type { ChangeFeed, ChangeRead, ChangeStream, StreamChange } from "../change-feed.js";
import { ChangeListeners } from "../change-listeners.js";
import type { StoreAccess } from "./batch.js";

/**
 * The change feed of the SQLite store, and the statements that number and store a change inside
 * a decision (the store's changeTx calls `append`, then `emit` once the decision is durable).
 * Only this store writes the file: its own changes are all there are.
 */
export function createSqliteChanges(db: Database.Database, { tx, read, now }: StoreAccess) {
  const q = {
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
    purgeStream: db.prepare<{ project: string; stream: string; cutoff: number; lowest: number; head: number }>(
      `DELETE FROM watch_changes WHERE project = @project AND stream = @stream AND seq < coalesce(
         (SELECT seq FROM watch_changes WHERE project = @project AND stream = @stream AND seq >= @lowest AND at_ms >= @cutoff ORDER BY seq LIMIT 1),
         @head + 1)`,
    ),
  };
  const listeners = new ChangeListeners();
  const head = (project: string, stream: ChangeStream) => q.changeHead.get(project, stream)!.head;

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

    purgeChanges(retainMs: number, keep: number): Promise<number> {
      return tx(() => {
        const cutoff = now() - retainMs;
        let purged = 0;
        for (const h of q.heads.all()) {
          purged += q.purgeStream.run({ project: h.project, stream: h.stream, cutoff, lowest: h.head - keep + 1, head: h.head }).changes;
        }
        return purged;
      });
    },
  };

  return {
    feed,
    /** The newest number of a stream (its base when it has none), inside the caller's read or decision. */
    head,
    /** Numbers and stores one change, inside the caller's decision; returns it as listeners get it. */
    append(project: string, stream: ChangeStream, body: unknown, atMs: number): StreamChange {
      const seq = (q.nextChange.get(project, stream) ?? q.firstChange.get(project, stream)!).head;
      q.insertChange.run(project, stream, seq, atMs, JSON.stringify(body));
      return { project, stream, seq, atMs, body };
    },
    /** Hands a durable decision's changes to the listeners. */
    emit: (changes: readonly StreamChange[]) => listeners.emit(changes),
  };
}
