import { isInitializeRequest, isLegacyRequest, ProtocolErrorCode } from "@modelcontextprotocol/server";
import type { Authenticator } from "../auth/authenticate.js";
import type { RefusalMonitor } from "../auth/audit.js";
import { rateKey, type RateLimiter } from "../auth/rate-limit.js";
import type { Clock } from "../clock.js";
import type { FaceObserver } from "../observe.js";
import type { InProcessCaller } from "../wire/in-process.js";
import { originAllowed } from "../http/cors.js";
import { requestIdOfRequest } from "../http/request-id.js";
import { remoteAddressOf } from "../http/listen.js";
import { invalidAuthority } from "../http/target.js";
import { createMcpCalls } from "./calls.js";
import { createSessions } from "./sessions.js";
import { createStateless } from "./stateless.js";
import { rpcError, webRequestOf } from "./web.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

export interface McpFaceDeps {
  /** The hub's methods behind its interceptors (auth, limits, metrics, errors). */
  call: InProcessCaller;
  /** The auth rules' check, for a caller that names no agent yet (register binds it later, or it only lists). */
  authenticate: Authenticator["authenticate"];
  /** Told of its refused authentications, as every face's are (bursts become audit alerts). */
  refusals?: Pick<RefusalMonitor, "refusedWith">;
  limiter: RateLimiter;
  clock: Clock;
  observer: FaceObserver;
  maxBodyBytes: number;
  /** Sessions open at once (and 2026-07-28 bindings kept at once); an initialize past it is refused (503) unless an idle one can go. */
  maxSessions: number;
  /** A session unused this long is closed, a binding forgotten (its agent's leases lapse at their TTL). */
  idleMs: number;
  /** The longest lease TTL (a binding used within it is kept: stateless.ts). */
  leaseTtlMaxMs: number;
  version: string;
  /** The browser origins that may call the hub (KXM_CORS_ORIGINS); a request from any other page is refused. */
  corsOrigins: readonly string[];
  /** Aborted when the hub shuts down (before `close`). */
  shutdownSignal?: AbortSignal;
}

/**
 * The MCP face at `/mcp` (MCP's Streamable HTTP transport, the SDK's own), in every protocol
 * version the SDK serves:
 *
 * - 2024-11-05 … 2025-11-25 (sessions.ts): a session per `initialize`, bound to the agent its
 *   headers name (or later by `register`), with DELETE, a GET stream and resources/subscribe;
 * - 2026-07-28 (stateless.ts), what a negotiating client lands on: no session, the agent named by
 *   the headers of every request, subscriptions/listen for resource changes.
 *
 * Either way every tool call is one of the hub's RPCs, made in-process as that agent through the
 * same interceptors as the RPC and REST faces, by the same code (calls.ts). Here: the routing
 * (a session id → its session; initialize → a new session; what the SDK classifies as 2026-07-28
 * → the stateless leg; anything else → 400), the body's size limit, and the limiter's charge of
 * each request (`charged`).
 */
