import { describe, expect, it } from "vitest";
import { createWaker } from "../../src/events/wait.js";
import { FakeClock } from "../fixtures/fake-clock.js";

/** The latch every stream loop waits on (src/events/wait.ts), on the hub clock. */
describe("a stream's waker", () => {
  const turn = () => new Promise((r) => setImmediate(r));

  it("a wake ends the wait with true and disarms its timer", async () => {
    const clock = new FakeClock();
    const waker = createWaker(clock);
    const waited = waker.wait(15_000, new AbortController().signal);
    expect(clock.sleepers).toBe(1);
    waker.wake();
    expect(await waited).toBe(true);
    expect(clock.sleepers).toBe(0);
    // The disarmed timer fires nothing later: a wait after it still lasts its own time.
    const next = waker.wait(15_000, new AbortController().signal);
    clock.advance(14_999);
    await turn();
    expect(clock.sleepers).toBe(1);
    clock.advance(1);
    expect(await next).toBe(false);
  });

  it("idle for the whole timeout of hub time ends the wait with false", async () => {
    const clock = new FakeClock();
    const waker = createWaker(clock);
    let settled: boolean | undefined;
    const waited = waker.wait(1_000, new AbortController().signal).then((v) => (settled = v));
    clock.advance(999);
    await turn();
    expect(settled).toBeUndefined();
    clock.advance(1);
    await waited;
    expect(settled).toBe(false);
    expect(clock.sleepers).toBe(0);
  });

  it("an abort ends the wait with true and disarms its timer", async () => {
    const clock = new FakeClock();
    const waker = createWaker(clock);
    const stop = new AbortController();
    const waited = waker.wait(15_000, stop.signal);
    stop.abort();
    expect(await waited).toBe(true);
    expect(clock.sleepers).toBe(0);
    // An already aborted signal does not wait at all.
    expect(await waker.wait(15_000, stop.signal)).toBe(true);
    expect(clock.sleepers).toBe(0);
  });

  it("a wake that came before the wait is not lost, and is used once", async () => {
    const clock = new FakeClock();
    const waker = createWaker(clock);
    waker.wake();
    expect(await waker.wait(15_000, new AbortController().signal)).toBe(true);
    expect(clock.sleepers).toBe(0);
    const next = waker.wait(500, new AbortController().signal);
    clock.advance(500);
    expect(await next).toBe(false);
  });
});
