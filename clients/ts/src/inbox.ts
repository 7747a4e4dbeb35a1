import type { Client } from "@connectrpc/connect";
import { jittered, type Clock } from "./clock.js";
import { callError } from "./errors.js";
import type { Message, PeerService } from "./generated.js";

/** One event of the agent's inbox stream. */
export interface InboxEvent {
  /** `message`: to this agent; `reply`: to a message it sent; `cancelled`, `expired`. */
  kind: "message" | "reply" | "cancelled" | "expired";
  message: Message;
  /** Its number in the stream: resume after it with `inbox({ afterSeq })`. */
  cursor: bigint;
  /** Acknowledges a `message` (it is delivered). */
  ack(): Promise<Message>;
  /** Replies to a `message`. */
  reply(content: string): Promise<Message>;
}

export interface InboxOptions {
  /** Start after this cursor; default: the messages not yet acknowledged, then live ones. */
  afterSeq?: bigint;
  /** Ends the iteration (the loop returns; nothing is thrown). */
  signal?: AbortSignal;
}

const kinds = new Set(["message", "reply", "cancelled", "expired"]);

/**
 * The inbox as an async iterator that outlives connections: it resumes from the last cursor it
 * handed out after a dropped connection or a hub restart (nothing lost, nothing twice), resumes
 * where `subscriber_too_slow` says, and ends with a HubError only for what retrying cannot fix
 * (`cursor_expired`, an identity the hub refuses). An abort of `signal` ends it quietly; it is
 * never taken for a dropped connection.
 */
export async function* inboxEvents(peer: Client<typeof PeerService>, clock: Clock, o: InboxOptions = {}): AsyncGenerator<InboxEvent> {
  let after = o.afterSeq;
  let backoffMs = 100;
  while (!o.signal?.aborted) {
    try {
      for await (const f of peer.subscribe({ ...(after !== undefined && { afterSeq: after }) }, { signal: o.signal })) {
        backoffMs = 100;
        const ev = f.event;
        // A keep-alive's cursor is where the stream stands: past what it skipped (what was no
        // longer pending when it opened), which a resume must not bring back.
        if (ev.case === "keepAlive") {
          if (after === undefined || f.cursor > after) after = f.cursor;
          continue;
        }
        if (!ev.case || !kinds.has(ev.case)) continue;
        const message = ev.value as Message;
        after = f.cursor;
        yield {
          kind: ev.case as InboxEvent["kind"],
          message,
          cursor: f.cursor,
          // Refusals as HubErrors, as every call of the library answers them (duplicate_reply, ...).
          ack: async () => (await peer.ackMessage({ messageId: message.id }).catch((e: unknown) => Promise.reject(callError(e, undefined)))).message!,
          reply: async (content: string) => (await peer.replyMessage({ messageId: message.id, content }).catch((e: unknown) => Promise.reject(callError(e, undefined)))).message!,
        };
      }
    } catch (e) {
      if (o.signal?.aborted) return;
      const err = callError(e, o.signal);
      if (err.code === "subscriber_too_slow") {
        after = BigInt(err.metadata.resumeAfterSeq ?? String(after ?? 0n));
        continue;
      }
      if (!err.transient) throw err;
    }
    // The stream ended or the hub is away: reconnect, from the last cursor, with a back-off.
    await clock.sleep(jittered(backoffMs), o.signal);
    backoffMs = Math.min(backoffMs * 2, 5_000);
  }
}
