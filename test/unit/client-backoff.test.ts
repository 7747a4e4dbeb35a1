import { describe, expect, it } from "vitest";
import { jittered } from "../../clients/ts/src/clock.js";

/**
 * The TypeScript library's back-off pauses (inbox, awaitReply, RunFactSync) are jittered: between
 * half of the pause and all of it, so that the clients a hub restart cut off come back spread
 * out, not in step. The Python library's twin is held by test_library.py.
 */
describe("jittered", () => {
  it("is half the pause at the low end of the random range and the whole pause at its high end", () => {
    expect(jittered(100, () => 0)).toBe(50);
    expect(jittered(100, () => 0.5)).toBe(75);
    expect(jittered(5_000, () => 1)).toBe(5_000);
  });

  it("spreads the pauses of many clients over the range", () => {
    const pauses = Array.from({ length: 200 }, () => jittered(1_000));
    expect(Math.min(...pauses)).toBeGreaterThanOrEqual(500);
    expect(Math.max(...pauses)).toBeLessThanOrEqual(1_000);
    // 200 draws: a tenth of them in each tenth of the range, roughly; none empty but by a chance of 2e-9.
    const tenths = new Set(pauses.map((p) => Math.min(9, Math.floor((p - 500) / 50))));
    expect(tenths.size).toBe(10);
  });
});
