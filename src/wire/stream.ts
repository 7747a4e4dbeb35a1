import type { ServerResponse } from "node:http";
import { create, isMessage, type DescMethod, type JsonReadOptions, type JsonWriteOptions, type Message } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues } from "@connectrpc/connect";
import { compressedFlag, compressionNegotiate, type Compression } from "@connectrpc/connect/protocol";
import { createEndStreamSerialization, endStreamFlag } from "@connectrpc/connect/protocol-connect";
import type { InProcessCaller } from "./in-process.js";
import { drained, headersOf, readBody, replay, type ReplayBody } from "../http/body.js";
import { methodSerializations } from "./serialization.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

export interface ConnectStreamOptions {
  /** The hub's server-streaming implementations behind its interceptors (in-process.ts). */
  call: InProcessCaller;
  /** Connect's cap on a request message; a longer body is connect's to refuse. */
  readMaxBytes: number;
  /** Every stream follows it: when the hub shuts down, its reason ends each one. */
  shutdownSignal: AbortSignal;
  /** The router's compressions and JSON options, so a stream reads the same as connect's. */
  acceptCompression: Compression[];
  jsonOptions: Partial<JsonReadOptions & JsonWriteOptions>;
}

/** Connect's streaming content types (`application/connect+json`, `+proto`). */
const streamType = /^application\/connect\+(?:(json)(?:; ?charset=utf-?8)?|(proto))$/i;
/** connect's default: smaller messages are not worth compressing. */
const compressMinBytes = 1024;
const envelopeHeader = 5;

/** One envelope: flags, the length (big-endian), the bytes. */
function envelope(flags: number, data: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(envelopeHeader + data.byteLength);
  out[0] = flags;
  out.writeUInt32BE(data.byteLength, 1);
  out.set(data, envelopeHeader);
  return out;
}

/**
 * The Connect protocol's server stream, served without connect's generic stream pipeline: a POST
 * of one enveloped JSON or binary message, uncompressed, with no deadline. The request is read
 * and decoded here with connect's own serialization; the stream runs the same implementation
 * through the same interceptors (in-process.ts), and each message it yields is written as
 * one envelope, the end as connect's end-of-stream envelope (its error and trailers), the
 * headers with the first envelope. A client that accepts gzip or br gets messages of 1 KiB and
 * more compressed, as connect sends them.
 *
 * The saving is per message, which is what a fan-out pays 1,000 times: no chain of async
 * iterables between the implementation and the socket, and a frame that many watchers share (the
 * watch streams yield one message object per change, server/watch-handlers.ts) is encoded once.
 * Like unary.ts, everything else stays connect's: other protocols, compressed requests,
 * deadlines, and a body that does not decode as exactly one envelope.
 */
export function createConnectStream(o: ConnectStreamOptions) {
  const serializationOf = methodSerializations(o.jsonOptions, o.readMaxBytes);
  const endStream = createEndStreamSerialization(o.jsonOptions);
  /** Encoded messages by the object a stream yielded, per format: shared frames are encoded once. */
  const encoded = { proto: new WeakMap<object, Uint8Array>(), json: new WeakMap<object, Uint8Array>() };

  /** True when `req` is a plain Connect server stream of a method this path can serve. */
  function accepts(req: Req, path: string): boolean {
    if (req.method !== "POST" || !o.call.streams(path)) return false;
    const h = req.headers;
    const type = h["content-type"];
    if (type === undefined || !streamType.test(type)) return false;
    if (h["connect-timeout-ms"] !== undefined) return false;
    const encoding = h["connect-content-encoding"];
    return encoding === undefined || encoding === "identity";
  }

  /**
   * Serves one stream `accepts` took. Resolves once the stream has ended (or its client is gone),
   * or at once with the body for connect to serve the call with instead.
   */
  async function serve(req: Req, res: Res, method: DescMethod, path: string, values: ContextValues): Promise<ReplayBody | undefined> {
    const read = await readBody(req, o.readMaxBytes + envelopeHeader);
    if (read.kind === "gone") return undefined;
    if (read.kind === "long") return replay(read.chunks, req);
    const body = read.chunks.length === 1 ? read.chunks[0]! : Buffer.concat(read.chunks);
    if (body.length < envelopeHeader || body[0] !== 0 || body.readUInt32BE(1) !== body.length - envelopeHeader) {
      return replay(read.chunks, req); // compressed, several envelopes, or cut short: connect's to answer
    }
    const binary = streamType.exec(req.headers["content-type"]!)![2] !== undefined;
    const serialization = serializationOf(method);
    let input: Message;
    try {
      input = serialization.getI(binary).parse(body.subarray(envelopeHeader)) as Message;
    } catch {
      return replay(read.chunks, req);
    }

    const accepted = req.headers["connect-accept-encoding"];
    const compression = compressionNegotiate(o.acceptCompression, null, typeof accepted === "string" ? accepted : null, "connect-accept-encoding").response;
    const head: Record<string, string> = { "content-type": binary ? "application/connect+proto" : "application/connect+json" };
    if (compression) head["connect-content-encoding"] = compression.name;
    const output = method.output;
    const cache = binary ? encoded.proto : encoded.json;
    const serialize = serialization.getO(binary);
    /** One message as an envelope, compressed as connect would. */
    const frame = async (flags: number, data: Uint8Array) =>
      compression && data.byteLength >= compressMinBytes ? envelope(flags | compressedFlag, await compression.compress(data)) : envelope(flags, data);

    // The stream ends when its client goes away or the hub shuts down (with that reason).
    const controller = new AbortController();
    const onShutdown = () => controller.abort(o.shutdownSignal.reason);
    if (o.shutdownSignal.aborted) onShutdown();
    else o.shutdownSignal.addEventListener("abort", onShutdown);
    const onClose = () => controller.abort();
    res.once("close", onClose);

    let header: Headers | undefined;
    let trailer = new Headers();
    let error: ConnectError | undefined;
    const writeHead = () => {
      if (res.headersSent) return;
      const out = { ...head };
      header?.forEach((v, k) => (out[k] = v));
      out["content-type"] = head["content-type"]!;
      res.writeHead(200, out);
    };
    try {
      const stream = await o.call.stream(path, { message: input, header: headersOf(req), contextValues: values, signal: controller.signal });
      header = stream.header;
      trailer = stream.trailer;
      for await (const item of stream.message) {
        if (res.destroyed) break;
        let data = typeof item === "object" && item !== null ? cache.get(item) : undefined;
        if (data === undefined) {
          data = serialize.serialize(isMessage(item, output) ? item : create(output, item as never));
          if (typeof item === "object" && item !== null) cache.set(item, data);
        }
        writeHead();
        if (!(res as ServerResponse).write(await frame(0, data))) await drained(res);
      }
    } catch (e) {
      error = e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
    } finally {
      o.shutdownSignal.removeEventListener("abort", onShutdown);
      res.off("close", onClose);
    }
    if (res.destroyed) return undefined;
    writeHead();
    res.end(await frame(endStreamFlag, endStream.serialize({ metadata: trailer, error })));
    return undefined;
  }

  return { accepts, serve };
}
