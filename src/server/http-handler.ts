import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { isHubError, type HubError } from "../errors.js";
import type { Observer } from "../observe.js";
import { kRemoteAddress } from "./context.js";
import { remoteAddressOf } from "./listen.js";
import { createCors } from "./cors.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

/** The REST face, as the dispatcher sees it (transcode/rest-face.ts). */
export interface RestFallback {
  handle(req: Req, res: Res): Promise<void>;
  refuse(req: Req, res: Res, e: HubError): void;
}

export interface HttpHandlerDeps {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  /** Connect's hard cap on a request body. */
  readMaxBytes: number;
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
 */
export function createHttpHandler(deps: HttpHandlerDeps) {
  const cors = createCors(deps.corsOrigins);
  const fallback = (req: Req, res: Res) => {
    const pathname = new URL(req.url ?? "/", "http://hub.internal").pathname;
    deps
      .ops(req, res, pathname)
      .then((answered) => (answered ? undefined : deps.rest.handle(req, res)))
      .catch((e) => {
        if (isHubError(e)) return deps.rest.refuse(req, res, e);
        deps.observer.log("internal_error", { error: String(e) });
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
  };
  const rpc = connectNodeAdapter({
    routes: deps.routes,
    interceptors: deps.interceptors,
    readMaxBytes: deps.readMaxBytes,
    shutdownSignal: deps.shutdownSignal,
    contextValues: (req) => createContextValues().set(kRemoteAddress, remoteAddressOf(req)),
    fallback: fallback as unknown as NonNullable<Parameters<typeof connectNodeAdapter>[0]["fallback"]>,
  });
  return (req: Req, res: Res) => {
    deps.observer.count("requests");
    res.setHeader("referrer-policy", "no-referrer");
    if (cors(req, res)) return;
    rpc(req, res);
  };
}
