import { cors as connectCors } from "@connectrpc/connect";
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
