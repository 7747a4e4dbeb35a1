import type { DescMethod, JsonReadOptions, JsonWriteOptions, Message } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues } from "@connectrpc/connect";
import { compressionNegotiate, type Compression } from "@connectrpc/connect/protocol";
import { codeToHttpStatus, contentTypeUnaryJson, contentTypeUnaryProto, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import type { InProcessCaller } from "./in-process.js";
import { clientGoneSignal, readBody, replay, ruleHeadersOf, type ReplayBody } from "../http/body.js";
import { methodSerializations } from "./serialization.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

export interface ConnectUnaryOptions {
  /** The hub's unary implementations behind its interceptors (in-process.ts). */
  call: InProcessCaller;
  /** Connect's cap on a request message; a longer body is connect's to refuse. */
  readMaxBytes: number;
  /** The router's response compressions and JSON options, so an answer reads the same. */
  acceptCompression: Compression[];
  jsonOptions: Partial<JsonReadOptions & JsonWriteOptions>;
}

/** Connect's own unary content types (`application/json`, `; charset=utf-8`, `application/proto`). */
const unaryType = /^application\/(?:(json)(?:; ?charset=utf-?8)?|(proto))$/i;
/** connect's default: smaller answers are not worth compressing. */
const compressMinBytes = 1024;
const noBody = new Uint8Array(0);

/**
 * The Connect protocol's plain unary call, served without connect's generic request pipeline:
 * a POST of one JSON or binary message, uncompressed, with no deadline. Its body is read here,
 * decoded with connect's own serialization for the method, and handed to the same
 * implementation through the same interceptors (in-process.ts); the answer is written
 * as connect writes it: `application/json` or `application/proto`, response trailers as
 * `trailer-` headers, a refusal as connect's JSON error body with its HTTP status.
 *
 * Per call that saves what is overhead for a finished body: the linked abort signals and the
 * DOMException connect raises when a call ends, the universal request and response, the async
 * iterators around one buffer. Anything else keeps connect's exact answer: a request this path
 * does not take (`accepts` says no) is connect's from the start, and a body that will not
 * decode, or is longer than a message may be, goes to connect with the bytes already read.
 */
export function createConnectUnary(o: ConnectUnaryOptions) {
  const serializationOf = methodSerializations(o.jsonOptions, o.readMaxBytes);

  /** True when `req` is a plain Connect unary call of a method this path can serve. */
  function accepts(req: Req, path: string): boolean {
    if (req.method !== "POST" || !o.call.serves(path)) return false;
    const h = req.headers;
    const type = h["content-type"];
    if (type === undefined || !unaryType.test(type)) return false;
    if (h["connect-timeout-ms"] !== undefined) return false;
    const encoding = h["content-encoding"];
    if (encoding !== undefined && encoding !== "identity") return false;
    const declared = h["content-length"];
    return declared === undefined || Number(declared) <= o.readMaxBytes;
  }

  /**
   * Serves one call `accepts` took. Resolves to undefined once answered (or once the client is
   * gone), or to the body for connect to serve the call with instead.
   */
  async function serve(req: Req, res: Res, method: DescMethod, path: string, values: ContextValues): Promise<ReplayBody | undefined> {
    const read = await readBody(req, o.readMaxBytes);
    if (read.kind === "gone") return undefined;
    if (read.kind === "long") return replay(read.chunks, req);
    const bytes = read.chunks.length === 1 ? read.chunks[0]! : read.chunks.length === 0 ? noBody : Buffer.concat(read.chunks);
    const declared = req.headers["content-length"];
    if (declared !== undefined && Number(declared) !== bytes.byteLength) return replay(read.chunks, req);

    const binary = unaryType.exec(req.headers["content-type"]!)![2] !== undefined;
    const serialization = serializationOf(method);
    let input: Message;
    try {
      input = serialization.getI(binary).parse(bytes) as Message;
    } catch {
      return replay(read.chunks, req); // connect's refusal, typed as on every other path
    }

    const header = ruleHeadersOf(req);
    // The answer's headers by lower-case name, trailers as `trailer-` headers (connect's trailerMux).
    const out: Record<string, string> = { "content-type": binary ? contentTypeUnaryProto : contentTypeUnaryJson };
    let status = 200;
    let body: Uint8Array;
    try {
      const answer = await o.call(path, { message: input, header, contextValues: values, signal: clientGoneSignal(res) }, "connect");
      body = serialization.getO(binary).serialize(answer.message);
      answer.header.forEach((v, k) => (out[k.toLowerCase()] = v));
      answer.trailer.forEach((v, k) => (out[`trailer-${k.toLowerCase()}`] = v));
    } catch (e) {
      // What the interceptors throw is already typed (interceptors/errors.ts): written as connect does.
      const error = e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
      status = codeToHttpStatus(error.code);
      out["content-type"] = contentTypeUnaryJson;
      error.metadata.forEach((v, k) => (out[k] = v));
      body = errorToJsonBytes(error, o.jsonOptions);
    }
    const accepted = req.headers["accept-encoding"];
    if (accepted !== undefined && body.byteLength >= compressMinBytes) {
      const compression = compressionNegotiate(o.acceptCompression, null, accepted, "accept-encoding").response;
      if (compression) {
        body = await compression.compress(body);
        out["content-encoding"] = compression.name;
      }
    }
    out["content-length"] = String(body.byteLength);
    if (res.destroyed) return undefined;
    res.writeHead(status, out);
    res.end(body);
    return undefined;
  }

  return { accepts, serve };
}

export type ConnectUnary = ReturnType<typeof createConnectUnary>;
