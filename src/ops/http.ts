import type { HubStore } from "../store/store.js";
import type { Metrics } from "./metrics.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

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
 * `/health`, `/ready` (never rate limited, no auth), `/metrics` (admin) and `/favicon.ico`.
 * Answers and returns true when the path is one of them. `/metrics` is authorized as an admin-only
 * call (`admin`: the same rule, budget and refusal alerts as every call), which throws the
 * refusal and answers the rate-limit headers to write.
 */
export function createOpsRoutes(deps: {
  store: Pick<HubStore, "storage" | "ready" | "agents">;
  metrics: Metrics;
  admin: (req: Req) => Promise<Record<string, string>>;
}) {
  return async function handleOps(req: Req, res: Res, pathname: string): Promise<boolean> {
    if (pathname === "/favicon.ico" && (req.method === "GET" || req.method === "HEAD")) {
      // Browsers ask for it on every visit to any page of the hub (the operator page, /metrics):
      // the hub has no icon, and says so without a route_not_found that would be logged and
      // counted in kxm_errors_total each time. Cached for a day, so they stop asking.
      res.writeHead(204, { "cache-control": "public, max-age=86400" });
      res.end();
      return true;
    }
    // HEAD as GET (RFC 9110 §9.3.2): probes that ask with HEAD get the status, without the body.
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    if (pathname === "/health") {
      // Says that the process is up, whether or not the store answers (a PostgreSQL database
      // away is /ready's to say): the online count only when the store gives it.
      const agents = await deps.store.agents.countOnlineAgents().catch(() => undefined);
      json(res, 200, { ok: true, ...(agents !== undefined && { agents }) });
      return true;
    }
    if (pathname === "/ready") {
      const ok = await deps.store.ready();
      json(res, ok ? 200 : 503, { ok, storage: deps.store.storage });
      return true;
    }
    if (pathname === "/metrics") {
      const rateHeaders = await deps.admin(req);
      const body = await deps.metrics.render();
      res.writeHead(200, { ...rateHeaders, "content-type": deps.metrics.contentType, "cache-control": "no-store" });
      res.end(body);
      return true;
    }
    return false;
  };
}
