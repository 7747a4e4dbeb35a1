/**
 * The change feed of the store: the numbered changes decisions record for watchers, in the
 * transaction that makes them, and how they are read, followed and purged. Each backend
 * implements it in one file (sqlite/changes.ts, postgres/changes.ts); the watch streams and the
 * sweep take this interface. The snapshots a watcher starts from belong to their concern (a
 * lease snapshot to the lease store, ...), each with the head of its stream they reflect.
 */

/**
 * Which watchable history of a project a change belongs to (WatchPresence, WatchLeases,
 * WatchOpenMessages, WatchRuns), or `tokens`: the project's tokens revoked or expired, which the
 * streams opened with them follow (no RPC watches it).
 */
export type ChangeStream = "presence" | "leases" | "messages" | "runs" | "tokens";

/**
 * One stored change of a project's presence or leases. Each (project, stream) numbers its
 * changes from its base without gaps, in commit order on every hub: a watcher resumes after any
 * number it holds, on any hub, and a read that does not continue at that number + 1 tells it the
 * change it needs was purged. `body` is the domain's (JSON), as the decision stored it.
 */
export interface StreamChange {
  project: string;
  stream: ChangeStream;
  seq: number;
  atMs: number;
  body: unknown;
}

/** The changes after a cursor and the stream's newest number, read together. */
export interface ChangeRead {
  changes: StreamChange[];
  /** Number of the newest change (the stream's base when it has none). */
  head: number;
}

export interface ChangeRecord {
  stream: ChangeStream;
  body: unknown;
}

/**
 * What a decision writes (nothing when `write` is absent), the change it records for watchers
 * (in the same transaction, on the decision's own project), and what it answers.
 */
export interface Decision<Row, T> {
  write?: Row;
  /** One change, or several in order (a release that hands the lease to a waiter records both). */
  change?: ChangeRecord | ChangeRecord[];
  result: T;
}

/** A sweep's change for each row it updates, made from the row and the sweep's time. */
export type ChangeOf<Row> = (row: Row, nowMs: number) => ChangeRecord;

/** A decision's changes as a list. */
export const changesOf = (d: { change?: ChangeRecord | ChangeRecord[] }): ChangeRecord[] =>
  d.change === undefined ? [] : Array.isArray(d.change) ? d.change : [d.change];

/**
 * The order in which a store's purges visit the streams, call after call. A sweep takes at most
 * `limit` changes a call and calls again while it gets `limit`; each call starts at the stream the
 * last one stopped in (it may have more), so the streams already emptied are not looked at again
 * for every chunk. Sorted by (project, stream), the streams as they are at each call. Kept in
 * memory only: it is a hint, and a restarted hub starts from the first stream.
 */
export function purgeRotation() {
  let from: string | undefined;
  const keyOf = (h: { project: string; stream: string }) => `${h.project}\u0000${h.stream}`;
  return {
    /** `heads` sorted, starting at the stream the last call stopped in (or the one after it, if it is gone). */
    order<H extends { project: string; stream: string }>(heads: readonly H[]): H[] {
      const sorted = heads.map((h) => ({ h, key: keyOf(h) })).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      const at = from === undefined ? -1 : sorted.findIndex((e) => e.key >= from!);
      const rotated = at <= 0 ? sorted : [...sorted.slice(at), ...sorted.slice(0, at)];
      return rotated.map((e) => e.h);
    },
    /** The stream a call stopped in because it reached its limit, or undefined when it finished. */
    stopped(h: { project: string; stream: string } | undefined): void {
      from = h && keyOf(h);
    },
  };
}

/**
 * Whether anyone on this hub listens for what is committed now (a stream, a waiting acquire, a
 * read that waits), as the hub's buses count them. A store several hubs share looks for the
 * others' commits often only while someone does; with nobody listening it looks now and then,
 * so that when someone starts it has little to catch up on (postgres/tail.ts).
 */
export interface Listening {
  readonly active: boolean;
  /** Calls `started` each time listening starts (none to some); returns what stops that. */
  onStart(started: () => void): () => void;
}

export interface ChangeFeed {
  /** Up to `limit` changes of a stream after `afterSeq`, oldest first, and its head. */
  readChanges(project: string, stream: ChangeStream, afterSeq: number, limit: number): Promise<ChangeRead>;
  /**
   * Calls `onChange` for each change committed from now on, this hub's own as soon as they are
   * durable and, on a store several hubs share, the others' as this hub learns of them: each
   * stream's in order, but a stream's changes from two hubs may come out of order or late (a
   * watcher reads the store for a gap). Until the returned function is called. `listening`
   * (absent: always) says when the others' changes are wanted soon.
   */
  tailChanges(onChange: (change: StreamChange) => void, listening?: Listening): () => void;
  /**
   * Deletes each stream's changes made more than `retainMs` before the sweep's time, and all but
   * its last `keep`; what stays of a stream is always its newest changes. At most `limit` in one
   * call, each stream's oldest first; returns how many (fewer than `limit`: none is left).
   */
  purgeChanges(retainMs: number, keep: number, limit: number): Promise<number>;
}
