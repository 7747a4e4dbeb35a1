/** Request ids, for every face: a well-formed `x-request-id` is echoed, else one is made. */
import { randomUUID } from "node:crypto";

const validRequestId = /^[A-Za-z0-9._-]{1,80}$/;

/** Echoes a well-formed `x-request-id`, else makes `req_<32 hex>`. */
export function requestIdOf(header: string | null): string {
  return header !== null && validRequestId.test(header) ? header : `req_${randomUUID().replaceAll("-", "")}`;
}

/** The request id of a Node request: its well-formed `x-request-id`, else a new one. */
export function requestIdOfRequest(req: { headers: Record<string, string | string[] | undefined> }): string {
  const header = req.headers["x-request-id"];
  return requestIdOf(typeof header === "string" ? header : null);
}
