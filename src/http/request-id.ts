/** Request ids, for every face: a well-formed `x-request-id` is echoed, else one is made. */
import { randomFillSync } from "node:crypto";

const validRequestId = /^[A-Za-z0-9._-]{1,80}$/;

/** Random bytes for new ids, drawn a page at a time (as randomUUID does) and read 16 at a time. */
const pool = Buffer.alloc(4096);
let used = pool.length;

/** 32 lowercase hex digits: 16 random bytes. */
function randomHex(): string {
  if (used === pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  used += 16;
  return pool.toString("hex", used - 16, used);
}

/** Echoes a well-formed `x-request-id`, else makes `req_<32 hex>`. */
export function requestIdOf(header: string | null): string {
  return header !== null && validRequestId.test(header) ? header : `req_${randomHex()}`;
}

/** The request id of a Node request: its well-formed `x-request-id`, else a new one. */
export function requestIdOfRequest(req: { headers: Record<string, string | string[] | undefined> }): string {
  const header = req.headers["x-request-id"];
  return requestIdOf(typeof header === "string" ? header : null);
}
