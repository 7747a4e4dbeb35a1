/**
 * Point reads by key that arrive together, as one statement (`WHERE id IN (...)`, key-list.ts):
 * the reads queued in one event-loop turn, or while the previous statement runs, go as the next
 * one, so under load a hub sends one read for many calls (the authentication of every call, say),
 * and a lone read waits for nothing but the turn. A read is only ever answered by a statement that
 * started after it was asked: it sees at least what a statement of its own would have seen.
 *
 * Written here rather than taken from `dataloader`: that library gathers the loads of one tick,
 * whereas what saves statements under load is gathering what arrives while one is running (as
 * group commit does for writes), and it caches by default, which a store must not.
 */
export class CoalescedReads<K, V> {
  private queued = new Map<K, { resolve(v: V | undefined): void; reject(e: unknown): void }[]>();
  private busy = false;

  constructor(
    /** Reads `keys` (distinct) in one statement; a key missing from the answer has no row. */
    private readonly readMany: (keys: K[]) => Promise<Map<K, V>>,
    /** The most keys in one statement. */
    private readonly max = 256,
  ) {}

  read(key: K): Promise<V | undefined> {
    return new Promise((resolve, reject) => {
      const waiting = this.queued.get(key);
      if (waiting) waiting.push({ resolve, reject });
      else this.queued.set(key, [{ resolve, reject }]);
      if (!this.busy) {
        this.busy = true;
        setImmediate(() => this.run());
      }
    });
  }

  private run(): void {
    if (this.queued.size === 0) {
      this.busy = false;
      return;
    }
    const taken = new Map<K, { resolve(v: V | undefined): void; reject(e: unknown): void }[]>();
    for (const [key, waiting] of this.queued) {
      if (taken.size === this.max) break;
      taken.set(key, waiting);
    }
    for (const key of taken.keys()) this.queued.delete(key);
    this.readMany([...taken.keys()]).then(
      (found) => {
        for (const [key, waiting] of taken) for (const w of waiting) w.resolve(found.get(key));
      },
      (e: unknown) => {
        for (const waiting of taken.values()) for (const w of waiting) w.reject(e);
      },
    ).finally(() => this.run());
  }
}
