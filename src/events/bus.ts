import type { ListenerCount } from "./listening.js";

/**
 * In-process notifications, published after a decision commits. For message streams the store
 * holds the truth (stream events are rows) and the bus only says "look again after seq N";
 * presence and lease changes carry their payload and are live-only (watchers start from a
 * snapshot). Each domain owns the type of what it publishes.
 *
 * Listeners subscribe to one key (an agent's inbox, a project's presence or leases), and a
 * publication reaches only its key's listeners: with 10,000 streams open, one message wakes the
 * one stream it is for instead of asking each of them.
 *
 * `counted`, when given, counts every subscription while it lasts (listening.ts).
 */
export function createBus<E>(keyOf: (e: E) => string, counted?: ListenerCount) {
  const byKey = new Map<string, Set<(e: E) => void>>();
  return {
    publish(e: E): void {
      const listeners = byKey.get(keyOf(e));
      if (listeners) for (const l of listeners) l(e);
    },
    /** Listens to the publications of `key`; returns the unsubscribe function. */
    subscribe(key: string, listener: (e: E) => void): () => void {
      let listeners = byKey.get(key);
      if (!listeners) byKey.set(key, (listeners = new Set()));
      listeners.add(listener);
      const own = listeners;
      const leave = counted?.join();
      return () => {
        leave?.();
        own.delete(listener);
        if (own.size === 0 && byKey.get(key) === own) byKey.delete(key);
      };
    },
  };
}

export type Bus<E> = ReturnType<typeof createBus<E>>;
