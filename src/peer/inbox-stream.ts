import type { AgentCaller } from "../caller.js";
import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
import type { Bus } from "../events/bus.js";
import { takeContiguous } from "../events/contiguous.js";
import { createWaker } from "../events/wait.js";
import type { AgentView, Presence, PresenceChange } from "../presence/presence.js";
import type { MessageStore } from "../store/message-store.js";
import { intInRange } from "../validate.js";
import type { Messages } from "./messages.js";
import type { InboxNotice } from "../domain.js";
import type { InboxEvent } from "../domain.js";

export type InboxFrame =
  | { kind: "ready"; agent: AgentView; cursor: number }
  | { kind: "event"; event: InboxEvent; cursor: number }
  | { kind: "presence"; agent: AgentView; cursor: number }
  | { kind: "forgotten"; agent: { id: string; name: string }; cursor: number }
  | { kind: "keepAlive"; atMs: number; cursor: number };

/** A peer's presence change as the stream tells it: the agent as it is now, or one forgotten. */
type PeerChange = { kind: "presence"; agent: AgentView } | { kind: "forgotten"; agent: { id: string; name: string } };

export interface InboxStreamDeps {
  store: { messages: MessageStore };
  clock: Clock;
  messages: Messages;
  presence: Presence;
  inboxBus: Bus<InboxNotice>;
  presenceBus: Bus<PresenceChange>;
  keepAliveMs: number;
  /** Events that may arrive faster than the client reads before the stream is cut off. */
  maxLag: number;
}

const page = 100;

/**
 * An agent's inbox as a stream. Phases: ready; replay (from the client's `afterSeq`: every
 * stream event after it; without one: the pending messages above the acked cursor, as the
 * reference replays); live (the events the bus hands over, when they continue the stream
 * exactly, else a read of the store). The store is the buffer: at most a page of handed-over
 * events is held per stream, so a slow reader costs little memory; one that falls `maxLag`
 * events behind what arrived while it was connected is cut off with subscriber_too_slow and its
 * resume cursor.
 */
export function createInboxStreams(deps: InboxStreamDeps) {
  const { store, clock, messages, presence } = deps;

  return async function* openInbox(
    caller: AgentCaller,
    after: bigint | number | undefined,
    signal: AbortSignal,
  ): AsyncGenerator<InboxFrame> {
    // A cursor is a stream number: a negative one, or one past 2^53, is none the hub gave (as ReadInbox's afterCursor).
    const afterSeq = after === undefined ? undefined : intInRange("afterSeq", after, 0, Number.MAX_SAFE_INTEGER, 0);
    const waker = createWaker(clock);
    let liveHead = 0;
    /** Committed events the bus handed over, not yet sent (at most a page; the store has the rest). */
    const handed: InboxEvent[] = [];
    const peers: PeerChange[] = [];
    let peersOverflowed = false;
    const unsubscribeInbox = deps.inboxBus.subscribe(caller.agentId, (n) => {
      liveHead = Math.max(liveHead, n.seq);
      if (n.event && handed.length < page) handed.push(n.event);
      waker.wake();
    });
    /** The agent itself changed (registered again, unregistered, evicted): is its key still this stream's? */
    let recheck = false;
    const unsubscribePresence = deps.presenceBus.subscribe(caller.project, (c) => {
      if (c.agent?.id === caller.agentId) {
        recheck = true;
        waker.wake();
        return;
      }
      const peer: PeerChange | undefined = c.agent ? { kind: "presence", agent: c.agent } : c.forgotten ? { kind: "forgotten", agent: c.forgotten } : undefined;
      if (!peer) return;
      if (peers.length >= deps.maxLag) peersOverflowed = true;
      else peers.push(peer);
      waker.wake();
    });
    try {
      // An instance that ended while this call was authenticated (its key changed before the
      // presence subscription above) is told now: nothing after it would tell the stream. The
      // same read gives the ready frame its agent.
      const agent = await presence.requireKey(caller);
      await messages.expireDue();
      const state = await store.messages.inboxState(caller.agentId);
      if (afterSeq !== undefined && afterSeq < state.purgedThrough) {
        throw errors.inboxCursorExpired(afterSeq, state.purgedThrough);
      }
      // Ahead of the head: from another history (a restore since), where new events would be
      // numbered below it and skipped without a word.
      if (afterSeq !== undefined && afterSeq > state.head) throw errors.cursorAhead(afterSeq, state.head);
      let last = afterSeq ?? state.ackedCursor;
      yield { kind: "ready", agent, cursor: last };

      if (afterSeq === undefined) {
        // A page at a time, as the live phase reads: an inbox of many large messages is never
        // held whole (nor read in one synchronous statement).
        let replayed = state.ackedCursor;
        for (let more = true; more; ) {
          const pending = await store.messages.pendingMessages(caller.agentId, replayed, state.head, page);
          more = pending.length === page;
          for (const m of pending) {
            yield { kind: "event", event: { agentId: caller.agentId, seq: m.seq, kind: "message", message: m }, cursor: m.seq };
            replayed = m.seq;
          }
        }
        last = state.head;
        // The stream skipped what is no longer pending up to the head: a client resuming must do
        // so from there, not from its last message (which would bring back what was skipped).
        if (replayed !== last) yield { kind: "keepAlive", atMs: clock.now(), cursor: last };
      }
      const liveFrom = state.head;
      const tooSlow = () => peersOverflowed || liveHead - Math.max(last, liveFrom) > deps.maxLag;
      /**
       * How far the store has been read: a read that returned less than a page saw everything
       * committed up to what had been announced when it began. An announced event it did not
       * return was purged since (its message ended and its retention passed while this stream
       * lagged), and is not looked for again, or the loop would read the store without end.
       */
      let read = last;

      while (!signal.aborted) {
        if (recheck) {
          recheck = false;
          await presence.requireKey(caller);
        }
        const live = takeContiguous(handed, last);
        // The store is read only for what the bus announced without handing it over (or before
        // the stream was live): a wake for a peer, a recheck or an event already sent reads nothing.
        const announced = Math.max(liveHead, liveFrom);
        const behind = announced > Math.max(last, read);
        let events = live;
        if (live.length === 0 && behind) {
          events = await store.messages.readInbox(caller.agentId, last, page);
          // The agent changed while the store was read (taken over, say, and a message sent to
          // its next instance): its key is checked before anything read is sent, and the read
          // made again if the key still holds.
          if (recheck) continue;
          // The presence bus may not have told yet: on PostgreSQL, a message sent through another
          // replica after a takeover can be announced here before the takeover's presence change.
          // What the store read is sent only once the key is seen after that read (one point
          // read, only for a read that found something).
          if (events.length > 0) await presence.requireKey(caller);
          if (events.length < page) read = announced;
        }
        for (const event of events) {
          if (tooSlow()) throw errors.subscriberTooSlow(last);
          yield { kind: "event", event, cursor: event.seq };
          last = event.seq;
        }
        while (peers.length > 0) {
          if (tooSlow()) throw errors.subscriberTooSlow(last);
          yield { ...peers.shift()!, cursor: last };
        }
        if (events.length === page || liveHead > Math.max(last, read)) continue;
        if (!(await waker.wait(deps.keepAliveMs, signal))) {
          // An open stream is a connected agent: keep its presence fresh.
          await presence.recordActivity(caller);
          yield { kind: "keepAlive", atMs: clock.now(), cursor: last };
        }
      }
    } finally {
      unsubscribeInbox();
      unsubscribePresence();
    }
  };
}

export type InboxStreams = ReturnType<typeof createInboxStreams>;
