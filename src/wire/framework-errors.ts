import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, errorFromJsonBytes, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
import { readAllBytes, createAsyncIterable, type UniversalHandler, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { kCall, noteOutcome, type CallRecord } from "../http/call-record.js";
import { requestIdOf } from "../http/request-id.js";

/**
 * Refusals that connect itself raises while it reads a request, before any interceptor has seen
 * the call, carry no ErrorInfo, and a body that does not decode comes out as `internal`. Those
 * are the client's errors: this module hands each to `typed` (the server's mapping), so every
 * face answers a malformed request with `invalid_argument` + ErrorInfo (`PROTOCOL_ERROR`), never
 * a 5xx. A refusal is connect's own when the call record has no outcome yet: every call the
 * interceptors see gets one (interceptors/observe.ts). The fast path hands every body it cannot
 * decode to connect, so both paths answer such a request from here, with the same bytes.
 */

/** The typed replacement of a refusal connect raised before the interceptors, or undefined to keep it. */
export type TypeFrameworkRefusal = (e: ConnectError, requestHeader: Headers) => ConnectError | undefined;

type Replace = (e: ConnectError | undefined) => ConnectError | undefined;

const contentType = (res: UniversalServerResponse) => new Headers(res.header).get("content-type") ?? "";

/** A Connect unary refusal is a JSON body with a non-200 status. */
async function connectUnary(res: UniversalServerResponse, replacement: Replace): Promise<UniversalServerResponse> {
  const header = new Headers(res.header);
  // Framework refusals are small and never compressed; a compressed body is the hub's own error.
  if (header.has("content-encoding")) return res;
  const bytes = res.body ? await readAllBytes(res.body, Number.MAX_SAFE_INTEGER) : new Uint8Array();
  let typed: ConnectError | undefined;
  try {
    typed = replacement(errorFromJsonBytes(bytes, undefined, new ConnectError("", Code.Unknown)));
  } catch {
    typed = undefined; // not an error body connect could read: pass it on as it is
  }
  if (!typed) return { ...res, body: createAsyncIterable([bytes]) };
  const body = errorToJsonBytes(typed, {});
  header.set("content-length", String(body.byteLength));
  // The status of the typed code, as connect answers its own: a body over the limit
  // (resource_exhausted) is a 429 like a rate limit, not a 400.
  return { ...res, status: codeToHttpStatus(typed.code), header, body: createAsyncIterable([body]) };
}

/** gRPC sends its status in HTTP trailers once the body has ended. */
function grpc(res: UniversalServerResponse, replacement: Replace): UniversalServerResponse {
  const { body, trailer } = res;
  if (!body || !trailer) return res;
  return {
    ...res,
    body: (async function* () {
      yield* body;
      const typed = replacement(findTrailerError(trailer));
      if (typed) setTrailerStatus(trailer, typed);
    })(),
  };
}

/** gRPC-Web sends its status as the body's last envelope (flag 0x80). */
function grpcWeb(res: UniversalServerResponse, replacement: Replace): UniversalServerResponse {
  const { body } = res;
  if (!body) return res;
  return {
    ...res,
    body: (async function* () {
      for await (const chunk of body) {
        // Framework refusals travel in a small, uncompressed trailer envelope (flags exactly 0x80).
        if (chunk.byteLength < 5 || chunk[0] !== trailerFlag) {
          yield chunk;
          continue;
        }
        let trailer: Headers;
        let typed: ConnectError | undefined;
        try {
          trailer = trailerParse(chunk.subarray(5));
          typed = replacement(findTrailerError(trailer));
        } catch {
          typed = undefined; // not a trailer connect could read: pass it on as it is
        }
        if (!typed) {
          yield chunk;
          continue;
        }
        setTrailerStatus(trailer!, typed);
        const data = trailerSerialize(trailer!);
        const out = new Uint8Array(5 + data.byteLength);
        out[0] = trailerFlag;
        new DataView(out.buffer).setUint32(1, data.byteLength);
        out.set(data, 5);
        yield out;
      }
    })(),
  };
}

/**
 * `res` with the request's id: the rules give every call they see its id (the error rule's
 * `x-request-id`); a request connect refused before any rule ran gets it here, on its answer
 * and on its log line.
 */
function withRequestId(res: UniversalServerResponse, requestHeader: Headers, call: CallRecord | undefined): UniversalServerResponse {
  const header = new Headers(res.header);
  if (header.has("x-request-id")) return res;
  const requestId = call?.requestId ?? requestIdOf(requestHeader.get("x-request-id"));
  if (call) call.requestId = requestId;
  header.set("x-request-id", requestId);
  return { ...res, header };
}

/** `handler`, with connect's own request-decoding refusals answered as typed hub errors. */
export function withTypedFrameworkErrors(handler: UniversalHandler, typedOf: TypeFrameworkRefusal): UniversalHandler {
  const wrapped = async (req: Parameters<UniversalHandler>[0]) => {
    const call = req.contextValues?.get(kCall);
    const header = new Headers(req.header);
    /** A refusal the interceptors never saw: typed, and the call's outcome. */
    const replacement = (e: ConnectError | undefined): ConnectError | undefined => {
      if (!e || !call || call.code !== undefined) return undefined;
      const typed = typedOf(e, header);
      noteOutcome(call, typed ?? e);
      return typed;
    };
    const answered = await handler(req);
    // A Connect stream carries its id in the end-of-stream message's metadata, as the rules put it.
    const res = contentType(answered).startsWith("application/connect+") ? answered : withRequestId(answered, header, call);
    const type = contentType(res);
    if (type.startsWith("application/grpc-web")) return grpcWeb(res, replacement);
    if (type.startsWith("application/grpc")) return grpc(res, replacement);
    if (res.status !== 200 && type.startsWith("application/json")) return connectUnary(res, replacement);
    return res;
  };
  return Object.assign(wrapped, {
    protocolNames: handler.protocolNames,
    supportedContentType: handler.supportedContentType,
    allowedMethods: handler.allowedMethods,
    requestPath: handler.requestPath,
    service: handler.service,
    method: handler.method,
  });
}
