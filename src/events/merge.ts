/**
 * Several streams as one: each source's items in its own order, interleaved as they come. Ends
 * when every source has ended; fails with the first source that fails. However it ends (the
 * consumer stopped, a source failed), `stop` is aborted first, so sources that watch it end at
 * once instead of at their next item, and every source is then closed.
 */
export async function* merge<T>(sources: AsyncIterable<T>[], stop: AbortController): AsyncGenerator<T> {
  const its = sources.map((s) => s[Symbol.asyncIterator]());
  const pending = new Map<number, Promise<{ i: number; r: IteratorResult<T> }>>();
  const pull = (i: number) => pending.set(i, its[i]!.next().then((r) => ({ i, r })));
  its.forEach((_, i) => pull(i));
  try {
    while (pending.size > 0) {
      const { i, r } = await Promise.race(pending.values());
      if (r.done) {
        pending.delete(i);
        continue;
      }
      pull(i);
      yield r.value;
    }
  } finally {
    stop.abort();
    // A source still running settles on its own once it sees `stop`; its result is not wanted.
    for (const p of pending.values()) p.catch(() => undefined);
    await Promise.allSettled(its.map((it) => it.return?.()));
  }
}
