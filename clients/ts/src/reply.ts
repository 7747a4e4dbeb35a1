import type { Client } from "@connectrpc/connect";
import { jittered, type Clock } from "./clock.js";
import { callError, HubError } from "./errors.js";
import { MessageStatus, type Message, type PeerService } from "./generated.js";

const ended: Partial<Record<MessageStatus, string>> = {
  [MessageStatus.CANCELLED]: "cancelled",
  [MessageStatus.EXPIRED]: "expired",
  [MessageStatus.ERROR]: "error",
};

/** The message if it is replied; throws `message_ended` if it ended without a reply; else undefined. */
function settled(m: Message): Message | undefined {
  if (m.status === MessageStatus.REPLIED) return m;
  const status = ended[m.status];
  if (status === undefined) return undefined;
  throw new HubError("message_ended", `message ${m.id} ended without a reply (${status})`, { status, error: m.error ?? "" });
}

/**
 * Waits for the reply to message `id`, which `selfId` sent: resolves with the message once it is
 * replied (`reply` set), whether the reply came before the call or comes later, without polling.
 * The inbox stream is opened first and the message read once the stream is ready, so a reply
 * that lands in between is on the stream; after a dropped connection (or `subscriber_too_slow`)
 * the stream is opened again and the message read again, so a reply made while it was down is
 * found too. Throws HubError: `message_ended` (cancelled, expired or failed: `metadata.status`),
 * `message_forbidden` (not a message this agent sent), `cancelled` (`signal` aborted), or the
 * hub's refusal (`message_not_found`, `invalid_agent_identity`).
 *
 * A sender that cancels its own message gets no event for it: whoever cancels should also abort
 * `signal`.
 */
export async function awaitReply(peer: Client<typeof PeerService>, clock: Clock, selfId: string, id: string, signal?: AbortSignal): Promise<Message> {
  let backoffMs = 100;
  for (;;) {
    if (signal?.aborted) throw new HubError("cancelled", "awaiting the reply was cancelled");
    const stream = new AbortController();
    const stop = () => stream.abort();
    signal?.addEventListener("abort", stop, { once: true });
    try {
      for await (const f of peer.subscribe({}, { signal: stream.signal })) {
        backoffMs = 100;
        const ev = f.event;
        if (ev.case === "ready") {
          const m = (await peer.getMessage({ messageId: id }, { signal: stream.signal })).message!;
          if (m.fromAgentId !== selfId) throw new HubError("message_forbidden", `message ${id} was not sent by this agent: its reply is not awaited here`);
          const done = settled(m);
          if (done) return done;
        } else if ((ev.case === "reply" || ev.case === "expired" || ev.case === "cancelled") && ev.value.id === id) {
          const done = settled(ev.value);
          if (done) return done;
        }
      }
    } catch (e) {
      if (signal?.aborted) throw new HubError("cancelled", "awaiting the reply was cancelled");
      const err = callError(e, signal);
      if (err.code !== "subscriber_too_slow" && !err.transient) throw err;
    } finally {
      signal?.removeEventListener("abort", stop);
      stream.abort();
    }
    // The stream ended or the hub is away: open it again and read the message again.
    await clock.sleep(jittered(backoffMs), signal);
    backoffMs = Math.min(backoffMs * 2, 5_000);
  }
}
