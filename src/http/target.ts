import type { NodeRequest as Req } from "./types.js";
/** The request target and authority as the hub reads them, for every face. */

/** The request target as the hub reads it: an origin-form path and its query. */
export interface RequestTarget {
  pathname: string;
  search: string;
}

/**
 * Reads an origin-form request target (`/path?query`) exactly as sent: no dot-segment removal
 * (`/v1/x/../agents` is no route), and `//evil/v1/agents` is a path, never a URL with a host.
 * Anything else — `*`, an absolute URL, an authority, no target at all — is undefined.
 */
export function parseRequestTarget(url: string | undefined): RequestTarget | undefined {
  if (url === undefined || !url.startsWith("/") || url.includes("#")) return undefined;
  const q = url.indexOf("?");
  return q < 0 ? { pathname: url, search: "" } : { pathname: url.slice(0, q), search: url.slice(q) };
}

/** Whether the request names an authority (`:authority` or `Host`) that makes no valid URL. */
export function invalidAuthority(req: Req): boolean {
  const authority = "authority" in req && req.authority ? req.authority : req.headers.host;
  return typeof authority === "string" && authority !== "" && validAuthority(req) === undefined;
}

/** The request's authority (`:authority` or `Host`) when it makes a valid URL, else undefined. */
export function validAuthority(req: Req): string | undefined {
  const authority = "authority" in req && req.authority ? req.authority : req.headers.host;
  if (typeof authority !== "string" || authority === "") return undefined;
  return hostnameOf(authority) === undefined ? undefined : authority;
}

/** Authorities parsed lately, and what each gave (a client names the same one at every call). */
const parsed = new Map<string, string | undefined>();
/** At most this many: past it the map starts again, so a client naming a new one each time costs a parse each, as with none. */
const parsedMax = 256;
/** Longer ones (past what a DNS name and a port take) are parsed each time and never kept: at most 256 short keys. */
const keptLength = 300;

/**
 * The host name (IPv6 brackets kept) of a URL with authority `authority`, or undefined when that
 * makes no URL or one without a host. Parsed once per distinct authority while it stays among
 * the last ones parsed: the WHATWG URL parser costs a few microseconds at every call otherwise.
 */
export function hostnameOf(authority: string): string | undefined {
  if (parsed.has(authority)) return parsed.get(authority);
  let hostname: string | undefined;
  try {
    const url = new URL(`http://${authority}`);
    hostname = url.host === "" ? undefined : url.hostname;
  } catch {
    hostname = undefined;
  }
  if (authority.length > keptLength) return hostname;
  if (parsed.size >= parsedMax) parsed.clear();
  parsed.set(authority, hostname);
  return hostname;
}
