import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { Code, ConnectError, createConnectRouter, type ConnectRouter, type ContextValues, type Interceptor } from "@connectrpc/connect";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { JsonReadOptions, JsonWriteOptions } from "@bufbuild/protobuf";
import { withTypedFrameworkErrors } from "./framework-errors.js";
import { createConnectUnary } from "./connect-unary.js";
import { createConnectStream } from "./connect-stream.js";
import type { ReplayBody } from "./connect-request.js";
import type { InProcessCaller } from "./in-process.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

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

/** The request's authority (`:authority` or `Host`) when it makes a valid URL, else undefined. */
function validAuthority(req: Req): string | undefined {
  const authority = "authority" in req && req.authority ? req.authority : req.headers.host;
  if (typeof authority !== "string" || authority === "") return undefined;
  try {
    return new URL(`http://${authority}`).host === "" ? undefined : authority;
  } catch {
    return undefined;
  }
}

/** The longest deadline a Node timer can hold (2^31 - 1 ms, about 24.8 days). */
export const maxDeadlineMs = 2 ** 31 - 1;
const grpcTimeoutUnitMs: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 0.001, n: 0.000001 };

/**
 * @NOTE spec §5.7: a client deadline longer than a timer can hold is clamped to the longest
 * one, never treated as already passed (Node fires an overflowing timer at once).
 */
export function clampDeadline(header: Headers): void {
  const connect = header.get("connect-timeout-ms");
  if (connect !== null && /^\d{1,10}$/.test(connect) && Number(connect) > maxDeadlineMs) {
    header.set("connect-timeout-ms", String(maxDeadlineMs));
  }
  const grpc = header.get("grpc-timeout");
  const m = grpc === null ? null : /^(\d{1,8})([HMSmun])$/.exec(grpc);
  if (m && Number(m[1]) * grpcTimeoutUnitMs[m[2]!]! > maxDeadlineMs) {
    header.set("grpc-timeout", `${Math.floor(maxDeadlineMs / 1_000)}S`); // grpc-timeout holds 8 digits at most
  }
}

/**
 * Connect JSON that is not UTF-8 is refused (invalid_argument), never decoded with U+FFFD. The
 * router's option type omits the text codec that its JSON serialization reads
 * (`JsonSerializationOptions.textDecoder`); test/server/hostile.test.ts holds the behaviour.
 */
export const strictJson: Partial<JsonReadOptions & JsonWriteOptions> & { textDecoder: TextDecoder } = {
  textDecoder: new TextDecoder("utf-8", { fatal: true }),
};

export interface RpcAdapterOptions {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  /** The same implementations behind the same interceptors, for plain Connect unary calls. */
  inProcess: InProcessCaller;
  readMaxBytes: number;
  /** The limit a too-large request is refused with (payload_too_large). */
  maxBodyBytes: number;
  shutdownSignal: AbortSignal;
  /** The context values of a call of `handler` (its call record among them). */
  contextValues: (req: Req, handler: UniversalHandler) => ContextValues;
  /** Answers requests that are no RPC: `target` is their parsed origin-form target, if any. */
  fallback: (req: Req, res: Res, target: RequestTarget | undefined) => void;
  /** A request with an RPC path but no usable authority. */
  badAuthority: (req: Req, res: Res, values: ContextValues) => void;
  /** A call that failed outside connect's own error handling (a bug, or the client went away). */
  onFailure: (req: Req, res: Res, method: string, error: unknown, values: ContextValues) => void;
  /** A call is over: its response closed, `finished` when the whole answer was written first. */
  settled?: (req: Req, res: Res, values: ContextValues, finished: boolean) => void;
}

/**
 * The RPC face on Node's request events: connect's router for Connect, gRPC and gRPC-Web, with
 * connect's own decoding refusals typed (framework-errors.ts) and client deadlines clamped.
 * Like connect-node's adapter, but it reads the request target itself, so a malformed one is
 * the fallback's to answer instead of an exception.
 */
export function createRpcAdapter(o: RpcAdapterOptions) {
  const acceptCompression = [compressionGzip, compressionBrotli];
  const router = createConnectRouter({
    interceptors: o.interceptors,
    readMaxBytes: o.readMaxBytes,
    shutdownSignal: o.shutdownSignal,
    acceptCompression,
    jsonOptions: strictJson,
  });
  o.routes(router);
  const byPath = new Map(router.handlers.map((h) => [h.requestPath, withTypedFrameworkErrors(h, o.maxBodyBytes)]));
  const unary = createConnectUnary({ call: o.inProcess, readMaxBytes: o.readMaxBytes, acceptCompression, jsonOptions: strictJson });
  const stream = createConnectStream({
    call: o.inProcess,
    readMaxBytes: o.readMaxBytes,
    shutdownSignal: o.shutdownSignal,
    acceptCompression,
    jsonOptions: strictJson,
  });

  return {
    router,
    handle(req: Req, res: Res): void {
      const target = parseRequestTarget(req.url);
      const handler = target && byPath.get(target.pathname);
      if (!handler) return o.fallback(req, res, target);
      const values = o.contextValues(req, handler);
      if (validAuthority(req) === undefined) return o.badAuthority(req, res, values);
      // connect-node's writer waits for an "end" a Node response never emits: the response's own
      // "finish" and "close" tell when the call is over, and whether the client stayed for it.
      let finished = false;
      res.once("finish", () => (finished = true));
      res.once("close", () => o.settled?.(req, res, values, finished));
      /** The call as connect serves it; `body` when some of it was read already. */
      const viaConnect = (body?: ReplayBody) => {
        const uReq = universalRequestFromNodeRequest(req, res, undefined, values);
        if (body) uReq.body = body;
        clampDeadline(uReq.header);
        return handler(uReq).then((uRes) => universalResponseToNodeResponse(uRes, res));
      };
      // Plain Connect unary calls and server streams are served in-process; the rest by connect.
      const fast = unary.accepts(req, target.pathname) ? unary : stream.accepts(req, target.pathname) ? stream : undefined;
      const answered = fast
        ? fast.serve(req, res, handler.method, target.pathname, values).then((body) => body && viaConnect(body))
        : viaConnect();
      answered.catch((reason: unknown) => {
        // The client went away mid-answer: nothing to tell it, nothing to log.
        if (ConnectError.from(reason).code === Code.Aborted) return;
        o.onFailure(req, res, `${handler.service.typeName}/${handler.method.name}`, reason, values);
      });
    },
  };
}
