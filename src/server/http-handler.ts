import { createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { codeFromHttpStatus, codeToString } from "@connectrpc/connect/protocol-connect";
import type { StallWatch } from "../http/body.js";
import { errors, isHubError, type HubError } from "../errors.js";
import type { FaceObserver } from "../observe.js";
import { finishCall, kCall, startCall, type CallRecord } from "../http/call-record.js";
import { kRemoteAddress } from "../http/context.js";
import { toConnectError } from "./interceptors/errors.js";
import { requestRefusal } from "./interceptors/request-refusals.js";
import { requestIdOfRequest } from "../http/request-id.js";
import { expectationUnmet, remoteAddressOf } from "../http/listen.js";
import { createCors, createHostGuard, createPageGuard } from "../http/cors.js";
import type { InProcessCaller } from "../wire/in-process.js";
import { createRpcAdapter, type WireSwitch } from "../wire/adapter.js";
import type { RequestTarget } from "../http/target.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

/** The REST face, as the dispatcher sees it (transcode/rest-face.ts). */
export interface RestFallback {
  /** Answers a request no RPC path took, and reports it as `call` (made here if absent). */
  handle(req: Req, res: Res, target: RequestTarget, at?: { requestId: string; call: CallRecord }): Promise<void>;
  /** Writes a refusal the REST way and reports it as `call` (an `http` call if absent). */
  refuse(req: Req, res: Res, e: HubError, call?: CallRecord): void;
}

export interface HttpHandlerDeps {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  /** The same implementations behind the same interceptors, in-process (wire/in-process.ts). */
  inProcess: InProcessCaller;
  /** Which path serves plain Connect calls (config `wire`). */
  wire: WireSwitch;
  /** Connect's hard cap on a request body. */
  readMaxBytes: number;
  /** The body limit the hub refuses above (payload_too_large). */
  maxBodyBytes: number;
  /** Aborted when the hub shuts down: every call's signal follows it, so streams end. */
  shutdownSignal: AbortSignal;
  corsOrigins: string[];
  observer: FaceObserver;
  ops: (req: Req, res: Res, pathname: string) => Promise<boolean>;
  /** The operator page (`/` and its assets), when it is built. */
  page?: (req: Req, res: Res, pathname: string) => boolean;
  /** The MCP face at `/mcp` (src/mcp). */
  mcp?: (req: Req, res: Res) => Promise<void>;
  /** The hub listens on loopback without an admin token (D46): requests must name a loopback host (D67). */
  openLoopback?: boolean;
  rest: RestFallback;
  /** Watches the server streams for clients that read nothing. */
  stalls?: StallWatch;
}

/**
 * Every request's path through the port: count it, CORS, then `/health` `/ready` `/metrics`,
 * then the RPC paths (Connect, gRPC, gRPC-Web), then the MCP face (`/mcp`), then the operator
 * page (`/`, `/assets/...`), then the REST face for everything else.
 * Nothing a request carries can throw out of here: a target that is not an origin-form path is
 * protocol_error, and anything unexpected is logged and answered 500 internal_error while the
 * process goes on (the last line of defence; nothing is meant to reach it).
 */
export function createHttpHandler(deps: HttpHandlerDeps) {
  const cors = createCors(deps.corsOrigins);
  const pageGuard = createPageGuard(deps.corsOrigins);
  const hostGuard = createHostGuard(deps.openLoopback ?? false);

  /** Answers a failure nobody else handled: the typed refusal, or 500 for anything else. */
  const lastLine = (req: Req, res: Res, e: unknown, call?: CallRecord) => {
    if (isHubError(e)) return answer(req, res, e, call);
    // One id for the log line and the answer: the call's, else the request's (validated).
    const record = call ?? startCall("http");
    record.requestId ??= requestIdOfRequest(req);
    deps.observer.log("internal_error", {
      requestId: record.requestId,
      method: req.method,
      error: e instanceof Error ? (e.stack ?? e.message) : String(e),
    });
    answer(req, res, errors.internal(e), record);
  };

  /** Writes a refusal the REST way, unless an answer is already on its way. */
  const answer = (req: Req, res: Res, e: HubError, call?: CallRecord) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    try {
      deps.rest.refuse(req, res, e, call);
    } catch {
      res.destroy();
    }
  };

  /**
   * A request no RPC path took. Its request id is fixed here, so `/health`, `/ready` and
   * `/metrics` echo it as the REST face does. Ops answers are not calls (kxm_requests_total
   * counts them); their refusals are, as `http` calls.
   */
  const fallback = (req: Req, res: Res, target: RequestTarget | undefined) => {
    // What the log line names: the path, never a query (a client may put a secret there), at
    // most 200 characters of it, as the REST face reports its paths.
    const call = startCall("http", { path: (target?.pathname ?? (req.url ?? "").split("?")[0]!).slice(0, 200) });
    if (!target) {
      // CONNECT names an authority, not a path: the hub routes no such thing.
      if (req.method === "CONNECT") return answer(req, res, errors.routeNotFound(), call);
      return answer(req, res, errors.protocol("request target must be an origin-form path", "path"), call);
    }
    const requestId = requestIdOfRequest(req);
    res.setHeader("x-request-id", requestId);
    call.requestId = requestId;
    // MCP exchanges are not calls themselves: each tool call is, reported by the MCP face.
    if (target.pathname === "/mcp" && deps.mcp) return void deps.mcp(req, res);
    // A page of another origin may reach these paths without a preflight (a POST with no body).
    // The RPC paths need a content type only a preflight lets a page send; /mcp checks its own.
    const fromPage = pageGuard(req);
    if (fromPage) return answer(req, res, fromPage, call);
    deps
      .ops(req, res, target.pathname)
      .then((answered) =>
        answered || deps.page?.(req, res, target.pathname) ? undefined : deps.rest.handle(req, res, target, { requestId, call }),
      )
      .catch((e: unknown) => lastLine(req, res, e, call));
  };

  /**
   * An RPC call is over: reports it with the outcome the interceptors (or connect) noted. A call
   * whose response closed before it was whole, or before any outcome while its answer was under
   * way (status 200: a stream the client reset), was cancelled by the client.
   */
  const settled = (res: Res, call: CallRecord | undefined, finished: boolean) => {
    if (!call) return;
    try {
      if (call.code === undefined) {
        // Else refused by connect before any interceptor, with no error body (e.g. 415, 405).
        const status = res.statusCode;
        call.code = status === 200 ? "canceled" : status === 415 ? "invalid_argument" : codeToString(codeFromHttpStatus(status));
      } else if (call.code === "ok" && !finished) {
        call.code = "canceled";
      }
      finishCall(deps.observer, call);
    } catch (e) {
      deps.observer.log("internal_error", { requestId: call.requestId, error: String(e) });
    }
  };

  const rpc = createRpcAdapter({
    routes: deps.routes,
    interceptors: deps.interceptors,
    inProcess: deps.inProcess,
    wire: deps.wire,
    readMaxBytes: deps.readMaxBytes,
    typeRefusal: (e, header) => {
      const typed = requestRefusal(e, header, deps.maxBodyBytes);
      return typed && toConnectError(typed);
    },
    shutdownSignal: deps.shutdownSignal,
    contextValues: (req, handler) =>
      createContextValues()
        .set(kRemoteAddress, remoteAddressOf(req))
        .set(kCall, startCall("rpc", { service: handler.service.typeName, method: handler.method.name, route: handler.requestPath })),
    fallback,
    badAuthority: (req, res, values) =>
      answer(req, res, errors.protocol("request has no valid Host or :authority", "host"), values.get(kCall)),
    onFailure: (req, res, method, error, values) => {
      if (!res.headersSent) return lastLine(req, res, error, values.get(kCall));
      deps.observer.log("response_failed", { method, error: String(error) });
      res.destroy();
    },
    settled: (_req, res, values, finished) => settled(res, values.get(kCall), finished),
    ...(deps.stalls && { stalls: deps.stalls }),
  });

  return (req: Req, res: Res) => {
    try {
      deps.observer.count("requests");
      res.setHeader("referrer-policy", "no-referrer");
      // @NOTE decision D48: once shutdown begins no new call is taken, on any connection.
      if (deps.shutdownSignal.aborted) return answer(req, res, errors.hubShuttingDown());
      // RFC 9112 §3.2: an HTTP/1.1 request without Host is refused (HTTP/1.0 may leave it out).
      if (req.httpVersion === "1.1" && req.headers.host === undefined) return answer(req, res, errors.protocol("an HTTP/1.1 request must carry a Host header", "host"));
      // RFC 9110 §10.1.1: the hub meets no expectation but 100-continue (D69).
      if (expectationUnmet(req)) return answer(req, res, errors.protocol("the hub meets no expectation but 100-continue", "expect"));
      // CONNECT's authority names a tunnel's end, not the hub; it is refused as no route below.
      const misaddressed = req.method === "CONNECT" ? undefined : hostGuard(req);
      if (misaddressed) return answer(req, res, misaddressed);
      if (cors(req, res)) return;
      rpc.handle(req, res);
    } catch (e) {
      lastLine(req, res, e);
    }
  };
}
