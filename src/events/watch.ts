import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
import type { Bus } from "./bus.js";
import { takeContiguous } from "./contiguous.js";
import { createWaker } from "./wait.js";

export type WatchFrame<S, E> =
  | { kind: "snapshot"; snapshot: S; cursor: number }
  | { kind: "change"; change: E; cursor: number }
  | { kind: "keepAlive"; atMs: number; cursor: number };

/** A stream's stored changes after a cursor, and its newest number (read together). */
export interface ChangePage<E> {
  changes: E[];
  head: number;
}

export interface WatchOptions<S, E extends { seq: number }> {
  /** Changes as they commit (this hub's, and other hubs' as it learns of them): a hint, each may be late. */
  bus: Bus<E>;
  /** Which changes this watcher sees: the bus key (the project). */
  key: string;
  /** Resume after this cursor: no snapshot, every stored change after it. Absent: start with a snapshot. */
  afterCursor?: number;
  /** The state now, and the number of the last change it reflects. */
  snapshot: () => Promise<{ snapshot: S; cursor: number }>;
  /** The stored changes after a cursor (store.changes.readChanges). */
  read: (afterSeq: number, limit: number) => Promise<ChangePage<E>>;
  clock: Clock;
  keepAliveMs: number;
  /**
   * How far behind what committed the client may stay, for longer than `keepAliveMs`, before the
   * stream is cut off: a burst larger than this (one sweep of many agents) is read at the client's
   * pace, and only a client that stays behind is cut off.
   */
  maxBuffered: number;
  signal: AbortSignal;
  /** Called on every keep-alive (e.g. to record the watcher's activity). */
  onKeepAlive?: () => Promise<void>;
}

const page = 100;

/**
 * What the hub keeps of each project's presence and lease changes for watchers to resume from:
 * the last hour, and at most the last 10,000 (a bound on the store however busy a project is),
 * far more than a reconnect or a restart takes; a cursor older than that is cursor_expired, and
 * the watcher starts again from a snapshot.
 */
export const changeRetention = { ms: 3_600_000, perStream: 10_000 } as const;

/**
 * The stored changes that continue a stream at `cursor`, or cursor_expired: changes are numbered
 * without gaps, so a page that does not start at `cursor + 1` (or, empty, a head that is not
 * `cursor`) means the ones between were purged, or the cursor is from another history (a restore
 * numbers every stream above all it had).
 */
export function continuing<E extends { seq: number }>(cursor: number, p: ChangePage<E>): E[] {
  const first = p.changes[0];
  // A cursor past the head is not one this hub gave (a hub restored from a backup since).
  if (!first && cursor > p.head) throw errors.cursorAhead(cursor, p.head);
  if (first ? first.seq !== cursor + 1 : cursor !== p.head) {
    throw errors.cursorExpired(cursor, first ? first.seq - 1 : p.head);
  }
  return p.changes;
}

/**
 * A live view: a snapshot (or, resuming, a keep-alive at the client's cursor), then every change
 * after it in order, keep-alives while idle. The store holds every change, so this stream keeps
 * at most a page of what the bus hands over: the next change is taken from there when it
 * continues the stream, else read from the store. A watcher that stays more than `maxBuffered`
 * changes behind what committed while it was connected, for longer than `keepAliveMs` on the hub
 * clock, gets subscriber_too_slow and its resume cursor.
 */
export async function* watch<S, E extends { seq: number }>(o: WatchOptions<S, E>): AsyncGenerator<WatchFrame<S, E>> {
  const handed: E[] = [];
  /** The newest change the bus handed over, and the newest the store reported. */
  let handedHead = 0;
  let storedHead = 0;
  const waker = createWaker(o.clock);
  const unsubscribe = o.bus.subscribe(o.key, (e) => {
    handedHead = Math.max(handedHead, e.seq);
    if (handed.length < page) handed.push(e);
    waker.wake();
  });
  const read = async (after: number): Promise<E[]> => {
    const p = await o.read(after, page);
    storedHead = Math.max(storedHead, p.head);
    return continuing(after, p);
  };
  try {
    let cursor: number;
    if (o.afterCursor === undefined) {
      const { snapshot, cursor: start } = await o.snapshot();
      cursor = storedHead = start;
      yield { kind: "snapshot", snapshot, cursor };
    } else {
      cursor = o.afterCursor;
      handed.unshift(...(await read(cursor)));
      yield { kind: "keepAlive", atMs: o.clock.now(), cursor };
    }
    // What was stored when the stream opened is the client's to catch up on at its pace; only
    // what commits after that counts against maxBuffered.
    const liveFrom = storedHead;
    /** Since when the watcher has been more than maxBuffered behind, if it is. */
    let behindSinceMs: number | undefined;
    const tooSlow = (): boolean => {
      if (handedHead - Math.max(cursor, liveFrom) <= o.maxBuffered) {
        behindSinceMs = undefined;
        return false;
      }
      const nowMs = o.clock.now();
      behindSinceMs ??= nowMs;
      return nowMs - behindSinceMs > o.keepAliveMs;
    };
    while (!o.signal.aborted) {
      const live = takeContiguous(handed, cursor);
      const changes = live.length > 0 ? live : Math.max(handedHead, storedHead) > cursor ? await read(cursor) : [];
      for (const change of changes) {
        if (tooSlow()) throw errors.subscriberTooSlow(cursor);
        cursor = change.seq;
        yield { kind: "change", change, cursor };
      }
      if (changes.length > 0) continue;
      if (!(await waker.wait(o.keepAliveMs, o.signal))) {
        await o.onKeepAlive?.();
        yield { kind: "keepAlive", atMs: o.clock.now(), cursor };
      }
    }
  } finally {
    unsubscribe();
  }
}
