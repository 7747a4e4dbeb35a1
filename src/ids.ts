import { hash, randomUUID } from "node:crypto";

/** `<prefix>_` + 32 lowercase hex (a UUIDv4 without dashes). */
export const newId = (prefix: "agt" | "req" | "key" | "wtr") => `${prefix}_${randomUUID().replaceAll("-", "")}`;

/** The largest time a UUIDv7 holds: 48 bits of milliseconds. */
const maxUuid7Ms = 2 ** 48 - 1;

/**
 * @NOTE decision D83: `<prefix>_` + 32 lowercase hex, the shape of every other id, but a UUIDv7
 * (RFC 9562) without dashes: its first 48 bits are `atMs` (the decision's time, from the hub's
 * clock), then the version 7, then 74 random bits with the RFC's variant. Ids made later sort
 * after, so a table or index keyed by them grows at its right edge instead of writing a random
 * page per row. A time outside 0..2^48-1 ms is clamped into it.
 */
export function newTimeOrderedId(prefix: "msg", atMs: number): string {
  const ms = Number.isFinite(atMs) ? Math.min(Math.max(0, Math.floor(atMs)), maxUuid7Ms) : 0;
  // A UUIDv4 is xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx: its 74 random bits after the version and
  // with the variant (V) are a UUIDv7's too.
  const r = randomUUID();
  return `${prefix}_${ms.toString(16).padStart(12, "0")}7${r.slice(15, 18)}${r.slice(19, 23)}${r.slice(24)}`;
}

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

/**
 * Digests of the secrets presented lately (decision D81): an agent presents the same key and
 * bearer token on every call, and hashing both was about 2.5% of the hub's thread per lease
 * cycle. Kept in memory only, as the configured tokens are (above), at most `presentedMax`,
 * emptied when full: made-up secrets only empty it sooner. A lookup's time tells whether that
 * exact string was presented before, which is no news to whoever holds it.
 */
const presentedDigests = new Map<string, string>();
const presentedMax = 4_096;
const presentedLengthMax = 256;
function presentedDigest(presented: string): string {
  if (presented.length > presentedLengthMax) return sha256Hex(presented);
  let d = presentedDigests.get(presented);
  if (d === undefined) {
    if (presentedDigests.size >= presentedMax) presentedDigests.clear();
    presentedDigests.set(presented, (d = sha256Hex(presented)));
  }
  return d;
}

/** Constant-time comparison of two secrets through their SHA-256 digests. */
export function secretEquals(presented: string | undefined | null, expected: string | undefined | null): boolean {
  if (typeof presented !== "string" || typeof expected !== "string" || presented === "") return false;
  return sameDigest(presentedDigest(presented), expectedDigest(expected));
}

/** Constant-time check of a presented secret against a stored SHA-256 digest (lowercase hex, as `sha256Hex` writes it). */
export function secretMatchesHash(presented: string | undefined | null, expectedHex: string): boolean {
  if (typeof presented !== "string" || presented === "") return false;
  return sameDigest(presentedDigest(presented), expectedHex);
}
