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

/**
 * One pushed event's CPU work before the store: the schema check, then the canonical text and
 * its hash; undefined when the schema refuses the event. Pure, so it may run on any thread
 * (prepare-pool.ts) with the same answer.
 */
export function prepareEvent(event: unknown): PreparedEvent | undefined {
  if (checkSyncEvent(event) !== undefined) return undefined;
  const record = canonicalize(event)!;
  return { record, contentHash: contentHash(record) };
}
