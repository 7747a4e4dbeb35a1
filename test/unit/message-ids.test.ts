import { describe, expect } from "vitest";
import { fc, it } from "@fast-check/vitest";
import { newTimeOrderedId } from "../../src/ids.js";

// D83: a message id is `msg_` + 32 lowercase hex, the shape of every id, laid out as a UUIDv7
// (RFC 9562): 48 bits of the decision's milliseconds, the version 7, the variant, 74 random bits.
const uuid7 = /^msg_[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$/;
const maxMs = 2 ** 48 - 1;
const hexMs = (ms: number) => ms.toString(16).padStart(12, "0");

describe("time-ordered message ids (D83)", () => {
  it.prop([fc.integer({ min: 0, max: maxMs })])("a UUIDv7 whose first 48 bits are the time it was made at", (ms) => {
    const id = newTimeOrderedId("msg", ms);
    expect(id).toMatch(uuid7);
    expect(id.slice(4, 16)).toBe(hexMs(ms));
  });

  it.prop([fc.integer({ min: 0, max: maxMs - 1 }), fc.integer({ min: 1, max: 10_000 })])(
    "an id made later sorts after, whatever their random bits",
    (ms, later) => {
      expect(newTimeOrderedId("msg", ms) < newTimeOrderedId("msg", Math.min(maxMs, ms + later))).toBe(true);
    },
  );

  it("keeps 74 random bits: ids of the same millisecond differ", () => {
    const ids = new Set(Array.from({ length: 20_000 }, () => newTimeOrderedId("msg", 1_700_000_000_000)));
    expect(ids.size).toBe(20_000);
    // Every random hex digit takes more than one value over them (none is fixed by the layout).
    for (const at of [17, 18, 19, 21, 25, 30, 35]) expect(new Set([...ids].map((id) => id[at])).size).toBeGreaterThan(1);
  });

  it("clamps a time outside 0..2^48-1 ms into it", () => {
    expect(newTimeOrderedId("msg", -5).slice(4, 16)).toBe(hexMs(0));
    expect(newTimeOrderedId("msg", 2 ** 50).slice(4, 16)).toBe(hexMs(maxMs));
    expect(newTimeOrderedId("msg", 12.9).slice(4, 16)).toBe(hexMs(12));
    expect(newTimeOrderedId("msg", Number.NaN)).toMatch(uuid7);
  });
});
