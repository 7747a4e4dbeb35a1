import { hash, randomUUID } from "node:crypto";

/** `<prefix>_` + 32 lowercase hex (a UUIDv4 without dashes). */
export const newId = (prefix: "agt" | "msg" | "req" | "key" | "wtr") => `${prefix}_${randomUUID().replaceAll("-", "")}`;

// crypto.hash, the one-shot form: a third cheaper than a Hash object per call (every call hashes
// the key it presents).
export const sha256Hex = (text: string) => hash("sha256", text, "hex");

/** Digests of the expected secrets (the configured tokens: a handful), hashed once each. */
const expectedDigests = new Map<string, string>();
function expectedDigest(expected: string): string {
  let d = expectedDigests.get(expected);
  if (d === undefined) {
    if (expectedDigests.size >= 1_024) expectedDigests.clear();
    expectedDigests.set(expected, (d = sha256Hex(expected)));
  }
  return d;
}

/**
 * Whether two hex digests are the same, in a time that depends on their length only (every
 * character is compared, whatever the first difference). Digests are compared as the hex text
 * `sha256Hex` writes and the stores keep: a digest made as a Buffer (for `timingSafeEqual`) costs
 * a new ArrayBuffer, about three times the hashing itself, on every authenticated call.
 */
function sameDigest(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let differ = 0;
  for (let i = 0; i < a.length; i++) differ |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return differ === 0;
}

/** Constant-time comparison of two secrets through their SHA-256 digests. */
export function secretEquals(presented: string | undefined | null, expected: string | undefined | null): boolean {
  if (typeof presented !== "string" || typeof expected !== "string" || presented === "") return false;
  return sameDigest(sha256Hex(presented), expectedDigest(expected));
}

/** Constant-time check of a presented secret against a stored SHA-256 digest (lowercase hex, as `sha256Hex` writes it). */
export function secretMatchesHash(presented: string | undefined | null, expectedHex: string): boolean {
  if (typeof presented !== "string" || presented === "") return false;
  return sameDigest(sha256Hex(presented), expectedHex);
}
