import { create, isMessage, type DescMessage, type DescMethod, type DescService, type Message } from "@bufbuild/protobuf";
import {
  createServiceImplSpec,
  type ConnectRouter,
  type ContextValues,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type StreamRequest,
  type StreamResponse,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { errors } from "../errors.js";
import { asHeaders, type HeaderView } from "../http/header-bag.js";
import type { WireSwitch } from "./adapter.js";

/** A unary call made in-process: the request message, its headers and context values. */
export interface InProcessCall {
  message: Message;
  /** The request headers the rules read (credentials, `x-request-id`, `content-length`). */
  header: HeaderView;
  contextValues: ContextValues;
  /** Ends with the call's client (request.ts, clientGoneSignal); default: the hub's shutdown. */
  signal?: AbortSignal;
}

/** A unary method's answer: its message, response headers (the interceptors' included) and trailers. */
export interface InProcessAnswer {
  message: Message;
  header: HeaderView;
  trailer: HeaderView;
}

/** What a unary implementation answered: its message, and the headers and trailers it set, if it set any. */
export interface ImplAnswer {
  message: Message;
  header?: Headers;
  trailer?: Headers;
}

/**
 * The interceptors' rules as plain calls, for a unary call made in-process
 * (server/unary-rules.ts): the same rules in the same order, without a layer of promises and
 * `Headers` per interceptor. `invoke` runs the implementation.
 */
export interface UnaryRules {
  /** `invoke` runs the implementation with the signal it is given (the call's, or one the rules made that also follows it). */
  run(method: DescMethod, input: InProcessCall, signal: AbortSignal, invoke: (signal: AbortSignal) => Promise<ImplAnswer>): Promise<InProcessAnswer>;
}


/** A server-streaming call made in-process: its signal ends the stream (client gone, shutdown). */
export interface InProcessStreamCall extends InProcessCall {
  signal: AbortSignal;
}

/** A server stream's answer: its messages (as the implementation yields them), headers and trailers. */
export interface InProcessStream {
  message: AsyncIterable<unknown>;
  header: Headers;
  trailer: Headers;
}

type UnarySpec = Extract<MethodImplSpec, { kind: "unary" }>;
type StreamSpec = Extract<MethodImplSpec, { kind: "server_streaming" }>;

/**
 * The context connect would give an implementation, for a unary call made in-process: its header
 * objects are made only when the implementation touches them.
 * @NOTE A class, not an object literal with getters. Each evaluation of a literal with accessors
 * gets a hidden class of its own, made in V8's old generation and holding the getters, and
 * through them the whole call, until the next full collection: every call made that way
 * outlived the young generation's collections, which then copied and promoted a few KiB per
 * call and paused for 5-14 ms instead of about 1 (decision D57).
 */
class DirectContext implements HandlerContext {
  readonly service: DescService;
  readonly requestMethod = "POST";
  /** No implementation reads it. */
  readonly url: string;
  readonly values: ContextValues;
  responseHeaderMade: Headers | undefined;
  responseTrailerMade: Headers | undefined;
  private requestHeaderMade: Headers | undefined;

  constructor(
    readonly method: DescMethod,
    path: string,
    readonly protocolName: string,
    readonly signal: AbortSignal,
    private readonly input: InProcessCall,
  ) {
    this.service = method.parent;
    this.url = `http://hub.internal${path}`;
    this.values = input.contextValues;
  }

  timeoutMs(): number | undefined {
    return undefined;
  }

  get requestHeader(): Headers {
    return (this.requestHeaderMade ??= asHeaders(this.input.header));
  }

  get responseHeader(): Headers {
    return (this.responseHeaderMade ??= new Headers());
  }

  get responseTrailer(): Headers {
    return (this.responseTrailerMade ??= new Headers());
  }
}

/**
 * Calls the hub's unary methods, and opens its server streams, in-process, through the same
 * interceptors the RPC face runs (observe, errors, limits, auth) and the same implementations,
 * with no wire format in between: the REST face (and unary.ts) hands over the message it
 * decoded and gets the answer's message back, or the ConnectError the error interceptor made;
 * stream.ts gets the stream's messages to write. That is what connect's own handler
 * would do minus its protocol work (negotiation, envelopes, encode and decode, deadline
 * signals). A unary call brings the signal of its client (a blocking acquire waits on it); a
 * stream brings its own, which also ends when its client goes away.
 *
 * `register` is the function that serves the hub's services on a router; it is called once on a
 * collector that only records each method's implementation.
 */
export function createInProcessCaller(
  register: (router: ConnectRouter) => void,
  interceptors: Interceptor[],
  signal: AbortSignal,
  /** The rules as plain calls, unless the wire switch says "connect" (then the chain itself). */
  direct?: { rules: UnaryRules; wire: WireSwitch },
) {
  const specs = new Map<string, UnarySpec>();
  const streamSpecs = new Map<string, StreamSpec>();
  const collector = {
    handlers: [],
    service(service, impl) {
      for (const spec of Object.values(createServiceImplSpec(service, impl).methods)) {
        const path = `/${service.typeName}/${spec.method.name}`;
        if (spec.kind === "unary") specs.set(path, spec);
        if (spec.kind === "server_streaming") streamSpecs.set(path, spec);
      }
      return collector;
    },
    rpc() {
      return collector; // single methods are not part of the hub's services
    },
  } as ConnectRouter;
  register(collector);

  /** What an implementation sees of its call: as connect's context, with fresh response headers and trailers. */
  const handlerContext = (method: DescMethod, req: UnaryRequest | StreamRequest, protocolName: string): HandlerContext => ({
    method,
    service: method.parent,
    requestMethod: req.requestMethod,
    url: req.url,
    protocolName,
    signal: req.signal,
    timeoutMs: () => undefined,
    requestHeader: req.header,
    responseHeader: new Headers(),
    responseTrailer: new Headers(),
    values: req.contextValues,
  });

  const normalize = (schema: DescMessage, m: unknown): Message =>
    isMessage(m, schema) ? m : create(schema, m as Parameters<typeof create>[1]);

  function chain(spec: UnarySpec, protocolName: string) {
    const method: DescMethod = spec.method;
    const invoke = async (req: UnaryRequest): Promise<UnaryResponse> => {
      const ctx = handlerContext(method, req, protocolName);
      const out = await (spec.impl as (m: Message, c: HandlerContext) => Promise<unknown>)(req.message, ctx);
      return {
        stream: false,
        service: method.parent,
        method,
        header: ctx.responseHeader,
        trailer: ctx.responseTrailer,
        message: normalize(method.output, out),
      } as UnaryResponse;
    };
    return interceptors.reduceRight((next, interceptor) => interceptor(next), invoke as Parameters<Interceptor>[0]);
  }
  /** A server-streaming method behind the interceptors: its one request message arrives as a one-element stream, as connect hands it over. */
  function streamChain(spec: StreamSpec, protocolName: string) {
    const method: DescMethod = spec.method;
    const invoke = async (req: StreamRequest): Promise<StreamResponse> => {
      const it = req.message[Symbol.asyncIterator]();
      const first = await it.next();
      if (first.done) throw errors.protocol("a server-streaming call needs exactly one request message");
      const ctx = handlerContext(method, req, protocolName);
      const out = (spec.impl as (m: Message, c: HandlerContext) => AsyncIterable<unknown>)(first.value as Message, ctx);
      return {
        stream: true,
        service: method.parent,
        method,
        header: ctx.responseHeader,
        trailer: ctx.responseTrailer,
        message: out,
      } as StreamResponse;
    };
    return interceptors.reduceRight((next, interceptor) => interceptor(next), invoke as Parameters<Interceptor>[0]);
  }
  const streamChains = new Map([...streamSpecs].map(([path, spec]) => [path, { spec, connect: streamChain(spec, "connect"), mcp: streamChain(spec, "mcp") }]));

  const chains = new Map(
    [...specs].map(([path, spec]) => [path, { spec, rest: chain(spec, "rest"), connect: chain(spec, "connect"), mcp: chain(spec, "mcp") }]),
  );

  /**
   * A unary call through `direct.rules`: the implementation sees the context connect would give
   * it, its header objects made only when it touches them.
   */
  function callDirect(spec: UnarySpec, rules: UnaryRules, input: InProcessCall, path: string, protocolName: string): Promise<InProcessAnswer> {
    const method: DescMethod = spec.method;
    return rules.run(method, input, input.signal ?? signal, async (callSignal) => {
      const ctx = new DirectContext(method, path, protocolName, callSignal, input);
      const out = await (spec.impl as (m: Message, c: HandlerContext) => Promise<unknown>)(input.message, ctx);
      return { message: normalize(method.output, out), header: ctx.responseHeaderMade, trailer: ctx.responseTrailerMade };
    });
  }

  /**
   * Calls the unary method at `path` (`/<service>/<method>`) for the face `protocolName` names
   * (the handler context's protocolName); throws what the chain throws.
   */
  async function call(path: string, input: InProcessCall, protocolName: "rest" | "connect" | "mcp" = "rest"): Promise<InProcessAnswer> {
    const target = chains.get(path);
    if (!target) throw errors.routeNotFound();
    if (direct && direct.wire.mode !== "connect") {
      if (direct.wire.directServed !== undefined) direct.wire.directServed++;
      return callDirect(target.spec, direct.rules, input, path, protocolName);
    }
    const { method } = target.spec;
    const res = await target[protocolName]({
      stream: false,
      service: method.parent,
      method,
      requestMethod: "POST",
      url: `http://hub.internal${path}`, // no implementation reads it
      signal: input.signal ?? signal,
      header: asHeaders(input.header),
      contextValues: input.contextValues,
      message: input.message,
    } as UnaryRequest);
    return { message: res.message as Message, header: res.header, trailer: res.trailer };
  }

  /**
   * Opens the server stream at `path` for the face `protocolName` names (the Connect face and the
   * REST face's event streams: "connect"; the MCP face's resource subscriptions: "mcp"); resolves
   * once the interceptors let it through (or rejects with what they throw), with the stream's
   * messages to iterate.
   */
  async function stream(path: string, input: InProcessStreamCall, protocolName: "connect" | "mcp" = "connect"): Promise<InProcessStream> {
    const target = streamChains.get(path);
    if (!target) throw errors.routeNotFound();
    const { method } = target.spec;
    const res = (await target[protocolName]({
      stream: true,
      service: method.parent,
      method,
      requestMethod: "POST",
      url: `http://hub.internal${path}`, // no implementation reads it
      signal: input.signal,
      header: asHeaders(input.header),
      contextValues: input.contextValues,
      message: (async function* () {
        yield input.message;
      })(),
    } as StreamRequest)) as StreamResponse;
    return { message: res.message, header: res.header, trailer: res.trailer };
  }

  /** True when `path` names one of the hub's unary methods. */
  const serves = (path: string) => chains.has(path);
  /** True when `path` names one of the hub's server-streaming methods. */
  const streams = (path: string) => streamChains.has(path);

  return Object.assign(call, { serves, stream, streams });
}

export type InProcessCaller = ReturnType<typeof createInProcessCaller>;
