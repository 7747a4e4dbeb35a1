import { errors } from "../errors.js";
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

/**
 * Counts one request against `key` in `limiter` (auth/rate-limit.ts), writes its rate headers
 * into `into`, and throws rate_limited once the key's budget is spent: what every face does with
 * a request it charges.
 */
export function charge(limiter: { take(key: string, nowMs: number): RateHeaderVerdict | undefined }, key: string, nowMs: number, into: HeaderWriter): void {
  const verdict = limiter.take(key, nowMs);
  rateHeaders(verdict, into);
  if (verdict?.retryAfterMs !== undefined) throw errors.rateLimited(verdict.retryAfterMs);
}
