// Raw HTTP/1.1 (node:net) and HTTP/2 (node:http2) requests for the fuzz suite. Clients such as
// fetch or connect-node refuse to send malformed data, so these write exactly what they are
// given and read whatever comes back: a response, a reset, silence, or a crash of the hub.
import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { EventEmitter } from "node:events";

export interface RawRequest {
  method: string;
  /** The request target exactly as written on the wire (HTTP/1.1) or as `:path` (HTTP/2). */
  path: string;
  /** Header lines in order; a name may repeat. */
  headers: [string, string][];
  body?: Uint8Array;
  /** HTTP/1.1 only: leave out the content-length this module adds for a body. */
  noContentLength?: boolean;
  /** The answer is an RPC stream: stop reading after its first complete envelope. */
  stream?: boolean;
}

export interface RawResponse {
  /** "answered", or how the exchange ended without a complete answer. */
  outcome: "answered" | "reset" | "timeout" | "crash";
  status: number;
  /** Lower-case names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  body: Buffer;
  /** HTTP/2 trailers. */
  trailers: Record<string, string>;
  /** The stream answered 200 and sent a first message: the call was accepted. */
  streamOpened?: boolean;
  detail?: string;
}

/** Headers that frame the message on the wire rather than say anything in it. */
const framing = new Set(["date", "content-length", "transfer-encoding", "connection", "keep-alive"]);

/** What two answers must share to be the same HTTP message (the differential suites): all but the framing. */
export const comparable = (r: RawResponse) => ({
  outcome: r.outcome,
  status: r.status,
  headers: Object.fromEntries(Object.entries(r.headers).filter(([k]) => !framing.has(k))),
  body: r.body.toString("base64"),
  trailers: r.trailers,
});

const TIMEOUT_MS = Number(process.env.FUZZ_TIMEOUT_MS ?? 5_000);

/** Set by a world that runs on TLS (harness.ts, FUZZ_TLS=1): every exchange goes over TLS with this CA. */
let secure: { ca: string } | undefined;
export function useTls(options: { ca: string } | undefined): void {
  secure = options;
}

// Uncaught exceptions are the in-process hub crashing (a real hub process would exit). They are
// recorded here; every pending exchange ends at once with outcome "crash".
const crashes = new EventEmitter();
export const crashLog: string[] = [];
let installed = false;
export function watchForCrashes(): void {
  if (installed) return;
  installed = true;
  const record = (e: unknown) => {
    const text = e instanceof Error ? (e.stack ?? e.message) : String(e);
    crashLog.push(text);
    crashes.emit("crash", text);
  };
  process.on("uncaughtException", record);
  process.on("unhandledRejection", record);
}

