import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { errors, isHubError, type HubError } from "../errors.js";
import type { Observer } from "../observe.js";
import { kRemoteAddress } from "./context.js";
import { remoteAddressOf } from "./listen.js";
import { createCors } from "./cors.js";
import { createRpcAdapter, type RequestTarget } from "./node-adapter.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

/** The REST face, as the dispatcher sees it (transcode/rest-face.ts). */
export interface RestFallback {
  handle(req: Req, res: Res, target: RequestTarget): Promise<void>;
  refuse(req: Req, res: Res, e: HubError): void;
}

export interface HttpHandlerDeps {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  /** Connect's hard cap on a request body. */
  readMaxBytes: number;
  /** The body limit the hub refuses above (payload_too_large). */
  maxBodyBytes: number;
  /** Aborted when the hub shuts down: every call's signal follows it, so streams end. */
  shutdownSignal: AbortSignal;
  corsOrigins: string[];
  observer: Observer;
  ops: (req: Req, res: Res, pathname: string) => Promise<boolean>;
  rest: RestFallback;
}

/**
 * Every request's path through the port: count it, CORS, then `/health` `/ready` `/metrics`,
 * then the RPC paths (Connect, gRPC, gRPC-Web), then the REST face for everything else.
 * Nothing a request carries can throw out of here: a target that is not an origin-form path is
 * protocol_error, and anything unexpected is logged and answered 500 internal_error while the
 * process goes on (the last line of defence; nothing is meant to reach it).
 */
export function createHttpHandler(deps: HttpHandlerDeps) {
  const cors = createCors(deps.corsOrigins);

  /** Answers a failure nobody else handled: the typed refusal, or 500 for anything else. */
  const lastLine = (req: Req, res: Res, e: unknown) => {
    if (isHubError(e)) return answer(req, res, e);
    deps.observer.log("internal_error", {
      requestId: req.headers["x-request-id"],
      method: req.method,
      error: e instanceof Error ? (e.stack ?? e.message) : String(e),
    });
    answer(req, res, errors.internal(e));
  };

  /** Writes a refusal the REST way, unless an answer is already on its way. */
  const answer = (req: Req, res: Res, e: HubError) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    try {
      deps.rest.refuse(req, res, e);
    } catch {
      res.destroy();
    }
  };

  const fallback = (req: Req, res: Res, target: RequestTarget | undefined) => {
    if (!target) {
      // CONNECT names an authority, not a path: the hub routes no such thing.
      if (req.method === "CONNECT") return answer(req, res, errors.routeNotFound());
      return answer(req, res, errors.protocol("request target must be an origin-form path", "path"));
    }
    deps
      .ops(req, res, target.pathname)
      .then((answered) => (answered ? undefined : deps.rest.handle(req, res, target)))
      .catch((e: unknown) => lastLine(req, res, e));
  };

  const rpc = createRpcAdapter({
    routes: deps.routes,
    interceptors: deps.interceptors,
    readMaxBytes: deps.readMaxBytes,
    maxBodyBytes: deps.maxBodyBytes,
    shutdownSignal: deps.shutdownSignal,
    contextValues: (req) => createContextValues().set(kRemoteAddress, remoteAddressOf(req)),
    fallback,
    badAuthority: (req, res) => answer(req, res, errors.protocol("request has no valid Host or :authority", "host")),
    onFailure: (req, res, method, error) => {
      if (!res.headersSent) return lastLine(req, res, error);
      deps.observer.log("response_failed", { method, error: String(error) });
      res.destroy();
    },
  });

  return (req: Req, res: Res) => {
    try {
      deps.observer.count("requests");
      res.setHeader("referrer-policy", "no-referrer");
      // @NOTE spec §5.8: once shutdown begins no new call is taken, on any connection.
      if (deps.shutdownSignal.aborted) return answer(req, res, errors.hubShuttingDown());
      if (cors(req, res)) return;
      rpc.handle(req, res);
    } catch (e) {
      lastLine(req, res, e);
    }
  };
}
