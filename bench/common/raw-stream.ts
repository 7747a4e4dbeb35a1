/**
 * A lean Connect client for the benchmarks' stream load: node:http2 directly, Connect protocol
 * over h2c, protobuf binary. Made to hold thousands of server streams on a few HTTP/2 sessions
 * without connect-node's per-call and per-frame machinery (async iterables, AbortSignals,
 * interceptor chains, a stream wrapper per call), so that a fan-out or a pile of idle streams
 * measures the hub and not the client. Every message is still decoded with `fromBinary`.
 *
 * Server streaming (Connect streaming protocol): `POST /<service>/<Method>`,
 * `content-type: application/connect+proto`, `connect-protocol-version: 1`; the request is one
 * envelope (flags byte 0, 4-byte big-endian length, the message); the response body is a
 * sequence of envelopes, the last one flagged 0x02 (end of stream) holding JSON
 * `{"error"?: {code, message}, "metadata"?: ...}`.
 *
 * Unary (Connect unary protocol): `content-type: application/proto`, the bare message as the
 * body (or its bytes, already encoded); 200 with the bare response message, or another status
 * with a JSON error body.
 *
 * No compression is offered (no `connect-accept-encoding`), so the hub sends none.
 */
import http2 from "node:http2";
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import type { DescMethodServerStreaming, DescMethodUnary } from "@bufbuild/protobuf";

const {
  HTTP2_HEADER_METHOD,
  HTTP2_HEADER_PATH,
  HTTP2_HEADER_STATUS,
  HTTP2_HEADER_CONTENT_TYPE,
  HTTP2_HEADER_CONTENT_LENGTH,
  NGHTTP2_CANCEL,
} = http2.constants;

/** A failed call: the Connect error code (or `http_<status>` / `stream_reset` / `protocol`). */
export class RawCallError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`[${code}] ${message}`);
    this.name = "RawCallError";
  }
}

export interface StreamHandlers<O> {
  /** Response headers arrived, with their :status. */
  onHeaders?(status: number): void;
  /** One decoded response message. */
  onMessage(message: O): void;
  /** Once, unless the stream was cancelled first: the end-of-stream envelope without an error (undefined), or the failure. */
  onEnd(error: RawCallError | undefined): void;
}

/** An open server stream; `cancel()` resets it (RST_STREAM CANCEL) and reports no end. */
export interface RawStream {
  cancel(): void;
  readonly ended: boolean;
}

export interface ConnectOptions {
  /** Per-stream receive window this client advertises (SETTINGS_INITIAL_WINDOW_SIZE). Default 1 MiB. */
  streamWindow?: number;
  /** Connection-level receive window (set with setLocalWindowSize after connect). Default 64 MiB. */
  connectionWindow?: number;
}

const envelopeHeader = 5;

/** The request as one Connect envelope: flags 0, length, message bytes. */
export function envelope(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(envelopeHeader + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, envelopeHeader);
  return out;
}

const pathOf = (m: { parent: { typeName: string }; name: string }) => `/${m.parent.typeName}/${m.name}`;

function connectError(json: unknown, fallbackCode: string): RawCallError {
  const e = (json ?? {}) as { code?: unknown; message?: unknown };
  return new RawCallError(typeof e.code === "string" ? e.code : fallbackCode, typeof e.message === "string" ? e.message : "");
}

/**
 * One h2c connection. Streams opened on it share the connection; the client imposes no stream
 * limit of its own (peerMaxConcurrentStreams is raised, and `connect` waits for the server's
 * SETTINGS, whose SETTINGS_MAX_CONCURRENT_STREAMS is reported in `serverMaxConcurrentStreams`).
 */
export class H2Conn {
  /** Streams opened and not yet ended or cancelled. */
  open = 0;
  private constructor(
    readonly session: http2.ClientHttp2Session,
    readonly serverMaxConcurrentStreams: number | undefined,
  ) {}

  static async connect(baseUrl: string, o: ConnectOptions = {}): Promise<H2Conn> {
    const session = http2.connect(baseUrl, {
      // Until the server's SETTINGS arrive Node assumes 100; the hub advertises no limit.
      peerMaxConcurrentStreams: 2 ** 31 - 1,
      settings: { initialWindowSize: o.streamWindow ?? 1 << 20, enablePush: false },
    });
    const settings = await new Promise<http2.Settings>((resolve, reject) => {
      session.once("remoteSettings", resolve);
      session.once("error", reject);
    });
    session.on("error", () => {}); // streams report their own failures
    session.setLocalWindowSize(o.connectionWindow ?? 64 << 20);
    return new H2Conn(session, settings.maxConcurrentStreams);
  }

