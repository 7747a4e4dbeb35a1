import type { AgentCaller } from "../caller.js";
import type { Clock } from "../clock.js";
import { errors, isHubError } from "../errors.js";
import type { Bus } from "../events/bus.js";
import { createKeepOnline, createWaker } from "../events/wait.js";
import type { MessageStore } from "../store/message-store.js";
import { intInRange } from "../validate.js";
import type { Presence } from "../presence/presence.js";
import type { Messages } from "./messages.js";
import type { InboxNotice } from "../domain.js";
import type { InboxEvent } from "../domain.js";

export interface InboxReadDeps {
  store: { messages: MessageStore };
  clock: Clock;
  messages: Messages;
  presence: Pick<Presence, "requireKey" | "recordActivity">;
  inboxBus: Bus<InboxNotice>;
  /** How often a waiting read records its agent's activity (KXM_STREAM_KEEPALIVE_MS, below the presence lease). */
  keepAliveMs: number;
  /**
   * Aborted when the hub shuts down: a waiting read answers what it has then, on every face (a
   * call made in-process carries its client's signal, not the hub's).
   */
  shutdown?: AbortSignal;
}

export const inboxRead = { defaultLimit: 20, maxLimit: 100, maxWaitMs: 60_000 } as const;

/** An event the reader still needs: a message to it only while it is not acknowledged. */
const wanted = (e: InboxEvent) => e.kind !== "message" || e.message.status === "queued";

/**
 * The inbox in one answer (ReadInbox): the events after a cursor, from the store, leaving out
 * messages acknowledged since; with `waitMs` and nothing to answer, it waits for the next event
 * of the caller's inbox (the bus, fed by this hub's commits and the others'), never on a poll,
 * and keeps its agent online meanwhile, as an open Subscribe stream does (its activity recorded
 * every keep-alive interval of hub time: a wait may last longer than the presence lease).
 * After each read of the store the caller's key is checked before anything is answered, as a
 * Subscribe stream checks it: an instance taken over, evicted or unregistered before its call
 * read (while it was in flight, or while it waited) is answered invalid_agent_identity and reads
 * nothing sent after it ended (a takeover keeps the agent's id, D26: what the read found may be
 * the new instance's). Reads only: nothing is acknowledged or changed.
 */
export function createInboxReader({ store, clock, messages, presence, inboxBus, keepAliveMs, shutdown }: InboxReadDeps) {
  return async function readInbox(
    caller: AgentCaller,
    input: { afterCursor?: bigint | number; limit?: number; waitMs?: number },
    signal?: AbortSignal,
  ): Promise<{ events: InboxEvent[]; nextCursor: number }> {
    const limit = input.limit === 0 || input.limit === undefined ? inboxRead.defaultLimit : intInRange("limit", input.limit, 1, inboxRead.maxLimit, inboxRead.defaultLimit);
    const waitMs = intInRange("waitMs", input.waitMs, 0, inboxRead.maxWaitMs, 0);
    const after = input.afterCursor === undefined ? undefined : intInRange("afterCursor", input.afterCursor, 0, Number.MAX_SAFE_INTEGER, 0);
    const waker = createWaker(clock);
    // Subscribed before the first read, so an event committed in between wakes the wait; a read
    // that does not wait listens for nothing (on PostgreSQL that would wake an idle hub's tail).
    const unsubscribe = waitMs > 0 ? inboxBus.subscribe(caller.agentId, () => waker.wake()) : () => {};
    // What ends a wait early: the call's end (its client gone, or its caller ended by the hub) and
    // the hub's shutdown, either of which may have come before the read began.
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    const ends = waitMs > 0 ? [signal, shutdown] : [];
    for (const end of ends) {
      if (end?.aborted) stop.abort();
      else end?.addEventListener("abort", onAbort, { once: true });
    }
    try {
      await messages.expireDue();
      const state = await store.messages.inboxState(caller.agentId);
      if (after !== undefined && after < state.purgedThrough) throw errors.inboxCursorExpired(after, state.purgedThrough);
      // Ahead of the head: from another history (a restore since), where new events would be
      // numbered below it and skipped without a word.
      if (after !== undefined && after > state.head) throw errors.cursorAhead(after, state.head);
      let cursor = after ?? state.ackedCursor;
      const deadlineMs = clock.now() + waitMs;
      const keepOnline = createKeepOnline(clock, keepAliveMs, () => presence.recordActivity(caller));
      for (;;) {
        // A call ended by the hub (its managed token revoked or expired, its project closed to the
        // caller: server/token-guard.ts) answers that, and reads nothing more; one whose client
        // left answers what it has.
        if (isHubError(signal?.reason)) throw signal.reason;
        const read = await store.messages.readInbox(caller.agentId, cursor, limit);
        // After the read: a takeover that committed before it read a message sent to the next
        // instance is seen here, so that message is never answered to this one.
        await presence.requireKey(caller);
        const events = read.filter(wanted);
        if (read.length > 0) cursor = read[read.length - 1]!.seq;
        if (events.length > 0 || read.length === limit) return { events, nextCursor: cursor };
        const leftMs = deadlineMs - clock.now();
        if (leftMs <= 0 || stop.signal.aborted) return { events, nextCursor: cursor };
        await keepOnline.wait(waker, leftMs, stop.signal);
      }
    } finally {
      unsubscribe();
      for (const end of ends) end?.removeEventListener("abort", onAbort);
    }
  };
}

export type InboxReader = ReturnType<typeof createInboxReader>;