/** Runs `start` with a timeout and the crash watch; `start` gets `done` to settle once. */
function exchange(start: (done: (r: RawResponse) => void) => () => void): Promise<RawResponse> {
  return new Promise((resolve) => {
    let settled = false;
    let cleanup: () => void = () => {};
    const done = (r: RawResponse) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      crashes.off("crash", onCrash);
      cleanup();
      resolve(r);
    };
    const onCrash = (text: string) => done(empty("crash", text));
    const timer = setTimeout(() => done(empty("timeout", `no answer within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    crashes.on("crash", onCrash);
    cleanup = start(done);
  });
}

const empty = (outcome: RawResponse["outcome"], detail?: string): RawResponse => ({
  outcome,
  status: 0,
  headers: {},
  body: Buffer.alloc(0),
  trailers: {},
  detail,
});

/** True when `body` holds a complete enveloped message whose flags mark a data message. */
export function hasFirstMessage(body: Buffer): boolean {
  let at = 0;
  while (body.length >= at + 5) {
    const len = body.readUInt32BE(at + 1);
    if (body.length < at + 5 + len) return false;
    if ((body[at] & 0x82) === 0) return true; // not end-stream (0x02) nor grpc-web trailers (0x80)
    at += 5 + len;
  }
  return false;
}

// HTTP/1.1

interface Parsed {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  complete: boolean;
}

/** Parses what arrived so far of an HTTP/1.1 response (content-length, chunked or until close). */
export function parseH1(buf: Buffer, ended: boolean): Parsed | undefined {
  const end = buf.indexOf("\r\n\r\n");
  if (end < 0) return undefined;
  const lines = buf.subarray(0, end).toString("latin1").split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "");
  if (!m) return { status: -1, headers: {}, body: buf, complete: true };
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const i = line.indexOf(":");
    if (i < 0) continue;
    const k = line.slice(0, i).trim().toLowerCase();
    const v = line.slice(i + 1).trim();
    headers[k] = k in headers ? `${headers[k]}, ${v}` : v;
  }
  const status = Number(m[1]);
  let rest = buf.subarray(end + 4);
  if (status === 204 || status === 304 || (status >= 100 && status < 200)) return { status, headers, body: Buffer.alloc(0), complete: true };
  if (/chunked/i.test(headers["transfer-encoding"] ?? "")) {
    const chunks: Buffer[] = [];
    for (;;) {
      const nl = rest.indexOf("\r\n");
      if (nl < 0) return { status, headers, body: Buffer.concat(chunks), complete: ended };
      const size = parseInt(rest.subarray(0, nl).toString("latin1"), 16);
      if (!Number.isFinite(size)) return { status, headers, body: Buffer.concat(chunks), complete: true };
      if (size === 0) return { status, headers, body: Buffer.concat(chunks), complete: true };
      if (rest.length < nl + 2 + size + 2) return { status, headers, body: Buffer.concat(chunks), complete: ended };
      chunks.push(rest.subarray(nl + 2, nl + 2 + size));
      rest = rest.subarray(nl + 2 + size + 2);
    }
  }
  const length = headers["content-length"];
  if (length !== undefined) {
    const n = Number(length);
    return { status, headers, body: rest.subarray(0, n), complete: rest.length >= n || ended };
  }
  return { status, headers, body: rest, complete: ended };
}

/** Builds the bytes of an HTTP/1.1 request; `connection: close` so the answer ends the socket. */
export function h1Bytes(req: RawRequest): Buffer {
  const lines = [`${req.method} ${req.path} HTTP/1.1`, "host: 127.0.0.1", "connection: close"];
  for (const [k, v] of req.headers) lines.push(`${k}: ${v}`);
  if (req.body && !req.noContentLength) lines.push(`content-length: ${req.body.byteLength}`);
  return Buffer.concat([Buffer.from(lines.join("\r\n") + "\r\n\r\n", "latin1"), Buffer.from(req.body ?? [])]);
}

export function sendH1(port: number, req: RawRequest): Promise<RawResponse> {
  return exchange((done) => {
    const socket = secure
      ? tls.connect({ port, host: "127.0.0.1", ca: secure.ca, ALPNProtocols: ["http/1.1"] })
      : net.connect(port, "127.0.0.1");
    let buf = Buffer.alloc(0);
    const finish = (ended: boolean) => {
      const p = parseH1(buf, ended);
      if (!p) {
        if (ended) done(empty("reset", buf.length ? `unparsable answer: ${buf.subarray(0, 200).toString("latin1")}` : "connection closed without an answer"));
        return;
      }
      if (req.stream && p.status === 200 && hasFirstMessage(p.body)) {
        return done({ outcome: "answered", status: p.status, headers: p.headers, body: p.body, trailers: {}, streamOpened: true });
      }
      if (p.complete) done({ outcome: p.status < 0 ? "reset" : "answered", status: p.status, headers: p.headers, body: p.body, trailers: {} });
    };
    socket.on(secure ? "secureConnect" : "connect", () => socket.write(h1Bytes(req)));
    socket.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      finish(false);
    });
    socket.on("end", () => finish(true));
    socket.on("close", () => finish(true));
    socket.on("error", () => finish(true));
    return () => socket.destroy();
  });
}

// HTTP/2

const sessions = new Map<number, http2.ClientHttp2Session>();

function sessionFor(port: number): http2.ClientHttp2Session {
  let s = sessions.get(port);
  if (!s || s.closed || s.destroyed) {
    const session = secure ? http2.connect(`https://127.0.0.1:${port}`, { ca: secure.ca }) : http2.connect(`http://127.0.0.1:${port}`);
    s = session;
    s.on("error", () => {});
    // A GOAWAY (e.g. after a header block nghttp2 refused) ends the session for new streams.
    s.on("goaway", () => {
      if (sessions.get(port) === session) sessions.delete(port);
    });
    s.unref();
    sessions.set(port, s);
  }
  return s;
}

export function closeH2Sessions(): void {
  for (const s of sessions.values()) s.destroy();
  sessions.clear();
}

/**
 * One HTTP/2 exchange; a stream refused because the session was going away is retried once on a
 * new one. So is ENHANCE_YOUR_CALM: Node's flood protection ends a session that sent more than
 * 1,000 frames the server could not take, which this client does itself when it resets a stream
 * answered early (say 404 before the body was read) while its DATA frames are still in flight.
 */
export async function sendH2(port: number, req: RawRequest): Promise<RawResponse> {
  const first = await exchangeH2(port, req);
  if (first.outcome !== "reset" || !/REFUSED_STREAM|GOAWAY|ENHANCE_YOUR_CALM|session/i.test(first.detail ?? "")) return first;
  sessions.get(port)?.destroy();
  sessions.delete(port);
  return exchangeH2(port, req);
}

function exchangeH2(port: number, req: RawRequest): Promise<RawResponse> {
  return exchange((done) => {
    const headers: http2.OutgoingHttpHeaders = { ":method": req.method, ":path": req.path, ":authority": "127.0.0.1", ":scheme": secure ? "https" : "http" };
    for (const [k, v] of req.headers) {
      const name = k.toLowerCase();
      const prev = headers[name];
      headers[name] = prev === undefined ? v : [...(Array.isArray(prev) ? prev : [String(prev)]), v];
    }
    let stream: http2.ClientHttp2Stream;
    try {
      stream = sessionFor(port).request(headers, { endStream: false });
    } catch (e) {
      // The client refused to send it (e.g. a header node:http2 will not encode): not the hub's fault.
      done({ ...empty("answered"), status: -2, detail: `client refused: ${String(e)}` });
      return () => {};
    }
    let status = 0;
    const resHeaders: Record<string, string> = {};
    const trailers: Record<string, string> = {};
    const chunks: Buffer[] = [];
    const flat = (h: http2.IncomingHttpHeaders, into: Record<string, string>) => {
      for (const [k, v] of Object.entries(h)) if (!k.startsWith(":") && v !== undefined) into[k] = Array.isArray(v) ? v.join(", ") : String(v);
    };
    const answer = (): RawResponse => ({ outcome: "answered", status, headers: resHeaders, body: Buffer.concat(chunks), trailers });
    stream.on("response", (h) => {
      status = Number(h[":status"]);
      flat(h, resHeaders);
    });
    stream.on("trailers", (h) => flat(h, trailers));
    stream.on("data", (d: Buffer) => {
      chunks.push(d);
      if (req.stream && status === 200 && hasFirstMessage(Buffer.concat(chunks))) done({ ...answer(), streamOpened: true });
    });
    stream.on("end", () => done(status ? answer() : empty("reset", "stream ended without headers")));
    stream.on("close", () =>
      done(status ? answer() : empty("reset", `stream closed without an answer (rst code ${stream.rstCode ?? "?"})`)),
    );
    stream.on("error", (e) => done(status ? answer() : empty("reset", String(e))));
    stream.end(req.body ? Buffer.from(req.body) : undefined);
    return () => {
      if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
    };
  });
}

export type Transport = "h1" | "h2";
export const send = (transport: Transport, port: number, req: RawRequest): Promise<RawResponse> =>
  transport === "h1" ? sendH1(port, req) : sendH2(port, req);
