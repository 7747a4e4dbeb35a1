/**
 * In-process notifications, published after a decision commits. For message streams the store
 * holds the truth (stream events are rows) and the bus only says "look again after seq N";
 * presence and lease changes carry their payload and are live-only (watchers start from a
 * snapshot). Each domain owns the type of what it publishes.
 */
export function createBus<E>() {
  const listeners = new Set<(e: E) => void>();
  return {
    publish(e: E): void {
      for (const l of listeners) l(e);
    },
    /** Returns the unsubscribe function. */
    subscribe(listener: (e: E) => void): () => void {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    get size(): number {
      return listeners.size;
    },
  };
}

export type Bus<E> = ReturnType<typeof createBus<E>>;
