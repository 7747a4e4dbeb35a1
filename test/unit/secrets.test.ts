import { createHash } from "node:crypto";
import { describe, expect } from "vitest";
import { fc, it } from "@fast-check/vitest";
import { secretEquals, secretMatchesHash, sha256Hex } from "../../src/ids.js";

/** SHA-256 as hex, from a Hash object: not the code under test. */
const reference = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

describe("presented secrets against expected ones", () => {
  it.prop([fc.string({ minLength: 1, unit: "grapheme" }), fc.string({ unit: "grapheme" })])(
    "a secret matches its own digest and the secret itself, and another secret matches neither",
    (secret, other) => {
      expect(sha256Hex(secret)).toBe(reference(secret));
      expect(secretMatchesHash(secret, reference(secret))).toBe(true);
      expect(secretEquals(secret, secret)).toBe(true);
      expect(secretMatchesHash(other, reference(secret))).toBe(other === secret);
      expect(secretEquals(other, secret)).toBe(other === secret);
    },
  );

  it.prop([fc.string({ minLength: 1 }), fc.nat({ max: 63 })])("one changed digit of the stored digest refuses the secret", (secret, at) => {
    const stored = reference(secret);
    const changed = stored.slice(0, at) + (stored[at] === "0" ? "1" : "0") + stored.slice(at + 1);
    expect(secretMatchesHash(secret, changed)).toBe(false);
  });

  it.prop([fc.string({ minLength: 1 })])("a stored digest that is not 64 lowercase hex digits refuses every secret", (secret) => {
    const stored = reference(secret);
    for (const bad of ["", stored.slice(0, 63), `${stored}0`, stored.toUpperCase() === stored ? `${stored}x` : stored.toUpperCase()]) {
      expect(secretMatchesHash(secret, bad)).toBe(false);
    }
  });

  it.prop([fc.array(fc.oneof(fc.constantFrom("k1", "k2", "k3"), fc.string({ minLength: 1 }), fc.string({ minLength: 250, maxLength: 300 })), { minLength: 1, maxLength: 40 }), fc.nat({ max: 5_000 })])(
    "each presentation is answered alone: over and over, in any order, past the thousands the hub remembers",
    (presented, others) => {
      // Fills the memory of recent digests past its bound first, so that it is emptied on the way.
      for (let i = 0; i < others; i++) secretMatchesHash(`other-${i}`, reference(`other-${i}`));
      for (const [i, secret] of presented.entries()) {
        const prior = presented[(i + 1) % presented.length]!;
        expect(secretMatchesHash(secret, reference(secret))).toBe(true);
        expect(secretMatchesHash(secret, reference(prior))).toBe(secret === prior);
        expect(secretEquals(secret, prior)).toBe(secret === prior);
      }
    },
  );

  it.prop([fc.string({ minLength: 1 })])("nothing presented matches nothing", (secret) => {
    for (const presented of [undefined, null, ""]) {
      expect(secretMatchesHash(presented, reference(secret))).toBe(false);
      expect(secretEquals(presented, secret)).toBe(false);
    }
    expect(secretEquals(secret, undefined)).toBe(false);
    expect(secretEquals(secret, null)).toBe(false);
  });
});
