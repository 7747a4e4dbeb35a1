import { createHash } from "node:crypto";
import canonicalizeModule from "canonicalize";
import { checkSyncEvent } from "./schema.js";

/** RFC 8785 canonical JSON. The package is CommonJS typed as ESM: the default import is the function. */
const canonicalize = canonicalizeModule as unknown as typeof canonicalizeModule.default;

/** `sha256:` + hex of the canonical JSON (RFC 8785: keys sorted by UTF-16 units, no whitespace). */
export function contentHash(canonical: string): string {
  return `sha256:${createHash("sha256").update(canonical, "utf8").digest("hex")}`;
}

/** What the store keeps of a valid event: its canonical text and that text's hash. */
export interface PreparedEvent {
  record: string;
  contentHash: string;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
const isObject = (v: unknown): v is { [key: string]: Json } => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * A valid event as it is hashed and stored (D21): without its empty lists, nor an empty
 * `payload.counts` (the schema's one map), but for `redaction.fieldsOmitted`, which is always
 * there. protobuf cannot tell an empty list from an absent one, so the two are the same fact:
 * a repeat that sends one where it first sent the other is a duplicate, over any wire.
 */
export function storedForm(event: { [key: string]: Json }): { [key: string]: Json } {
  const strip = (v: Json, keep?: string): Json => {
    if (Array.isArray(v)) return v.map((x) => strip(x));
    if (!isObject(v)) return v;
    const out: { [key: string]: Json } = {};
    for (const [k, x] of Object.entries(v)) {
      if (Array.isArray(x) && x.length === 0 && k !== keep) continue;
      out[k] = strip(x);
    }
    return out;
  };
  const out = strip(event) as { [key: string]: Json };
  out.redaction = event.redaction!; // fieldsOmitted kept, even empty
  const payload = out.payload as { [key: string]: Json };
  if (isObject(payload.counts) && Object.keys(payload.counts).length === 0) delete payload.counts;
  return out;
}

/**
 * One pushed event's CPU work before the store: the schema check, then the canonical text of its
 * stored form and that text's hash; undefined when the schema refuses the event. Pure, so it may
 * run on any thread (prepare-pool.ts) with the same answer.
 */
export function prepareEvent(event: unknown): PreparedEvent | undefined {
  if (checkSyncEvent(event) !== undefined) return undefined;
  const record = canonicalize(storedForm(event as { [key: string]: Json }))!;
  return { record, contentHash: contentHash(record) };
}
