import type { StreamChange } from "./change-feed.js";

/**
 * Who hears of what a store commits (ChangeFeed.tailChanges, MessageStore.tailInbox): the one
 * after-commit channel of every kind of change. Each listener gets every change once it is
 * durable, in the order committed. A listener that throws is the listener's
 * problem, never the decision's: the decision is committed and answered whatever it does.
 */
export class ChangeListeners<C = StreamChange> {
  private readonly listeners = new Set<(change: C) => void>();

  add(listener: (change: C) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  emit(changes: readonly C[]): void {
    for (const change of changes) {
      for (const listener of this.listeners) {
        try {
          listener(change);
        } catch {
          // A listener's failure must not turn a committed decision into an error.
        }
      }
    }
  }
}
