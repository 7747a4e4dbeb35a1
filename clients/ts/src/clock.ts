/**
 * The time the library keeps (renewal intervals, when a lease must count as lost, back-off):
 * the process's monotonic clock by default. Tests pass their own, moved together with the
 * hub's clock.
 */
export interface Clock {
  /** Milliseconds; only differences are used. */
  now(): number;
  /** Resolves after `ms`, or early (without error) when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const monotonicClock: Clock = {
  now: () => performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      signal?.addEventListener("abort", done, { once: true });
    }),
};

/**
 * A back-off pause of `ms` with "equal jitter": half of it, and up to the other half at random.
 * The clients a hub restart cut off then come back spread over the pause, not all at once at
 * each of its doublings.
 */
export function jittered(ms: number, random: () => number = Math.random): number {
  return ms / 2 + random() * (ms / 2);
}
