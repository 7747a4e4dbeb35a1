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
