/** The hub clock: every time decision (leases, presence, TTLs, sync stamps, retention) reads it. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /**
   * Milliseconds on a clock that never steps (an origin of its own): how long something has
   * taken, whatever `now` does meanwhile (an NTP correction, a resumed VM). Moves with `now` in
   * tests.
   */
  monotonicNow(): number;
  /**
   * Resolves once `ms` of hub time have passed, or early (without error) when `signal` aborts.
   * Tests drive it, and `after`, by moving the clock.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /**
   * Calls `fire` once `ms` of hub time have passed; the function it returns cancels that (a no-op
   * once fired). For a loop that arms a timer per event and nearly always cancels it (a stream
   * waiting for its next frame or its keep-alive): no promise, signal or listener each time.
   */
  after(ms: number, fire: () => void): () => void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonicNow: () => performance.now(),
  // A plain timer and listener: every idle stream sleeps between frames, and an abort here is
  // routine (a frame came first), so it must not cost an AbortError and a rejection each time.
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener("abort", done, { once: true });
    }),
  after: (ms, fire) => {
    const timer = setTimeout(fire, ms);
    return () => clearTimeout(timer);
  },
};

/**
 * A clock whose time is `now()` and whose sleeps are `clock`'s: the hub clock of a replica, whose
 * time is the database's (the one every decision is made on), so the views a read computes
 * (online or stale, a lease's `expired`) and the stamps it writes agree with the decisions,
 * whatever this host's clock says.
 */
export const clockWithTime = (clock: Clock, now: () => number): Clock => ({
  now,
  monotonicNow: () => clock.monotonicNow(),
  sleep: (ms, signal) => clock.sleep(ms, signal),
  after: (ms, fire) => clock.after(ms, fire),
});

/**
 * The last minutes isoOfMs formatted, as `YYYY-MM-DDTHH:MM:`, replaced in turn. (Two slots
 * reordered on every hit ended up holding one minute twice, so a time and its expiry a minute
 * apart, written by turns, made a prefix again at every other call.)
 */
const isoMinutes: { minute: number; prefix: string }[] = Array.from({ length: 4 }, () => ({ minute: Number.NaN, prefix: "" }));
let nextIsoMinute = 0;
/** The last millisecond isoOfMs can write as `YYYY-...Z` (year 9999). */
const lastFourDigitYearMs = 253_402_300_799_999;

/**
 * `new Date(ms).toISOString()`, for an integer `ms`, with the minute's prefix kept: a busy hub
 * writes several times a call (an answer's stamps, its log lines), and Date's own formatting was
 * a visible share of a lease call (bench/steps.md). Years before
 * 1970 or past 9999 go to Date itself.
 */
export function isoOfMs(ms: number): string {
  if (!(ms >= 0 && ms <= lastFourDigitYearMs) || !Number.isInteger(ms)) return new Date(ms).toISOString();
  const minute = Math.floor(ms / 60_000);
  let slot = isoMinutes[0]!;
  for (let i = 1; slot.minute !== minute && i < isoMinutes.length; i++) slot = isoMinutes[i]!;
  if (slot.minute !== minute) {
    slot = isoMinutes[nextIsoMinute]!;
    nextIsoMinute = (nextIsoMinute + 1) % isoMinutes.length;
    slot.minute = minute;
    slot.prefix = new Date(minute * 60_000).toISOString().slice(0, 17);
  }
  const inMinute = ms - minute * 60_000;
  const s = Math.floor(inMinute / 1000);
  const milli = inMinute - s * 1000;
  return `${slot.prefix}${s < 10 ? "0" : ""}${s}.${milli < 100 ? (milli < 10 ? "00" : "0") : ""}${milli}Z`;
}
