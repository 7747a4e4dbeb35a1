import type pg from "pg";
import type { Listening } from "../change-feed.js";

/**
 * What one reader of the tail reads of each window: `sql` is an expression of one JSON array,
 * the rows of one table that transactions in the window wrote, in the order they are handed to
 * `deliver`. In it `$1` is the window's start (xid8 as text) and `window_end` its end: the rows
 * are those with `xid >= $1::xid8 AND xid < window_end`. Its own parameters are `$2` on, from
 * `params`. A window is read again after a failure, so a reader may hear of a row twice (every
 * listener skips what it has).
 */
export interface TailReader<R = unknown> {
  sql: string;
  params: readonly unknown[];
  deliver(rows: R[]): void;
  /** When its rows are wanted soon (ChangeFeed.tailChanges); absent: always. */
  listening?: Listening;
}

/**
 * How a replica learns what the others commit. Rows that readers tail carry the id of the
 * transaction that wrote them (`xid`, default `pg_current_xact_id()`). Every transaction below a
 * snapshot's xmin has ended, so the rows with xid in [the xmin read last time, the xmin now) are
 * exactly the ones committed in between, whatever order their transactions committed in. One
 * loop, and one statement per tick for every reader: the xmin and each reader's rows, read on one
 * snapshot (readers with the same query share it).
 *
 * A tick comes every `intervalMs` while some reader's rows are wanted soon (someone on this hub
 * listens: a stream, a waiting call), else every `idleMs`: an idle hub does not ask the database
 * fifty times a second for rows nobody reads, and the window it keeps moving stays short, so the
 * look when someone starts listening (at once) reads little. Wakes are ignored meanwhile.
 */
export function createTail(
  rows: <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => Promise<R[]>,
  intervalMs: number,
  minGapMs = 2,
  idleMs = Math.max(intervalMs, 1_000),
  /**
   * A look that has not answered by then is given up, and the next tick looks again (on another
   * connection of the pool): a connection that went silent (a NAT's state dropped, a failover
   * behind a virtual address) would otherwise hold the loop forever, with no error to end it.
   */
  lookTimeoutMs = 10_000,
) {
  const readers = new Map<TailReader, () => void>();
  let from: string | undefined;
  let timer: NodeJS.Timeout | undefined;
  let running = false;
  /** Whether a look is in flight, whether a wake came meanwhile, and when the last look started. */
  let looking = false;
  let woken = false;
  let startedAt = Number.NEGATIVE_INFINITY;
  /** The look whose answer counts: one given up may still answer, and is then ignored. */
  let generation = 0;
  /** How long until the next look may start, when woken: `minGapMs` after the last one started. */
  const gap = () => Math.max(0, startedAt + minGapMs - performance.now());
  /** Whether some reader's rows are wanted soon. */
  const wanted = (): boolean => {
    for (const r of readers.keys()) if (!r.listening || r.listening.active) return true;
    return false;
  };

  /** The tick's statement for the readers there are now: one array per distinct query. */
  function statement(): { sql: string; params: unknown[]; groups: TailReader[][] } {
    const byQuery = new Map<string, TailReader[]>();
    for (const r of readers.keys()) {
      const key = JSON.stringify([r.sql, r.params]);
      (byQuery.get(key) ?? byQuery.set(key, []).get(key)!).push(r);
    }
    const groups = [...byQuery.values()];
    const params: unknown[] = [from];
    const columns = groups.map((group, i) => {
      const offset = params.length - 1;
      params.push(...group[0]!.params);
      const sql = group[0]!.sql.replace(/\$(\d+)/g, (whole, n: string) => (n === "1" ? whole : `$${Number(n) + offset}`));
      return `(${sql}) AS r${i}`;
    });
    return {
      sql: `WITH w AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS window_end) SELECT w.window_end::text AS xmin${columns.map((c) => `, ${c}`).join("")} FROM w`,
      params,
      groups,
    };
  }

  async function look(own: number): Promise<void> {
    if (from === undefined) {
      // The first tick only finds where the windows start.
      const start = (await rows<{ xmin: string }>("SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin"))[0]!.xmin;
      if (own === generation) from = start;
      return;
    }
    const { sql, params, groups } = statement();
    const [r] = await rows<Record<string, unknown> & { xmin: string }>(sql, params);
    if (own !== generation) return;
    groups.forEach((group, i) => {
      const found = r![`r${i}`] as unknown[];
      if (found.length === 0) return;
      for (const reader of group) {
        try {
          reader.deliver(found);
        } catch {
          // A reader that fails on a window (a row it cannot read) must not hold the window for
          // every reader: the window moves on, and its watchers find the gap in the store.
        }
      }
    });
    // `from` moves only once every reader has its rows: a database that is away is looked at
    // again on the next tick, and nothing is skipped.
    if (BigInt(r!.xmin) > BigInt(from)) from = r!.xmin;
  }

  function tick(): void {
    if (readers.size === 0) {
      running = false;
      return;
    }
    looking = true;
    startedAt = performance.now();
    const own = ++generation;
    let giveUp: NodeJS.Timeout | undefined;
    Promise.race([look(own), new Promise<void>((resolve) => (giveUp = setTimeout(resolve, lookTimeoutMs).unref()))])
      .catch(() => {})
      .finally(() => {
        clearTimeout(giveUp);
        // One look at a time: once it settles or is given up, whatever it still answers is
        // ignored, and a given-up window is read again.
        generation++;
        looking = false;
        if (readers.size === 0) running = false;
        else timer = setTimeout(tick, woken ? gap() : wanted() ? intervalMs : idleMs).unref();
        woken = false;
      });
  }

  /**
   * Another replica committed rows a reader tails (it said so: inbox-notify.ts), or someone
   * started listening: look now rather than at the next tick, at most every `minGapMs`; one woken
   * during a look looks again once it ends. The ticks go on: a wake that never comes delays
   * nothing past them. Ignored while no reader's rows are wanted soon.
   */
  function wake(): void {
    if (!running || !wanted()) return;
    if (looking) {
      woken = true;
      return;
    }
    clearTimeout(timer);
    timer = setTimeout(tick, gap()).unref();
  }

  return {
    /**
     * Adds a reader (the loop starts with the first, and a later one whose rows are wanted soon
     * wakes it); returns the function that removes it.
     */
    add<R>(reader: TailReader<R>): () => void {
      const r = reader as TailReader;
      readers.set(r, r.listening?.onStart(wake) ?? (() => {}));
      if (!running) {
        running = true;
        tick();
      } else wake();
      return () => {
        readers.get(r)?.();
        readers.delete(r);
        // The loop stops (a look in flight stops it when it ends): the next reader starts it again.
        if (readers.size === 0 && !looking) {
          clearTimeout(timer);
          running = false;
        }
      };
    },
    wake,
  };
}
