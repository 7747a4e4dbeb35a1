/** The hub clock: every time decision (leases, presence, TTLs, sync stamps, retention) reads it. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
