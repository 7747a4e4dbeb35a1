import { STATUS_CODES, type ServerResponse } from "node:http";
import { create, isMessage, type DescMessage, type JsonObject, type Message } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import type { Clock } from "../clock.js";
import { errors, errorTable, isHubError, type HubError } from "../errors.js";
import type { Authorize } from "../server/interceptors/auth.js";
import type { FaceObserver } from "../observe.js";
import { rateKey, type RateLimiter } from "../auth/rate-limit.js";
import { finishCall, kCall, noteOutcome, startCall, type CallRecord } from "../http/call-record.js";
import { clientGoneSignal, drained, requestGone, type StallWatch } from "../http/body.js";
import { kRemoteAddress } from "../http/context.js";
import type { InProcessCaller } from "../wire/in-process.js";
import { remoteAddressOf } from "../http/listen.js";
import type { RequestTarget } from "../http/target.js";
import { requestIdOf, requestIdOfRequest } from "../http/request-id.js";
import { charge } from "../http/rate-headers.js";
import { HeaderBag, noHeaders, type HeaderView } from "../http/header-bag.js";
import { decodeRestRequest, matchRestRoute, RestPathError, type RestRoute } from "./http-rules.js";
import { restErrorFromConnect, restErrorFromHub, type RestError } from "./rest-errors.js";
import { assertWellFormedJson, RestFieldError, toRestJson } from "./rest-json.js";
import { restBodyChecks } from "./rest-quirks.js";
import { restSuccessStatus } from "./rest-status.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

export interface RestFaceDeps {
  routes: RestRoute[];
  /** Calls the RPC face's unary methods in-process, interceptors included. */
  call: InProcessCaller;
  limiter: RateLimiter;
  clock: Clock;
  observer: FaceObserver;
  maxBodyBytes: number;
  /** Aborted when the hub shuts down: every event stream ends. */
  shutdownSignal: AbortSignal;
  /**
   * The calls' auth rule (server/interceptors/auth.ts): a request whose body or query the face
   * refuses is authenticated first, so that its caller's refusal wins (spec §3.2; D19).
   */
  authorize: Authorize;
  /** Watches the event streams for clients that read nothing (http/body.ts createStallWatch). */
  stalls?: StallWatch;
}

/** Refuses bytes that are not UTF-8 instead of replacing them (a name must not change). */
const utf8 = new TextDecoder("utf-8", { fatal: true });
/** A JSON escape of a UTF-16 surrogate (`\ud83d`), paired or not. */
const surrogateEscape = /\\u[dD][89a-fA-F]/;

/** The query of a request without one. Read only (decodeRestRequest). */
const noQuery = new URLSearchParams();

/**
 * A request's query, each escape decoded as UTF-8: one that does not decode is protocol_error,
 * as in a path (D41), where URLSearchParams alone would put U+FFFD in its place and answer for
 * a name the caller never sent.
 */
function queryOf(search: string): URLSearchParams {
  if (search === "" || search === "?") return noQuery;
  for (const part of search.slice(1).split("&")) {
    try {
      decodeURIComponent(part.replaceAll("+", " "));
    } catch {
      throw errors.protocol("malformed percent-escape in query");
    }
  }
  return new URLSearchParams(search);
}

/** A request that closed before its body ended: nobody is left to answer. */
class ClientGone extends Error {
  constructor() {
    super("the request closed before its body ended");
  }
}

/** Headers the REST face forwards to the RPC handler. */
const forwarded = ["authorization", "x-kxm-agent-id", "x-kxm-agent-key"];
/** Headers of the RPC response the REST face passes back. */
const passedBack = ["x-ratelimit-limit", "x-ratelimit-remaining", "retry-after"];

/**
 * The REST face: a generic transcoder over the `google.api.http` rules. It decodes the path,
 * query and JSON body into the method's request message, calls the same implementation through
 * the same interceptors the RPC face uses (so auth, validation, rate limits and error mapping
 * run once; wire/in-process.ts, no wire format in between), and writes the
 * reference hub's JSON: every field, numbers as numbers, its statuses and its error bodies.
 */
