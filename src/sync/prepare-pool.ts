import { Worker } from "node:worker_threads";
import { prepareEvent, type PreparedEvent } from "./prepare.js";
import type { PrepareReply } from "./prepare-worker.js";
import { fromSources, packagePath } from "../package-root.js";

export interface PreparePoolOptions {
  /** Worker threads; 0 prepares every batch on the calling thread. */
  threads: number;
  /** A batch with fewer events is prepared on the calling thread: the hop would cost more than it saves. */
  minEvents?: number;
  /** A worker failed (the pool then prepares everything on the calling thread). */
  onError?: (error: unknown) => void;
}

export type Prepared = (PreparedEvent | undefined)[];

/**
 * The worker's entry. From the build, the bundled worker beside the hub's bundle
 * (scripts/build.mjs); from the sources (tests), prepare-thread.mjs, which registers tsx in the
 * thread and then loads prepare-worker.ts.
 */
const entry = fromSources ? new URL("./prepare-thread.mjs", import.meta.url) : packagePath("dist", "prepare-worker.mjs");

interface Pending {
  events: unknown[];
  resolve(prepared: Prepared): void;
  reject(error: unknown): void;
}

interface Slot {
  worker: Worker;
  ready: boolean;
  pending: Map<number, Pending>;
}

/**
 * The CPU work of a sync push before the store (schema check, canonical JSON, SHA-256: about
 * 20 µs per event, most of a large push's time on the hub's thread), on worker threads, so the
 * hub's thread decodes, stores and answers while another core hashes.
 *
 * Every answer equals `prepareEvent` on the calling thread (it is the same pure function; the
 * events reach the worker by structured clone, which keeps every JSON value as it is). Workers
 * start on the first large batch; until one reports ready, and whenever a worker has failed,
 * batches are prepared on the calling thread, so a push never waits on a thread's start-up and
 * never fails because of one. Idle workers do not keep the process alive.
 */
export function createPreparePool(o: PreparePoolOptions) {
  const minEvents = o.minEvents ?? 8;
  let slots: Slot[] | undefined;
  /** Batches prepared on a worker, and on the calling thread. */
  const stats = { offloaded: 0, inline: 0 };
  const readyWaiters: (() => void)[] = [];
  let broken = false;
  let closed = false;
  let nextId = 0;

  const inline = (events: unknown[]): Prepared => events.map(prepareEvent);
  const settleInline = (p: Pending) => {
    try {
      p.resolve(inline(p.events));
    } catch (e) {
      p.reject(e);
    }
  };

  function spawn(): Slot {
    const worker = new Worker(entry);
    worker.unref();
    const slot: Slot = { worker, ready: false, pending: new Map() };
    worker.on("message", (m: "ready" | PrepareReply) => {
      if (m === "ready") {
        slot.ready = true;
        if (slots?.every((s) => s.ready)) for (const wake of readyWaiters.splice(0)) wake();
        return;
      }
      const p = slot.pending.get(m.id);
      if (!p) return;
      slot.pending.delete(m.id);
      if (slot.pending.size === 0) worker.unref();
      // A batch the worker could not prepare is prepared here, which throws the same.
      if ("error" in m) settleInline(p);
      else p.resolve(m.prepared);
    });
    const fail = (error: unknown) => {
      slot.ready = false;
      if (!closed && !broken) {
        broken = true;
        o.onError?.(error);
      }
      for (const p of slot.pending.values()) settleInline(p);
      slot.pending.clear();
      for (const wake of readyWaiters.splice(0)) wake();
    };
    worker.on("error", fail);
    worker.on("exit", (code) => fail(new Error(`prepare worker exited with code ${code}`)));
    return slot;
  }

  return {
    /** `prepareEvent` of each event, in order; rejects with what it throws. */
    prepare(events: unknown[]): Promise<Prepared> {
      let slot: Slot | undefined;
      if (o.threads > 0 && !broken && !closed && events.length >= minEvents) {
        slots ??= Array.from({ length: o.threads }, spawn);
        for (const s of slots) if (s.ready && (!slot || s.pending.size < slot.pending.size)) slot = s;
      }
      if (!slot) {
        stats.inline++;
        try {
          return Promise.resolve(inline(events));
        } catch (e) {
          return Promise.reject(e);
        }
      }
      stats.offloaded++;
      const id = nextId++;
      const target = slot;
      return new Promise<Prepared>((resolve, reject) => {
        if (target.pending.size === 0) target.worker.ref(); // a pending answer keeps the process alive
        target.pending.set(id, { events, resolve, reject });
        target.worker.postMessage({ id, events });
      });
    },

    stats,

    /** Starts the workers now; resolves once every one is ready (or the pool gave up on them). */
    warm(): Promise<void> {
      if (o.threads <= 0 || broken || closed) return Promise.resolve();
      slots ??= Array.from({ length: o.threads }, spawn);
      if (slots.every((s) => s.ready)) return Promise.resolve();
      return new Promise((resolve) => readyWaiters.push(resolve));
    },

    /** Stops the workers; a batch still with one is prepared on the calling thread. */
    async close(): Promise<void> {
      closed = true;
      await Promise.all((slots ?? []).map((s) => s.worker.terminate()));
    },
  };
}

export type PreparePool = ReturnType<typeof createPreparePool>;
