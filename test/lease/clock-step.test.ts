import { afterEach, describe, expect, it } from "vitest";
import { systemClock, type Clock } from "../../src/clock.js";
import type { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * The hub clock stepping back (an NTP correction, a VM resumed from a snapshot) while a blocking
 * acquire waits: the call still ends with lease_held when its `waitMs` has run out, measured on a
 * clock that never steps, not an hour later (src/lease/leases.ts waitFor). Real time, a real
 * system clock whose wall time the test steps.
 */

/** The system clock (real timers), whose wall time can be stepped back; its monotonic time never steps. */
class SteppedClock implements Clock {
  offsetMs = 0;
  now = () => Date.now() + this.offsetMs;
  monotonicNow = systemClock.monotonicNow;
  sleep = systemClock.sleep;
  after = systemClock.after;
}

let t: TestHub | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

describe("a blocking acquire across a clock step back", () => {
  it("ends with lease_held once waitMs has run out, not an hour later", async () => {
    const clock = new SteppedClock();
    t = await startTestHub({ clock: clock as unknown as FakeClock });
    const holder = await t.register("holder");
    const waiter = await t.register("waiter");
    const held = await t.rest("/v1/leases/deploy/acquire", { headers: holder.headers, json: { ttlMs: 300_000 } });
    expect(held.status).toBe(200);

    const startedAt = performance.now();
    let answer: { status: number; code?: string } | undefined;
    void t
      .rest("/v1/leases/deploy/acquire", { headers: waiter.headers, json: { ttlMs: 60_000, waitMs: 2_000 } })
      .then(async (res) => (answer = { status: res.status, code: ((await res.json()) as { code?: string }).code }));
    // once it is queued, the clock steps back by an hour
    for (const deadline = Date.now() + 5_000; ; ) {
      const rows = await t.sql("SELECT count(*) AS n FROM lease_waiters");
      if (rows[0]!.n === 1) break;
      if (Date.now() > deadline) throw new Error("the acquire never queued");
      await new Promise((r) => setTimeout(r, 10));
    }
    clock.offsetMs -= 3_600_000;

    for (const deadline = Date.now() + 6_000; !answer && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 20));
    expect(answer, `no answer ${Math.round(performance.now() - startedAt)} ms after an acquire that asked to wait 2 s`).toEqual({
      status: 409,
      code: "lease_held",
    });
  }, 20_000);
});
