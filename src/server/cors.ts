import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { cors as connectCors } from "@connectrpc/connect";

const allowHeaders = [...connectCors.allowedHeaders, "Authorization", "X-Kxm-Agent-Id", "X-Kxm-Agent-Key", "X-Request-Id"].join(", ");
const exposeHeaders = [
  ...connectCors.exposedHeaders,
  "X-Request-Id",
  "X-Ratelimit-Limit",
  "X-Ratelimit-Remaining",
  "Retry-After",
].join(", ");
const allowMethods = [...new Set([...connectCors.allowedMethods, "GET", "POST", "DELETE"])].join(", ");

/**
 * CORS for browsers (Connect-Web, REST): `origins` lists allowed origins, "*" allows any.
 * Returns true when it answered the request (a preflight).
 */
export function createCors(origins: string[]) {
  const any = origins.includes("*");
  const allowed = new Set(origins);
  return function handleCors(
    req: IncomingMessage | Http2ServerRequest,
    res: ServerResponse | Http2ServerResponse,
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
