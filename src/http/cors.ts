import { cors as connectCors } from "@connectrpc/connect";
import { isLoopback } from "../config.js";
import { errors, type HubError } from "../errors.js";
import { hostnameOf, validAuthority } from "./target.js";
import type { NodeRequest, NodeResponse } from "./types.js";

/** What MCP's Streamable HTTP transport sends and reads (the MCP face at /mcp), and the headers that name its agent. */
const mcpRequestHeaders = ["Mcp-Session-Id", "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Last-Event-ID", "X-Kxm-Project", "X-Kxm-Agent", "X-Kxm-Host", "X-Kxm-Purpose"];
const mcpResponseHeaders = ["Mcp-Session-Id", "MCP-Protocol-Version", "WWW-Authenticate"];

const allowHeaders = [...connectCors.allowedHeaders, "Authorization", "X-Kxm-Agent-Id", "X-Kxm-Agent-Key", "X-Request-Id", ...mcpRequestHeaders].join(", ");
const exposeHeaders = [
  ...connectCors.exposedHeaders,
  ...mcpResponseHeaders,
  "X-Request-Id",
  "X-Ratelimit-Limit",
  "X-Ratelimit-Remaining",
  "Retry-After",
].join(", ");
const allowMethods = [...new Set([...connectCors.allowedMethods, "GET", "POST", "DELETE"])].join(", ");

/** Whether a browser page of `origin` may call the hub (`origins`: the configured list; "*" allows any). */
export const originAllowed = (origins: readonly string[], origin: string) => origins.includes("*") || origins.includes(origin);

/** Whether `origin` is the origin the request was addressed to (the hub's own pages: the operator page). */
function sameOrigin(origin: string, authority: string | undefined): boolean {
  if (authority === undefined) return false;
  try {
    const page = new URL(origin);
    return (page.protocol === "http:" || page.protocol === "https:") && page.host === new URL(`http://${authority}`).host;
  } catch {
    return false; // "null" (a sandboxed page, a file), or not a URL
  }
}

/**
 * Refuses a browser page's request from an origin the hub neither lists (`origins`) nor is (D67).
 * A page may send some requests without asking first (a POST with no body or a form's content
 * type, `fetch` in `no-cors` mode): it cannot read the answer, but the call is made, and on a
 * loopback hub without an admin token every caller is trusted as admin. A browser always names
 * the page in `Origin` on such a request; other clients send none.
 */
export function createPageGuard(origins: readonly string[]) {
  return (req: NodeRequest): HubError | undefined => {
    const origin = req.headers.origin;
    if (typeof origin !== "string" || originAllowed(origins, origin) || sameOrigin(origin, validAuthority(req))) return undefined;
    return errors.originNotAllowed(
      `requests from the page ${JSON.stringify(origin.slice(0, 200))} are not allowed: KXM_CORS_ORIGINS lists the origins that may call the hub`,
    );
  };
}

/** Whether `authority` (a valid `Host` / `:authority`) names this machine's loopback: the bind addresses isLoopback knows, and localhost's subdomains. */
export function loopbackAuthority(authority: string): boolean {
  const host = hostnameOf(authority)?.replace(/^\[(.*)\]$/, "$1");
  return host !== undefined && (isLoopback(host) || host.endsWith(".localhost"));
}

/**
 * On a hub that trusts its loopback callers (no admin token), refuses a request addressed to a
 * name that is not a loopback one (D67): a page that rebinds a name of its own to 127.0.0.1 is,
 * to the browser, of the origin its requests go to, so only the name it addressed tells it.
 */
export function createHostGuard(openLoopback: boolean) {
  return (req: NodeRequest): HubError | undefined => {
    if (!openLoopback) return undefined;
    const authority = validAuthority(req);
    if (authority === undefined || loopbackAuthority(authority)) return undefined;
    return errors.originNotAllowed(
      `this hub listens on loopback without an admin token, so it answers only requests addressed to a loopback name ` +
        `(localhost, 127.0.0.1, [::1]), not ${JSON.stringify(authority.slice(0, 200))}: set KXM_AUTH_TOKEN to serve other names`,
    );
  };
}

/**
 * CORS for browsers (Connect-Web, REST, MCP): `origins` lists allowed origins, "*" allows any.
 * Returns true when it answered the request (a preflight).
 */
export function createCors(origins: string[]) {
  const any = origins.includes("*");
  const allowed = new Set(origins);
  return function handleCors(
    req: NodeRequest,
    res: NodeResponse,
  ): boolean {
    const origin = req.headers.origin;
    if (typeof origin !== "string" || origins.length === 0) return false;
    const ok = any || allowed.has(origin);
    const preflight = req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined;
    if (ok) {
      res.setHeader("access-control-allow-origin", origin);
      res.setHeader("vary", "Origin");
      res.setHeader("access-control-expose-headers", exposeHeaders);
    }
    if (!preflight) return false;
    if (ok) {
      res.writeHead(204, {
        "access-control-allow-methods": allowMethods,
        "access-control-allow-headers": allowHeaders,
        "access-control-max-age": "7200",
      });
    } else {
      res.writeHead(403);
    }
    res.end();
    return true;
  };
}
