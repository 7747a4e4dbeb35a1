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

export type Waker = ReturnType<typeof createWaker>;

/**
 * Keeps the agent of a call that waits (ReadInbox with waitMs, AcquireLease with waitMs) online
 * while it waits, as an open stream's keep-alive does: `record` (the agent's activity, for the
 * instance the call was authenticated as) runs whenever `everyMs` of hub time passed since the
 * call began or since it last ran. Without it an agent waiting longer than its presence lease
 * would be swept offline, unreachable for messages, while its call is open. `record` throws what
 * ends the wait (invalid_agent_identity once the instance has ended).
 */
export function createKeepOnline(clock: Clock, everyMs: number, record: () => Promise<unknown>) {
  let lastMs = clock.now();
  return {
    /**
     * `waker.wait` for up to `timeoutMs`, recording activity meanwhile: true when woken (or
     * aborted), false when the time ran out. The time runs out by the hub clock or once the
     * timers waited `timeoutMs` in all, whichever comes first: a hub clock stepping back does
     * not make the call wait longer than one wait of `timeoutMs` would.
     */
    async wait(waker: Waker, timeoutMs: number, signal: AbortSignal): Promise<boolean> {
      const endMs = clock.now() + timeoutMs;
      let budgetMs = timeoutMs;
      for (;;) {
        let nowMs = clock.now();
        // A hub clock that stepped back behind the last record counts as due too.
        if (nowMs - lastMs >= everyMs || nowMs < lastMs) {
          await record();
          lastMs = nowMs = clock.now();
        }
        if (signal.aborted) return true;
        const forMs = Math.min(budgetMs, endMs - nowMs, lastMs + everyMs - nowMs);
        if (forMs <= 0) return false;
        if (await waker.wait(forMs, signal)) return true;
        budgetMs -= forMs;
      }
    },
  };
}
