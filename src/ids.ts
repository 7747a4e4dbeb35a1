import { hash, randomUUID, timingSafeEqual } from "node:crypto";

/** `<prefix>_` + 32 lowercase hex (a UUIDv4 without dashes). */
export const newId = (prefix: "agt" | "msg" | "req" | "key" | "wtr") => `${prefix}_${randomUUID().replaceAll("-", "")}`;

// crypto.hash, the one-shot form: a third cheaper than a Hash object per call (every call hashes
// the key it presents).
export const sha256Hex = (text: string) => hash("sha256", text, "hex");

const digest = (text: string) => hash("sha256", text, "buffer");

/** Digests of the expected secrets (the configured tokens: a handful), hashed once each. */
const expectedDigests = new Map<string, Buffer>();
function expectedDigest(expected: string): Buffer {
  let d = expectedDigests.get(expected);
  if (!d) {
    if (expectedDigests.size >= 1_024) expectedDigests.clear();
    expectedDigests.set(expected, (d = digest(expected)));
  }
  return d;
}

/** Constant-time comparison of two secrets through their SHA-256 digests. */
export function secretEquals(presented: string | undefined | null, expected: string | undefined | null): boolean {
  if (typeof presented !== "string" || typeof expected !== "string" || presented === "") return false;
  return timingSafeEqual(digest(presented), expectedDigest(expected));
}

/** Constant-time check of a presented secret against a stored SHA-256 hex digest. */
export function secretMatchesHash(presented: string | undefined | null, expectedHex: string): boolean {
  if (typeof presented !== "string" || presented === "") return false;
  const expected = Buffer.from(expectedHex, "hex");
  const actual = digest(presented);
  return expected.length === actual.length && timingSafeEqual(actual, expected);
}
