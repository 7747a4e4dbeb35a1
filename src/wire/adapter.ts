import { Code, ConnectError, createConnectRouter, type ConnectRouter, type ContextValues, type Interceptor, type MethodImpl } from "@connectrpc/connect";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { DescMethod, JsonReadOptions, JsonWriteOptions } from "@bufbuild/protobuf";
import { withTypedFrameworkErrors, type TypeFrameworkRefusal } from "./framework-errors.js";
import { jsonOptionsOf } from "./serialization.js";
import { createConnectUnary } from "./unary.js";
import { createConnectStream } from "./stream.js";
import type { ReplayBody, StallWatch } from "../http/body.js";
import { parseRequestTarget, validAuthority, type RequestTarget } from "../http/target.js";
import type { InProcessCaller } from "./in-process.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

/**
 * # The wire layer (src/wire)
 *
 * The RPC face on Node's request events. connect serves every protocol (Connect, gRPC,
 * gRPC-Web); for the two calls that carry most traffic — a plain Connect unary call and a plain
 * Connect server stream, uncompressed and without a deadline — this layer serves the call
 * in-process instead (unary.ts, stream.ts, in-process.ts), skipping connect's generic pipeline.
 *
 * The contract: for what it serves, the answer is the same HTTP message connect's own handler
 * gives — status, headers (but `date` and message framing), body bytes and trailers; everything
 * else (other protocols, compression, deadlines, a body that will not decode as one message) is
 * handed to connect, with the bytes already read. It is held so by
 * test/fuzz/differential.fuzz.test.ts, which sends every generated request both ways, and by the
 * test command's second pass of the protocol suites with every call through connect
 * (KXM_TEST_WIRE=connect, config `wire`). It uses connect's `protocol*` internals, which do not
 * follow semantic versioning: `heldToConnect` names the versions it was last checked against,
 * and test/wire/connect-version.test.ts fails when the installed ones differ.
 */

/** The @connectrpc versions the differential suite last passed against (see above). */
export const heldToConnect = { "@connectrpc/connect": "2.3.0", "@connectrpc/connect-node": "2.3.0" } as const;

/** The compressions the router reads and writes. */
const acceptCompression = [compressionGzip, compressionBrotli];
/** The request encodings the hub reads: the compressions above, and none. */
export const readableEncodings: ReadonlySet<string> = new Set(["identity", ...acceptCompression.map((c) => c.name)]);

/** The longest deadline a Node timer can hold (2^31 - 1 ms, about 24.8 days). */
export const maxDeadlineMs = 2 ** 31 - 1;
const grpcTimeoutUnitMs: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 0.001, n: 0.000001 };

/**
 * @NOTE decision D47: a client deadline longer than a timer can hold is clamped to the longest
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

/** What connect's router answers for a method a service leaves out. */
const unimplemented = (method: DescMethod) => () => {
  throw new ConnectError(`${method.parent.typeName}.${method.name} is not implemented`, Code.Unimplemented);
};

/**
 * Which path serves the calls the fast path could take: "fast" (the default) or "connect" (every
 * call through connect's own handlers, and every in-process unary call through the interceptor
 * chain instead of the same rules as plain calls). Read on each request, so a test can send one request
 * both ways (test/fuzz/differential.fuzz.test.ts); configured with KXM_WIRE.
 */
export interface WireSwitch {
  mode: "fast" | "connect";
  /** Calls the fast path has served: evidence, for a test, that the switch chooses the path. */
  fastServed: number;
  /** In-process unary calls served by the rules as plain calls (in-process.ts), the same evidence. */
  directServed?: number;
}

export interface RpcAdapterOptions {
  routes: (router: ConnectRouter) => void;
  wire: WireSwitch;
  interceptors: Interceptor[];
  /** The same implementations behind the same interceptors, for plain Connect unary calls. */
  inProcess: InProcessCaller;
  readMaxBytes: number;
  /** How a refusal connect raised before the interceptors is answered (framework-errors.ts). */
  typeRefusal: TypeFrameworkRefusal;
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
  /** Watches the server streams for clients that read nothing (http/body.ts createStallWatch). */
  stalls?: StallWatch;
}

/**
 * `uRes` with its body ended when `res` closes before its answer was whole. connect-node's writer
 * waits for "drain" or "error", and an HTTP/2 response its client reset emits only "close": a
 * server stream blocked on a full window would stay open for good (its subscriptions, its call
 * record, a listener of the PostgreSQL tail). Ending the body runs the stream's own ending.
 */
function endedOnClose(uRes: UniversalServerResponse, res: Res): UniversalServerResponse {
  const body = uRes.body;
  if (body === undefined || body instanceof Uint8Array) return uRes;
  const it = body[Symbol.asyncIterator]();
  res.once("close", () => {
    // Not `finish`: an HTTP/2 response emits it at a reset too. Ended means the answer was whole.
    if (!res.writableEnded) void it.return?.(undefined).catch(() => undefined);
  });
  return { ...uRes, body: { [Symbol.asyncIterator]: () => it } };
}

/**
 * The RPC face on Node's request events: connect's router for Connect, gRPC and gRPC-Web, with
 * connect's own decoding refusals typed (framework-errors.ts) and client deadlines clamped.
 * Like connect-node's adapter, but it reads the request target itself, so a malformed one is
 * the fallback's to answer instead of an exception.
 */
export function createRpcAdapter(o: RpcAdapterOptions) {
  const router = createConnectRouter({
    interceptors: o.interceptors,
    readMaxBytes: o.readMaxBytes,
    shutdownSignal: o.shutdownSignal,
    acceptCompression,
    jsonOptions: strictJson,
  });
  // Each method of a service that reads a closed message is registered on its own, with its JSON
  // options (serialization.ts jsonOptionsOf); connect's router takes options per service only.
  const service = router.service.bind(router);
  router.service = (desc, implementation, options) => {
    if (!desc.methods.some((m) => jsonOptionsOf(m, strictJson) !== strictJson)) return service(desc, implementation, options);
    for (const method of desc.methods) {
      const impl = (implementation as Record<string, MethodImpl<DescMethod> | undefined>)[method.localName] ?? unimplemented(method);
      router.rpc(method, impl as never, { ...options, jsonOptions: jsonOptionsOf(method, options?.jsonOptions ?? strictJson) });
    }
    return router;
  };
  o.routes(router);
  const byPath = new Map(router.handlers.map((h) => [h.requestPath, withTypedFrameworkErrors(h, o.typeRefusal)]));
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
      // connect-node's writer waits for an "end" a Node response never emits: the response's
      // "close" tells when the call is over, and whether it was ended first (not "finish": an
      // HTTP/2 response emits that at a reset by its client too) whether the client stayed for it.
      if (handler.method.methodKind === "server_streaming") o.stalls?.watch(res);
      res.once("close", () => o.settled?.(req, res, values, res.writableEnded));
      /** The call as connect serves it; `body` when some of it was read already. */
      const viaConnect = (body?: ReplayBody) => {
        const uReq = universalRequestFromNodeRequest(req, res, undefined, values);
        if (body) uReq.body = body;
        clampDeadline(uReq.header);
        return handler(uReq).then((uRes) => universalResponseToNodeResponse(endedOnClose(uRes, res), res));
      };
      // Plain Connect unary calls and server streams are served in-process; the rest by connect.
      const fast =
        o.wire.mode === "connect"
          ? undefined
          : unary.accepts(req, target.pathname)
            ? unary
            : stream.accepts(req, target.pathname)
              ? stream
              : undefined;
      if (fast) o.wire.fastServed++;
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
