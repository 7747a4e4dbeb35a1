/**
 * How many listen on this hub's buses, all of them together (bus.ts): the store's tail of what
 * other hubs commit looks often only while someone does (store/change-feed.ts `Listening`, which
 * this is).
 */
export class ListenerCount {
  private count = 0;
  /** One entry per registration: a function registered twice is told twice, and unhooked once per stop. */
  private readonly starts = new Set<{ started: () => void }>();

  get active(): boolean {
    return this.count > 0;
  }

  /** Calls `started` each time the count leaves zero; returns what stops that. */
  onStart(started: () => void): () => void {
    const entry = { started };
    this.starts.add(entry);
    return () => this.starts.delete(entry);
  }

  /** One more listens; returns what ends that (once, however often it is called). */
  join(): () => void {
    if (this.count++ === 0) for (const { started } of [...this.starts]) started();
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.count--;
    };
  }
}
