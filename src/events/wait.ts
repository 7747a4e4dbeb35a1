import type { Clock } from "../clock.js";

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
      // A timer per wait, cancelled by nearly every one (a frame comes first): `after`, not a
      // sleep with an AbortController of its own, which cost a stream about 15 us more a frame.
      let cancel: (() => void) | undefined;
      const onAbort = () => resolve?.(true);
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        return await new Promise<boolean>((r) => {
          resolve = r;
          cancel = clock.after(timeoutMs, () => r(false));
        });
      } finally {
        resolve = undefined;
        pending = false;
        cancel?.();
        signal.removeEventListener("abort", onAbort);
      }
    },
  };
}
