import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Authenticator } from "../auth/authenticate.js";
import { errors } from "../errors.js";
import type { HubStore } from "../store/store.js";
import type { Metrics } from "./metrics.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

function json(res: Res, status: number, body: unknown) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": String(Buffer.byteLength(text)),
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
  });
  res.end(text);
}

/**
 * `/health`, `/ready` (never rate limited, no auth) and `/metrics` (admin). Answers and returns
 * true when the path is one of them; throws invalid_auth for a non-admin `/metrics`.
 */
export function createOpsRoutes(deps: { store: HubStore; metrics: Metrics; authenticator: Authenticator }) {
  return async function handleOps(req: Req, res: Res, pathname: string): Promise<boolean> {
    if (req.method !== "GET") return false;
    if (pathname === "/health") {
      json(res, 200, { ok: true, agents: await deps.store.countOnlineAgents() });
      return true;
    }
    if (pathname === "/ready") {
      const ok = await deps.store.ready();
      json(res, ok ? 200 : 503, { ok, storage: deps.store.storage });
      return true;
    }
    if (pathname === "/metrics") {
      const authorization = typeof req.headers.authorization === "string" ? req.headers.authorization : null;
      if (!deps.authenticator.isAdmin({ authorization, agentId: null, agentKey: null })) throw errors.invalidAuth();
      const body = await deps.metrics.render();
      res.writeHead(200, { "content-type": deps.metrics.contentType, "cache-control": "no-store" });
      res.end(body);
      return true;
    }
    return false;
  };
}
