/**
 * Fixed-window request budget per key, in memory (resets on restart), on the hub clock.
 * @NOTE decision D40: keys are authenticated identities (agent id, else token, else remote
 * address); never a header the caller chose without proving it.
 */
export interface RateVerdict {
  limit: number;
  remaining: number;
  /** Set when the request is over budget: time until the window ends, at least 1 s. */
  retryAfterMs?: number;
}

export function createRateLimiter(options: { windowMs: number; maxRequests: number } | false) {
  const buckets = new Map<string, { startedAtMs: number; count: number }>();
  return {
    enabled: options !== false,

    /** Counts one request against `key`. Undefined when rate limiting is off. */
    take(key: string, nowMs: number): RateVerdict | undefined {
      if (!options) return undefined;
      let b = buckets.get(key);
      if (!b || nowMs - b.startedAtMs >= options.windowMs) {
        b = { startedAtMs: nowMs, count: 0 };
        buckets.set(key, b);
      }
      b.count += 1;
      const verdict: RateVerdict = { limit: options.maxRequests, remaining: Math.max(0, options.maxRequests - b.count) };
      if (b.count > options.maxRequests) {
        verdict.retryAfterMs = Math.max(1_000, Math.ceil((b.startedAtMs + options.windowMs - nowMs) / 1_000) * 1_000);
      }
      return verdict;
    },

    /** Drops buckets whose window ended (sweep). */
    prune(nowMs: number): void {
      if (!options) return;
      for (const [key, b] of buckets) if (b.startedAtMs < nowMs - options.windowMs) buckets.delete(key);
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;

/** The rate-limit key of a caller: its identity when authenticated, else its address. */
export function rateKey(identity: { agentId?: string; token?: string } | undefined, remoteAddress: string): string {
  if (identity?.agentId) return `agent:${identity.agentId}`;
  if (identity?.token) return `token:${identity.token}`;
  return `addr:${remoteAddress}`;
}
