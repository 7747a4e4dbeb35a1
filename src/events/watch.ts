import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
import type { Bus } from "./bus.js";
import { createWaker } from "./wait.js";

export type WatchFrame<S, E> =
  | { kind: "snapshot"; snapshot: S; cursor: number }
  | { kind: "change"; change: E; cursor: number }
  | { kind: "keepAlive"; atMs: number; cursor: number };

export interface WatchOptions<S, E> {
  bus: Bus<E & { seq: number }>;
  /** Which changes this watcher sees: the bus key (the project). */
  key: string;
  /** The state now, and the seq it reflects (changes at or below it are skipped). */
  snapshot: () => Promise<{ snapshot: S; cursor: number }>;
  clock: Clock;
  keepAliveMs: number;
  /** Changes buffered for a slow watcher before it is cut off (resume with a new snapshot). */
  maxBuffered: number;
  signal: AbortSignal;
  /** Called on every keep-alive (e.g. to record the watcher's activity). */
  onKeepAlive?: () => Promise<void>;
}

/**
 * A live view: snapshot, then every change after it, keep-alives while idle. Changes wait in a
 * bounded buffer; a watcher that lets it overflow gets subscriber_too_slow, never unbounded memory.
 */
export async function* watch<S, E>(o: WatchOptions<S, E>): AsyncGenerator<WatchFrame<S, E>> {
  const buffer: (E & { seq: number })[] = [];
  let overflowed = false;
  const waker = createWaker(o.clock);
  const unsubscribe = o.bus.subscribe(o.key, (e) => {
    if (buffer.length >= o.maxBuffered) overflowed = true;
    else buffer.push(e);
    waker.wake();
  });
  try {
    const { snapshot, cursor: start } = await o.snapshot();
    let cursor = start;
    yield { kind: "snapshot", snapshot, cursor };
    while (!o.signal.aborted) {
      if (overflowed) throw errors.subscriberTooSlow(cursor);
      const next = buffer.shift();
      if (next) {
        if (next.seq <= cursor) continue;
        cursor = next.seq;
        yield { kind: "change", change: next, cursor };
        continue;
      }
      if (!(await waker.wait(o.keepAliveMs, o.signal))) {
        await o.onKeepAlive?.();
        yield { kind: "keepAlive", atMs: o.clock.now(), cursor };
      }
    }
  } finally {
    unsubscribe();
  }
}
