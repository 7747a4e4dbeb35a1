import { fc, test } from "@fast-check/vitest";
import { describe, expect } from "vitest";
import { isoOfMs } from "../../src/clock.js";

/** isoOfMs is Date's toISOString, minute prefixes kept: the same text for every time. */
describe("isoOfMs", () => {
  test.prop([fc.integer({ min: -8.64e15, max: 8.64e15 })])("writes any time as toISOString does", (ms) => {
    expect(isoOfMs(ms)).toBe(new Date(ms).toISOString());
  });

  test.prop([fc.integer({ min: 0, max: 253_402_300_799_999 }), fc.array(fc.integer({ min: -120_000, max: 120_000 }), { maxLength: 20 })])(
    "writes times near one another (the kept minutes) as toISOString does",
    (base, steps) => {
      for (const ms of [base, ...steps.map((d) => Math.min(Math.max(base + d, 0), 253_402_300_799_999))]) {
        expect(isoOfMs(ms)).toBe(new Date(ms).toISOString());
      }
    },
  );

  test.prop([fc.double({ noNaN: false, min: -1e16, max: 1e16 })])("a time that is no integer millisecond: as Date writes it, or its RangeError", (ms) => {
    let expected: string | Error;
    try {
      expected = new Date(ms).toISOString();
    } catch (e) {
      expected = e as Error;
    }
    if (typeof expected === "string") expect(isoOfMs(ms)).toBe(expected);
    else expect(() => isoOfMs(ms)).toThrow(RangeError);
  });
});