export function createRestFace({ routes, call: callMethod, limiter, clock, observer, maxBodyBytes, shutdownSignal, authorize, stalls }: RestFaceDeps) {
  function send(res: Res, status: number, requestId: string, body: JsonObject | undefined, headers: HeaderView, own?: Record<string, string>) {
    const out: Record<string, string> = { "x-request-id": requestId, "referrer-policy": "no-referrer", "cache-control": "no-store" };
    for (const name of passedBack) {
      const v = own?.[name] ?? headers.get(name);
      if (v !== null) out[name] = v;
    }
    if (body === undefined) {
      res.writeHead(status, out);
      res.end();
      return;
    }
    const text = JSON.stringify(body);
    out["content-type"] = "application/json; charset=utf-8";
    out["content-length"] = String(Buffer.byteLength(text));
    out["x-content-type-options"] = "nosniff";
    res.writeHead(status, out);
    res.end(text);
  }

  /** Writes a refusal: its own headers over those of the call (`headers`). */
  function refuse(res: Res, err: RestError, requestId: string, headers: HeaderView = noHeaders) {
    send(res, err.status, requestId, err.body, headers, err.headers);
  }

  /** Reports the call once its answer is written. */
  function finish(call: CallRecord, requestId: string, statusCode: number) {
    finishCall(observer, call, { requestId, statusCode });
  }

  /** A refusal of the REST face itself, reported as the call's outcome (which counts it). */
  function refuseLocally(res: Res, e: HubError, requestId: string, call: CallRecord, headers: HeaderView = noHeaders) {
    const err = restErrorFromHub(e, requestId);
    refuse(res, err, requestId, headers);
    noteOutcome(call, e);
    finish(call, requestId, err.status);
  }

  /**
   * A refusal of the REST face before the call's rules ran (no route, a body or a path it cannot
   * take), charged to the request's address as every request is: else malformed requests, 413s
   * among them, would never be rate limited. Past the budget it is rate_limited instead.
   */
  function refuseCharged(req: Req, res: Res, e: HubError, requestId: string, call: CallRecord) {
    const headers = new HeaderBag();
    let refusal = e;
    try {
      charge(limiter, rateKey(undefined, remoteAddressOf(req)), clock.now(), headers);
    } catch (limited) {
      refusal = limited as HubError;
    }
    refuseLocally(res, refusal, requestId, call, headers);
  }

  /**
   * Refuses a request whose body, query or fields the face cannot take, once its caller is
   * authenticated (and charged) by the call's own rule: a caller the rule refuses gets that
   * refusal instead, and learns nothing of its request's validity (spec §3.2: the agent and
   * project token are checked before the body; D19). The rule reads the fields it names from what
   * the request has that is text: the path's variables, the query, the body's top level.
   */
  async function refuseAfterAuth(req: Req, res: Res, match: { route: RestRoute; params: Record<string, string> }, target: RequestTarget, body: JsonObject | undefined, refusal: HubError, requestId: string, call: CallRecord) {
    // The rest of an oversized body is never read: end the HTTP/1.1 connection after the
    // answer, or the unread bytes would wedge the next request sent on it.
    if (refusal.code === "payload_too_large" && req.httpVersionMajor === 1) res.setHeader("connection", "close");
    const { route, params } = match;
    const fields: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(body ?? {})) if (typeof v === "string") fields[k] = v;
    try {
      for (const [k, v] of new URLSearchParams(target.search)) fields[k] ??= v;
    } catch {
      // a query that does not decode names no field
    }
    for (const [name, value] of Object.entries(params)) fields[route.method.input.fields.find((f) => f.name === name)?.localName ?? name] = value;
    const headers = new HeaderBag();
    try {
      await authorize({
        methodKey: route.key,
        header: forwardedHeaders(req, requestId),
        remote: remoteAddressOf(req),
        message: fields,
        extraHeaders: headers,
      });
    } catch (e) {
      // The caller's refusal (or its budget's) wins; a field the rule could not read leaves the
      // request's own refusal to answer.
      if (isHubError(e) && (errorTable[e.code].connect === "unauthenticated" || e.code === "rate_limited" || e.code === "admin_auth_not_configured")) {
        return refuseLocally(res, e, requestId, call, headers);
      }
    }
    refuseLocally(res, refusal, requestId, call, headers);
  }

  /**
   * The body's chunks, or payload_too_large as soon as they pass the limit (the rest is left
   * unread). Plain stream events: an async iterator per request was a visible cost.
   */
  function readChunks(req: Req): Promise<Buffer[]> {
    // Gone before its body is read (an HTTP/2 stream reset while the call was routed): its
    // events have been emitted already, and none would come.
    if (requestGone(req)) return Promise.reject(new ClientGone());
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const done = (error?: unknown) => {
        req.off("data", onData).off("end", onEnd).off("error", onClose).off("close", onClose);
        if (error === undefined) resolve(chunks);
        else reject(error);
      };
      const onData = (chunk: Buffer) => {
        size += chunk.length;
        if (size <= maxBodyBytes) {
          if (chunk.length > 0) chunks.push(chunk);
          return;
        }
        req.pause();
        done(errors.payloadTooLarge(maxBodyBytes));
      };
      const onEnd = () => done();
      // A request that closes (or fails: a reset) before its end is over: nobody is left to answer.
      const onClose = () => done(new ClientGone());
      req.on("data", onData).on("end", onEnd).on("error", onClose).on("close", onClose);
    });
  }

  /** Reads a JSON object body: 415, 413 and 400 as the reference; empty means `{}`. */
  async function readBody(req: Req): Promise<JsonObject> {
    const chunks = await readChunks(req);
    if (chunks.length === 0) return {};
    // @NOTE decision D41: only a body that is there needs the JSON content type.
    const type = req.headers["content-type"];
    // The usual header as it comes, without parsing; any other spelling parsed.
    if (type !== "application/json" && String(type ?? "").split(";")[0]!.trim().toLowerCase() !== "application/json") throw errors.unsupportedMediaType();
    let parsed: unknown;
    let text: string;
    try {
      text = utf8.decode(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
      parsed = JSON.parse(text);
    } catch {
      throw errors.invalidJson("request body must be a JSON object in UTF-8");
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw errors.invalidJson();
    // UTF-8 that decoded holds no surrogate: only a `\uD800`-`\uDFFF` escape can make one, so a
    // body without such an escape needs no walk.
    if (!surrogateEscape.test(text)) return parsed as JsonObject;
    try {
      assertWellFormedJson(parsed);
    } catch (e) {
      if (e instanceof RestFieldError) throw errors.protocol(e.message, e.field);
      throw e;
    }
    return parsed as JsonObject;
  }

  /** The request headers the RPC handler sees. */
  function forwardedHeaders(req: Req, requestId: string): HeaderBag {
    const header = new HeaderBag({ "x-request-id": requestId });
    for (const name of forwarded) {
      const v = req.headers[name];
      if (typeof v === "string") header.set(name, v);
    }
    return header;
  }

  /** Calls the method in-process; a refusal comes back as the ConnectError the RPC face would send. */
  async function invoke(route: RestRoute, input: Message, req: Req, res: Res, requestId: string, call: CallRecord) {
    const header = forwardedHeaders(req, requestId);
    try {
      const out = await callMethod(route.path, {
        message: input,
        header,
        contextValues: createContextValues().set(kRemoteAddress, remoteAddressOf(req)).set(kCall, call),
        signal: clientGoneSignal(res),
      });
      return { message: out.message, headers: out.header };
    } catch (e) {
      if (e instanceof ConnectError) return { error: e, headers: e.metadata };
      throw e;
    }
  }

  /** The route for a request; a path variable that does not percent-decode is protocol_error. */
  function matchPath(req: Req, pathname: string) {
    try {
      // HTTP methods are case-sensitive: `get` is no GET.
      return matchRestRoute(routes, req.method ?? "", pathname, req.url ?? "");
    } catch (e) {
      if (e instanceof RestPathError) throw errors.protocol(e.message);
      throw e;
    }
  }

  /**
   * Answers a request that no RPC path took, and reports it: as the route's method once a
   * route matched, else with no method and its path.
   */
  async function handle(req: Req, res: Res, target: RequestTarget, at?: { requestId: string; call: CallRecord }): Promise<void> {
    const requestId = at?.requestId ?? requestIdOfRequest(req);
    const call = at?.call ?? startCall("rest");
    call.face = "rest";
    call.path = target.pathname.slice(0, 200);
    try {
      const match = matchPath(req, target.pathname);
      if (!match) return refuseCharged(req, res, errors.routeNotFound(), requestId, call);
      call.service = match.route.service.typeName;
      call.method = match.route.method.name;
      call.route = match.route.label;
      call.path = undefined;
      let body: JsonObject | undefined;
      let input;
      try {
        body = match.route.body === "*" ? await readBody(req) : undefined;
        const mark = body ? restBodyChecks[match.route.key]?.(body) : undefined;
        try {
          input = decodeRestRequest(match.route, match.params, queryOf(target.search), body);
        } catch (e) {
          if (e instanceof RestFieldError) throw errors.protocol(e.message, e.field);
          throw e;
        }
        mark?.(input);
      } catch (e) {
        if (!isHubError(e)) throw e;
        return await refuseAfterAuth(req, res, match, target, body, e, requestId, call);
      }
      if (match.route.streaming) return await streamEvents(match.route, input, req, res, requestId, call);
      const out = await invoke(match.route, input, req, res, requestId, call);
      if (out.error) {
        const err = restErrorFromConnect(out.error, requestId);
        refuse(res, err, requestId, out.headers);
        if (call.code === undefined) noteOutcome(call, out.error);
        return finish(call, requestId, err.status);
      }
      const message = out.message as unknown as Record<string, unknown>;
      const status = restSuccessStatus[match.route.method.name]?.(message, out.headers) ?? 200;
      const json = status === 204 ? undefined : toRestJson(match.route.method.output as DescMessage, out.message);
      send(res, status, requestId, json, out.headers);
      call.code ??= "ok";
      finish(call, requestId, status);
    } catch (e) {
      // The client went away before its request was whole: a cancelled call, not a fault.
      if (e instanceof ClientGone) {
        call.code ??= "canceled";
        return finishCall(observer, call, { requestId });
      }
      if (isHubError(e)) {
        // The rest of an oversized body is never read: end the HTTP/1.1 connection after the
        // answer, or the unread bytes would wedge the next request sent on it.
        if (e.code === "payload_too_large" && req.httpVersionMajor === 1) res.setHeader("connection", "close");
        return refuseCharged(req, res, e, requestId, call);
      }
      observer.log("internal_error", { requestId, error: e instanceof Error ? (e.stack ?? e.message) : String(e) });
      refuseLocally(res, errors.internal(e), requestId, call);
    }
  }

  /**
   * A server stream as server-sent events: the stream opens through the same interceptors (a
   * refusal is an ordinary REST error), then each message is one event named by the case of its
   * `event` oneof, its data the message's REST JSON, its id the frame's cursor, so an EventSource
   * that reconnects resumes with Last-Event-ID. An error after the first event is a last `error`
   * event with the REST error body. The stream ends when its client goes away or the hub stops.
   */
  async function streamEvents(route: RestRoute, input: Message, req: Req, res: Res, requestId: string, call: CallRecord) {
    resumeFromLastEventId(route, input, req);
    const controller = new AbortController();
    const stop = () => controller.abort(shutdownSignal.reason);
    if (shutdownSignal.aborted) stop();
    else shutdownSignal.addEventListener("abort", stop);
    const gone = () => controller.abort();
    res.once("close", gone);
    try {
      // The stream's first message is awaited before the answer's head: a refusal up to there
      // (the interceptors, a cursor that expired) is an ordinary REST error with its status.
      let frames: AsyncIterator<unknown>;
      let first: IteratorResult<unknown>;
      let header: Headers;
      try {
        const opened = await callMethod.stream(route.path, {
          message: input,
          header: forwardedHeaders(req, requestId),
          contextValues: createContextValues().set(kRemoteAddress, remoteAddressOf(req)).set(kCall, call),
          signal: controller.signal,
        });
        header = opened.header;
        frames = opened.message[Symbol.asyncIterator]();
        first = await frames.next();
      } catch (e) {
        const refusal = e instanceof ConnectError ? e : isHubError(e) ? e : undefined;
        if (!refusal) throw e;
        const err = refusal instanceof ConnectError ? restErrorFromConnect(refusal, requestId) : restErrorFromHub(refusal, requestId);
        refuse(res, err, requestId, refusal instanceof ConnectError ? refusal.metadata : noHeaders);
        if (call.code === undefined) noteOutcome(call, refusal);
        return finish(call, requestId, err.status);
      }
      const head: Record<string, string> = {
        "x-request-id": requestId,
        "referrer-policy": "no-referrer",
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store, no-transform",
        "x-accel-buffering": "no",
        "x-content-type-options": "nosniff",
      };
      for (const name of passedBack) {
        const v = header.get(name);
        if (v !== null) head[name] = v;
      }
      res.writeHead(200, head);
      stalls?.watch(res);
      const output = route.method.output;
      const oneof = output.oneofs[0];
      try {
        for (let r = first; !r.done && !res.destroyed; r = await frames.next()) {
          const message = isMessage(r.value, output) ? r.value : create(output, r.value as never);
          const json = toRestJson(output as DescMessage, message);
          const event = oneof ? (reflect(output, message).oneofCase(oneof)?.jsonName ?? "message") : "message";
          const id = json.cursor === undefined ? "" : `id: ${String(json.cursor)}\n`;
          if (!(res as ServerResponse).write(`${id}event: ${event}\ndata: ${JSON.stringify(json)}\n\n`)) await drained(res);
        }
        call.code ??= "ok";
      } catch (e) {
        const err = e instanceof ConnectError ? restErrorFromConnect(e, requestId) : restErrorFromHub(isHubError(e) ? e : errors.internal(e), requestId);
        if (!res.destroyed) (res as ServerResponse).write(`event: error\ndata: ${JSON.stringify(err.body)}\n\n`);
        if (call.code === undefined) noteOutcome(call, e instanceof ConnectError || isHubError(e) ? e : errors.internal(e));
      } finally {
        void frames.return?.();
      }
      if (!res.destroyed) res.end();
      finish(call, requestId, 200);
    } finally {
      shutdownSignal.removeEventListener("abort", stop);
      res.off("close", gone);
    }
  }

  /**
   * An EventSource reconnecting sends the last event's id (a cursor) as Last-Event-ID: it is the
   * stream's `afterCursor` unless the query names one. Anything but a cursor is protocol_error.
   */
  function resumeFromLastEventId(route: RestRoute, input: Message, req: Req): void {
    const last = req.headers["last-event-id"];
    const field = route.method.input.fields.find((f) => f.name === "after_cursor");
    if (typeof last !== "string" || last === "" || !field) return;
    const r = reflect(route.method.input, input);
    if (r.isSet(field)) return;
    if (!/^[0-9]{1,15}$/.test(last)) throw errors.protocol("Last-Event-ID must be the cursor of an event of this stream", "Last-Event-ID");
    r.set(field, BigInt(last));
  }

  /** A whole HTTP/1.1 refusal for a bare socket (the parser refused; no request object exists). */
  function rawRefusal(status: number, code: "protocol_error" | "route_not_found", message: string): string {
    const requestId = requestIdOf(null);
    const call = startCall("http");
    noteOutcome(call, code === "route_not_found" ? errors.routeNotFound() : errors.protocol(message));
    finish(call, requestId, status);
    const body = JSON.stringify({ error: message, code, requestId });
    return [
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}`,
      "content-type: application/json; charset=utf-8",
      `content-length: ${Buffer.byteLength(body)}`,
      `x-request-id: ${requestId}`,
      "cache-control: no-store",
      "x-content-type-options: nosniff",
      "connection: close",
      "",
      body,
    ].join("\r\n");
  }

  return {
    handle,
    rawRefusal,
    /**
     * Writes a refusal made outside the transcoder (e.g. `/metrics`) the REST way, and reports
     * it as `call` (an RPC call that failed outside connect), else as an `http` call.
     */
    refuse(req: Req, res: Res, e: HubError, call?: CallRecord) {
      const requestId = call?.requestId ?? requestIdOfRequest(req);
      refuseLocally(res, e, requestId, call ?? startCall("http"));
    },
  };
}

export type RestFace = ReturnType<typeof createRestFace>;