  /**
   * Opens a server stream. `request` is the message (or its bytes, already encoded, to skip
   * encoding when many streams send the same request). Handlers run on this thread's event loop.
   */
  serverStream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodServerStreaming<I, O>,
    request: MessageInitShape<I> | Uint8Array,
    headers: Record<string, string>,
    h: StreamHandlers<MessageShape<O>>,
  ): RawStream {
    const bytes = request instanceof Uint8Array ? request : toBinary(method.input, create(method.input, request));
    const body = envelope(bytes);
    const req = this.session.request(
      {
        [HTTP2_HEADER_METHOD]: "POST",
        [HTTP2_HEADER_PATH]: pathOf(method),
        [HTTP2_HEADER_CONTENT_TYPE]: "application/connect+proto",
        [HTTP2_HEADER_CONTENT_LENGTH]: String(body.length),
        "connect-protocol-version": "1",
        ...headers,
      },
      { endStream: false },
    );
    req.end(body);
    this.open++;
    const output = method.output;
    let ended = false;
    let status = 0;
    /** Bytes of an envelope split across chunks (rare: most frames arrive whole). */
    let rest: Buffer | undefined;
    /** Non-200: the body is a JSON error, collected whole. */
    let errorBody: Buffer[] | undefined;
    /** `reset`: the client gives up on the stream (a protocol failure it found itself). */
    const end = (error: RawCallError | undefined, reset = false) => {
      if (ended) return;
      ended = true;
      this.open--;
      if (reset && !req.closed) req.close(NGHTTP2_CANCEL);
      h.onEnd(error);
    };
    req.on("response", (hs) => {
      status = Number(hs[HTTP2_HEADER_STATUS]);
      if (status !== 200) errorBody = [];
      h.onHeaders?.(status);
    });
    req.on("data", (chunk: Buffer) => {
      if (ended) return;
      if (errorBody) {
        errorBody.push(chunk);
        return;
      }
      let buf = rest ? Buffer.concat([rest, chunk]) : chunk;
      rest = undefined;
      let off = 0;
      while (buf.length - off >= envelopeHeader) {
        const flags = buf[off]!;
        const len = buf.readUInt32BE(off + 1);
        if (buf.length - off - envelopeHeader < len) break;
        const payload = buf.subarray(off + envelopeHeader, off + envelopeHeader + len);
        off += envelopeHeader + len;
        if (flags & 0x02) {
          let json: { error?: unknown } | undefined;
          try {
            json = JSON.parse(payload.toString("utf8")) as { error?: unknown };
          } catch {
            return end(new RawCallError("protocol", "end-of-stream envelope is not JSON"), true);
          }
          return end(json?.error ? connectError(json.error, "unknown") : undefined);
        }
        if (flags & 0x01) return end(new RawCallError("protocol", "compressed envelope, none was offered"), true);
        let msg: MessageShape<O>;
        try {
          msg = fromBinary(output, payload);
        } catch (e) {
          return end(new RawCallError("protocol", `undecodable message: ${String(e)}`), true);
        }
        h.onMessage(msg);
        if (ended) return; // the handler cancelled
      }
      if (off < buf.length) rest = Buffer.from(buf.subarray(off)); // copy: don't pin the chunk
    });
    req.on("end", () => {
      if (errorBody) {
        const text = Buffer.concat(errorBody).toString("utf8");
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = { message: text.slice(0, 200) };
        }
        return end(connectError(json, `http_${status}`));
      }
      end(new RawCallError("protocol", "stream ended without an end-of-stream envelope"));
    });
    req.on("error", (e: Error) => end(new RawCallError("stream_reset", e.message)));
    req.on("close", () => end(new RawCallError("stream_reset", `stream closed (rst code ${req.rstCode})`)));
    return {
      cancel: () => {
        if (ended) return;
        ended = true;
        this.open--;
        req.close(NGHTTP2_CANCEL);
      },
      get ended() {
        return ended;
      },
    };
  }

  /** A unary call; resolves with the decoded response or rejects with a RawCallError. */
  unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    request: MessageInitShape<I> | Uint8Array,
    headers: Record<string, string> = {},
  ): Promise<MessageShape<O>> {
    const body = request instanceof Uint8Array ? request : toBinary(method.input, create(method.input, request));
    return new Promise((resolve, reject) => {
      const req = this.session.request({
        [HTTP2_HEADER_METHOD]: "POST",
        [HTTP2_HEADER_PATH]: pathOf(method),
        [HTTP2_HEADER_CONTENT_TYPE]: "application/proto",
        [HTTP2_HEADER_CONTENT_LENGTH]: String(body.length),
        "connect-protocol-version": "1",
        ...headers,
      });
      req.end(body);
      let status = 0;
      const chunks: Buffer[] = [];
      req.on("response", (hs) => (status = Number(hs[HTTP2_HEADER_STATUS])));
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const all = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
        if (status === 200) {
          try {
            resolve(fromBinary(method.output, all));
          } catch (e) {
            reject(new RawCallError("protocol", `undecodable response: ${String(e)}`));
          }
          return;
        }
        let json: unknown;
        try {
          json = JSON.parse(all.toString("utf8"));
        } catch {
          json = { message: all.toString("utf8").slice(0, 200) };
        }
        reject(connectError(json, `http_${status}`));
      });
      req.on("error", (e: Error) => reject(new RawCallError("stream_reset", e.message)));
    });
  }

  close(): void {
    this.session.close();
  }

  destroy(): void {
    this.session.destroy();
  }
}

/**
 * A few sessions shared by many streams: `next()` gives the session for the next stream,
 * filling each up to `perSession` streams before opening the next (sessions are made lazily,
 * so opening thousands of streams costs one connect per `perSession`).
 */
export class H2Pool {
  readonly conns: H2Conn[] = [];
  private assigned = 0;
  private pending: Promise<H2Conn> | undefined;
  constructor(
    private readonly baseUrl: string,
    readonly perSession: number,
    private readonly o: ConnectOptions = {},
  ) {}

  /** The session the next stream goes on. */
  async next(): Promise<H2Conn> {
    const i = Math.floor(this.assigned++ / this.perSession);
    while (this.conns.length <= i) {
      this.pending ??= H2Conn.connect(this.baseUrl, this.o).then((c) => {
        this.conns.push(c);
        this.pending = undefined;
        return c;
      });
      await this.pending;
    }
    return this.conns[i]!;
  }

  /** Streams per session, in order. */
  counts(): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.conns.length; i++) out.push(Math.min(this.perSession, Math.max(0, this.assigned - i * this.perSession)));
    return out;
  }

  close(): void {
    for (const c of this.conns) c.close();
  }

  destroy(): void {
    for (const c of this.conns) c.destroy();
  }
}
