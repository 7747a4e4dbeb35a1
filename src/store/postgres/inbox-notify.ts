import type pg from "pg";
import { StoreClient } from "./client.js";

/** The channel migration 009's trigger notifies when inbox events are added. */
const channel = "kxm_inbox";
/** After a lost connection, how long before listening again (the tail's ticks go on meanwhile). */
const retryMs = 1_000;

/**
 * The advisory locks that say which replicas live (D79): (`replicaLockClass`, key), the two-key
 * form, one key per replica, held by its listening connection. A lease waiter names its replica
 * by that key (migration 012), and `orphanedWaiter` (leases.ts) reads pg_locks for it.
 */
export const replicaLockClass = 0x6b786d02; // "kxm" 2

/** A key for a starting replica: random, in 1..2^31-1 (pg_locks shows it as the lock's objid). */
export const newReplicaKey = () => 1 + Math.floor(Math.random() * 0x7ffffffe);

/**
 * Listens, on a connection of its own, for the inbox events other replicas commit (migration
 * 009: a statement that adds them notifies `kxm_inbox` with its replica's name, migration 010), and
 * calls `onOther` for each one another replica committed, so the tail (tail.ts) looks at once:
 * a message sent through one hub reaches a Subscribe stream on another without waiting for a
 * tick. A lost connection is opened again after `retryMs`, and until then the tail's ticks find
 * the events.
 *
 * The same connection holds the replica's liveness lock (`replicaKey`, taken before it listens):
 * PostgreSQL frees it when the connection's backend ends, so the other replicas see at once that
 * a replica killed or cut off is gone, and pass over the calls it had waiting for leases (D79).
 * Taking it waits while another backend holds it (this replica's own lost connection, until the
 * server notices it is gone).
 */
export function listenForInbox(
  config: pg.ClientConfig,
  self: string,
  onOther: () => void,
  replicaKey?: number,
  /** The first statement on each connection it opens (postgres-store.ts sessionSetup). */
  session?: { text: string; values: unknown[] },
): { listening: Promise<void>; close(): Promise<void> } {
  let client: pg.Client | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let listened!: () => void;
  /** Resolves when it first listens. */
  const listening = new Promise<void>((resolve) => (listened = resolve));

  function again(): void {
    client = undefined;
    if (!closed) retry = setTimeout(open, retryMs).unref();
  }

  function open(): void {
    const c = new StoreClient(config);
    client = c;
    let lost = false;
    const lose = () => {
      if (lost) return;
      lost = true;
      c.end().catch(() => {});
      if (client === c) again();
    };
    c.on("error", lose);
    c.on("end", lose);
    c.on("notification", (n) => {
      if (n.channel === channel && n.payload !== self) onOther();
    });
    c.connect()
      // Settings that could not be made do not keep it from listening (a connection that failed
      // fails the next statement as well).
      .then(() => session && c.query(session.text, session.values).catch(() => undefined))
      .then(() => (replicaKey === undefined ? undefined : c.query("SELECT pg_advisory_lock($1, $2)", [replicaLockClass, replicaKey])))
      .then(() => c.query(`LISTEN ${channel}`))
      .then(() => listened(), lose);
  }

  open();
  return {
    listening,
    async close() {
      closed = true;
      clearTimeout(retry);
      await client?.end().catch(() => {});
    },
  };
}
