import type pg from "pg";

/**
 * Reads the rows of one table that transactions in [from, to) wrote (xid8 bounds as text).
 * Called with windows that follow each other; a window is read again after a failure, so a
 * reader's listener may hear of a row twice (every listener skips what it has).
 */
export type TailReader = (from: string, to: string) => Promise<void>;

/**
 * How a replica learns what the others commit. Rows that readers tail carry the id of the
 * transaction that wrote them (`xid`, default `pg_current_xact_id()`). Every transaction below a
 * snapshot's xmin has ended, so the rows with xid in [the xmin read last time, the xmin now) are
 * exactly the ones committed in between, whatever order their transactions committed in. One
 * loop for every reader: one xmin read per tick.
 */
export function createTail(rows: <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => Promise<R[]>, intervalMs: number) {
  const readers = new Set<TailReader>();
  let from: string | undefined;
  let timer: NodeJS.Timeout | undefined;
  let running = false;

  async function look(): Promise<void> {
    const [r] = await rows<{ xmin: string }>("SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin");
    const xmin = r!.xmin;
    if (from !== undefined && BigInt(xmin) > BigInt(from)) {
      for (const read of readers) await read(from, xmin);
    }
    // `from` moves only past what every reader has read: a database that is away is looked at
    // again on the next tick, and nothing is skipped.
    if (from === undefined || BigInt(xmin) > BigInt(from)) from = xmin;
  }

  function tick(): void {
    if (readers.size === 0) {
      running = false;
      return;
    }
    look()
      .catch(() => {})
      .finally(() => {
        if (readers.size === 0) running = false;
        else timer = setTimeout(tick, intervalMs).unref();
      });
  }

  return {
    /** Adds a reader (the loop starts with the first); returns the function that removes it. */
    add(read: TailReader): () => void {
      readers.add(read);
      if (!running) {
        running = true;
        tick();
      }
      return () => {
        readers.delete(read);
        if (readers.size === 0) clearTimeout(timer);
      };
    },
  };
}
