import type { RateLimiter } from "../auth/rate-limit.js";
import type { Clock } from "../clock.js";
import { sweepChunk } from "../domain.js";
import type { Leases } from "../lease/leases.js";
import type { Observer } from "../observe.js";
import type { Messages } from "../peer/messages.js";
import type { Presence } from "../presence/presence.js";

export interface SweepDeps {
  presence: Presence;
  leases: Leases;
  messages: Messages;
  /** Deletes watch changes past their retention, at most `limit`; returns how many. */
  purgeChanges: (limit: number) => Promise<number>;
  limiter: RateLimiter;
  clock: Clock;
  observer: Observer;
  intervalMs: number;
  /** Offline agents that nothing open names are forgotten after this long. */
  agentRetentionMs: number;
  /** Closes the MCP sessions idle past their limit. */
  expireIdleSessions?: () => Promise<number>;
  /** Notes the managed project tokens past their expiry (audit entry; their streams end). */
  noteExpiredTokens?: () => Promise<number>;
  /** Deletes the audit entries beyond their retention. */
  purgeAudit?: () => Promise<number>;
  /** Forgets the refused-authentication windows and the audit alert windows that ended. */
  pruneRefusals?: (nowMs: number) => void;
  /** Ends the server streams whose client has read nothing for too long (http/body.ts createStallWatch); how many. */
  endStalledStreams?: (nowMs: number) => number;
}

/**
 * The periodic sweep, in the reference's order (after ending the streams whose client reads
 * nothing): stale agents, message expiry, retention purge
 * (messages, then leases, then watch changes), then the offline agents past their retention
 * (after the messages naming them were purged), idle MCP sessions, expired project tokens, the
 * audit trail's retention, rate buckets. `runNow` is what tests call instead of waiting.
 */
export function createSweeper(deps: SweepDeps) {
  const { presence, leases, messages, purgeChanges, limiter, clock, observer, intervalMs, agentRetentionMs } = deps;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;

  async function runNow(): Promise<void> {
    // First: it needs no store, so a store that is away does not keep a stalled stream open.
    const stalled = deps.endStalledStreams?.(clock.now()) ?? 0;
    if (stalled > 0) observer.log("streams_stalled", { ended: stalled });
    await presence.sweepStale();
    await messages.expireDue();
    await messages.purge();
    await leases.purge();
    while ((await purgeChanges(sweepChunk)) >= sweepChunk);
    await presence.forgetOffline(agentRetentionMs);
    await deps.expireIdleSessions?.();
    await deps.noteExpiredTokens?.();
    await deps.purgeAudit?.();
    limiter.prune(clock.now());
    deps.pruneRefusals?.(clock.now());
  }

  return {
    runNow,
    start() {
      timer = setInterval(() => {
        if (running) return;
        running = runNow()
          .catch((e) => observer.log("sweep_failed", { error: String(e) }))
          .finally(() => (running = undefined));
      }, intervalMs);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      await running;
    },
  };
}
