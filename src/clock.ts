import { setTimeout as delay } from "node:timers/promises";

/** The hub clock: every time decision (leases, presence, TTLs, sync stamps, retention) reads it. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /**
   * Resolves once `ms` of hub time have passed, or early (without error) when `signal` aborts.
   * Stream keep-alives wait on it, so tests drive them by moving the clock.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) => delay(ms, undefined, { signal }).catch(() => undefined),
};
