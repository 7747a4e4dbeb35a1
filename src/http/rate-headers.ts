import type { HeaderWriter } from "./header-bag.js";

/** The rate limiter's verdict on a counted request, as its headers need it (auth/rate-limit.ts). */
export interface RateHeaderVerdict {
  limit: number;
  remaining: number;
  retryAfterMs?: number;
}

/** `x-ratelimit-*` (and `retry-after` when refused) for a counted request, on every face. */
export function rateHeaders<T extends HeaderWriter>(v: RateHeaderVerdict | undefined, into: T): T {
  if (!v) return into;
  into.set("x-ratelimit-limit", String(v.limit));
  into.set("x-ratelimit-remaining", String(v.remaining));
  if (v.retryAfterMs !== undefined) into.set("retry-after", String(Math.ceil(v.retryAfterMs / 1_000)));
  return into;
}