export function createMcpFace(deps: McpFaceDeps) {
  const calls = createMcpCalls(deps);
  // A session that binds an agent ends its stateless bindings, and a stateless binding that
  // registers an agent ends its sessions: their key no longer works.
  const sessions = createSessions({ ...deps, bound: (agentId) => modern.forgetAgent(agentId) }, calls);
  const modern = createStateless({ ...deps, maxBindings: deps.maxSessions, registered: (agentId) => sessions.endAgentSessions(agentId) }, calls);

  /** The body, parsed, within the hub's limit; undefined when there is none. */
  function readJson(req: Req): Promise<{ body?: unknown; refused?: [number, number, string] }> {
    return new Promise((resolve) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on("data", (chunk: Buffer) => {
        size += chunk.length;
        if (size > deps.maxBodyBytes) {
          req.pause();
          resolve({ refused: [413, ProtocolErrorCode.InvalidRequest, `request body over ${deps.maxBodyBytes} bytes`] });
        } else chunks.push(chunk);
      });
      req.on("error", () => resolve({ refused: [400, ProtocolErrorCode.ParseError, "request body unreadable"] }));
      req.on("end", () => {
        if (size > deps.maxBodyBytes) return;
        if (chunks.length === 0) return resolve({});
        try {
          resolve({ body: JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks))) });
        } catch {
          resolve({ refused: [400, ProtocolErrorCode.ParseError, "request body is not JSON in UTF-8"] });
        }
      });
    });
  }

  /**
   * Charges one `/mcp` request to a budget (D40): the agent's its session or binding acts as,
   * else its address. The RPCs it makes in-process are not charged again (kCharged), so a tool
   * call costs one request as on the other faces, and a request that makes none (`tools/list`,
   * `ping`) costs one too. A JSON-RPC batch (protocol 2025-03-26) costs one per message in it, or
   * a batch of 100 tool calls would cost what one does. Answers 429 and false when the budget is
   * spent.
   */
  function charged(req: Req, res: Res, agentId: string | undefined, body: unknown): boolean {
    const key = rateKey(agentId === undefined ? undefined : { agentId }, remoteAddressOf(req));
    const now = deps.clock.now();
    let verdict = deps.limiter.take(key, now);
    for (let i = 1; i < (Array.isArray(body) ? body.length : 1); i++) verdict = deps.limiter.take(key, now);
    if (verdict?.retryAfterMs === undefined) return true;
    rpcError(res, 429, ProtocolErrorCode.InvalidRequest, "rate limited", { code: "rate_limited", retryAfterMs: verdict.retryAfterMs }, { "retry-after": String(Math.ceil(verdict.retryAfterMs / 1_000)) });
    return false;
  }

  /** Answers one request to `/mcp`. */
  async function handle(req: Req, res: Res): Promise<void> {
    const ac = new AbortController();
    res.once("close", () => ac.abort());
    if (!["POST", "GET", "DELETE"].includes(req.method ?? "")) {
      return rpcError(res, 405, ProtocolErrorCode.InvalidRequest, "MCP over Streamable HTTP takes POST, GET and DELETE", undefined, { allow: "POST, GET, DELETE" });
    }
    // MCP asks servers to check Origin: a web page that rebinds a name of its own to the hub's
    // address would reach a loopback hub without tokens. A browser's request is served only for an
    // origin the hub lists; clients that are not browsers send none.
    // The SDK reads the request as a URL built on its authority: one that makes none is the
    // caller's mistake, refused before anything is decided (as the RPC faces refuse it).
    if (invalidAuthority(req)) {
      return rpcError(res, 400, ProtocolErrorCode.InvalidRequest, "request has no valid Host or :authority", { code: "protocol_error" });
    }
    const origin = req.headers.origin;
    if (typeof origin === "string" && !originAllowed(deps.corsOrigins, origin)) {
      return rpcError(res, 403, ProtocolErrorCode.InvalidRequest, `requests from the page ${JSON.stringify(origin.slice(0, 200))} are not allowed: KXM_CORS_ORIGINS lists the origins that may call the hub`, { code: "protocol_error" });
    }
    const read = req.method === "POST" ? await readJson(req) : {};
    if (read.refused) {
      if (req.httpVersionMajor === 1) res.setHeader("connection", "close");
      return rpcError(res, ...read.refused);
    }
    const id = req.headers["mcp-session-id"];
    const s = sessions.find(req);
    if (s) {
      if (!charged(req, res, s.agentId, read.body)) return;
      return sessions.serve(s, req, res, read.body, ac.signal);
    }
    const initialize = id === undefined && req.method === "POST" && isInitializeRequest(read.body);
    // The SDK's own classifier: a request with the 2026-07-28 envelope (or claiming that version) is the stateless leg's.
    const stateless = id === undefined && !initialize && !(await isLegacyRequest(webRequestOf(req, ac.signal), read.body, { maxRequestBodySize: deps.maxBodyBytes }));
    if (!charged(req, res, stateless ? modern.heldFor(req)?.agentId : undefined, read.body)) return;
    if (id !== undefined) return rpcError(res, 404, -32001, "session not found: initialize a new one");
    if (initialize) return sessions.open(req, res, read.body, ac.signal);
    if (stateless) return modern.handle(req, res, read.body, ac);
    return rpcError(res, 400, ProtocolErrorCode.InvalidRequest, "Mcp-Session-Id header is required: start with initialize (protocol 2025-11-25 and earlier), or send protocol 2026-07-28's _meta envelope");
  }

  return {
    handle: (req: Req, res: Res) =>
      handle(req, res).catch((e: unknown) => {
        deps.observer.log("internal_error", { requestId: requestIdOfRequest(req), face: "mcp", error: e instanceof Error ? (e.stack ?? e.message) : String(e) });
        if (!res.headersSent) rpcError(res, 500, ProtocolErrorCode.InternalError, "internal error");
        else res.destroy();
      }),
    /** Closes the idle sessions and forgets the idle bindings (the sweeper's turn); how many sessions closed. */
    async expireIdle(): Promise<number> {
      modern.expireIdle();
      return sessions.expireIdle();
    },
    /** Closes every session and ends the 2026-07-28 exchanges under way (hub shutdown); leases lapse at their TTL. */
    async close() {
      await modern.close();
      await sessions.close();
    },
    /** Sessions open. */
    get size() {
      return sessions.size;
    },
  };
}

export type McpFace = ReturnType<typeof createMcpFace>;
