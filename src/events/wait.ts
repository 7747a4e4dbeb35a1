import type { Clock } from "../clock.js";

/** The reason a waker's finished sleep is aborted with. */
const woken = Symbol("woken");

/**
 * A wake-up latch for a stream loop: `wake()` from a bus listener, `wait()` in the loop. Waiting
 * ends on a wake, after `timeoutMs` of hub time (false: idle, send a keep-alive) or on abort.
 */
export function createWaker(clock: Clock) {
  let pending = false;
  let resolve: ((woke: boolean) => void) | undefined;
  return {
    wake(): void {
      pending = true;
      resolve?.(true);
    },
    async wait(timeoutMs: number, signal: AbortSignal): Promise<boolean> {
      if (pending || signal.aborted) {
        pending = false;
        return true;
      }
      const timer = new AbortController();
      const onAbort = () => resolve?.(true);
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        return await new Promise<boolean>((r) => {
          resolve = r;
          void clock.sleep(timeoutMs, timer.signal).then(() => r(false));
        });
      } finally {
        resolve = undefined;
        pending = false;
        timer.abort(woken); // a reason of our own: abort() alone would build a DOMException
        signal.removeEventListener("abort", onAbort);
      }
    },
  };
}
