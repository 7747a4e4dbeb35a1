import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { Duplex } from "node:stream";
import tls from "node:tls";
import { InFlight } from "../in-flight.js";

type Handler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

const h2Preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
/** The first byte of every TLS connection: a handshake record (the ClientHello). */
const tlsHandshakeRecord = 0x16;
/** A connection that has sent nothing this long is closed (its first bytes decide where it goes). */
const firstBytesTimeoutMs = 10_000;
/**
 * HTTP/2 gets the limits Node gives HTTP/1.1 by default, which its own server lacks: a request
 * must have arrived whole (its END_STREAM) within HTTP/1.1's `requestTimeout`, and a connection
 * with no stream open is closed after a while (HTTP/1.1 closes an idle keep-alive connection
 * after 5 s; an HTTP/2 client multiplexes, so its connection is kept longer). And one
 * connection may not open streams without end: each one can hold a request body being read.
 */
const h2RequestTimeoutMs = 300_000;
const h2IdleTimeoutMs = 60_000;
const h2MaxConcurrentStreams = 1_000;

/** The remote address of a request, over HTTP/1.1 or HTTP/2. */
export function remoteAddressOf(req: { socket: unknown }): string {
  return (req.socket as { remoteAddress?: string } | undefined)?.remoteAddress ?? "unknown";
}

/** Requests with an expectation Node will not meet (`checkExpectation`), for the handler to refuse. */
const unmetExpectations = new WeakSet<object>();

/**
 * Whether the request carries an `Expect` other than `100-continue` (RFC 9110 §10.1.1), as Node
 * read it: HTTP/1.1's and HTTP/2's servers hand such a request to `checkExpectation`, where
 * Node would otherwise answer a bare 417 itself.
 */
export function expectationUnmet(req: object): boolean {
  return unmetExpectations.has(req);
}

/** A refusal written on a bare socket, when Node's HTTP parser refused before any request. */
export type RawRefusal = (status: number, code: "protocol_error" | "route_not_found", message: string) => string;

/** Node's parser errors, as the status and words a client is told. */
function parserRefusal(err: NodeJS.ErrnoException): { status: number; message: string } {
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return { status: 431, message: "request header section is too large" };
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status: 408, message: "request was not received in time" };
    default:
      return { status: 400, message: `malformed HTTP request (${err.code ?? "parse error"})` };
  }
}

/**
 * Answers what Node's HTTP/1.1 server would otherwise drop or answer with an empty body: a
 * request its parser refused (`clientError`), and `CONNECT`, which the hub does not serve.
 * Each gets the REST error body, a request id, and the connection closed.
 */
function answerBareRefusals(h1: http.Server, refusal: RawRefusal) {
  h1.on("clientError", (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (err.code === "ECONNRESET" || !socket.writable) {
      socket.destroy();
      return;
    }
    const { status, message } = parserRefusal(err);
    answerAndLinger(socket, refusal(status, "protocol_error", message));
  });
  h1.on("connect", (_req: http.IncomingMessage, socket: Duplex) => {
    socket.on("error", () => socket.destroy());
    answerAndLinger(socket, refusal(404, "route_not_found", "route not found"));
  });
}

/** How long a refused connection is read (and what arrives dropped) before it is closed. */
const lingerMs = 2_000;

/** The connections answered with a refusal, lingering until they close. */
const lingering = new WeakSet<Duplex>();

/**
 * Writes a refusal, then closes in stages (RFC 9112 §9.6): the client may still be sending the
 * request's body, and closing a socket with unread data resets the connection, which can
 * discard the refusal before the client reads it. So the connection is read and what arrives
 * dropped until the client closes, or for `lingerMs` at most. A plaintext socket half-closes at
 * once (FIN after the refusal, reading on); a TLS socket cannot half-close (its end tears the
 * session down), so it only writes until then.
 */
function answerAndLinger(socket: Duplex, text: string): void {
  // A TLS socket stays open after its refusal, and Node's parser refuses each chunk that follows
  // again: it is answered, and watched, once.
  if (lingering.has(socket)) return;
  lingering.add(socket);
  socket.on("error", () => socket.destroy());
  if (socket instanceof tls.TLSSocket) socket.write(text);
  else socket.end(text);
  const timer = setTimeout(() => socket.destroy(), lingerMs);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
  socket.once("end", () => socket.destroy());
  socket.on("data", () => {});
  socket.resume();
}

export interface DualServerOptions {
  /**
   * Options of a tls.Server (certificate, key, ALPN, client CA): the port then speaks TLS only,
   * and `tlsServer.setSecureContext` swaps its certificate for new connections.
   */
  tls?: tls.TlsOptions;
  /** A connection that sends nothing is closed after this long (default 10 s). */
  firstBytesTimeoutMs?: number;
  /** An HTTP/2 request not whole this long after it began is reset (default 300 s). */
  h2RequestTimeoutMs?: number;
  /** An HTTP/2 connection with no stream open this long is closed (default 60 s). */
  h2IdleTimeoutMs?: number;
}

/**
 * One port for HTTP/1.1 and HTTP/2, each new connection routed by its first bytes. Plaintext
 * (h2c with prior knowledge; Node's `allowHTTP1` only works with TLS): the HTTP/2 client preface
 * goes to the HTTP/2 server, anything else to the HTTP/1.1 server. With `tls`: a TLS handshake
 * goes to a tls.Server, and once secure, ALPN `h2` to the HTTP/2 server, anything else to the
 * HTTP/1.1 one; plaintext is answered 400 (`protocol_error`) and closed, never served.
 * Connections that send nothing, and handshakes that do not finish, are closed after a while,
 * so idle sockets cannot pile up.
 */
export function createDualServer(handler: Handler, refusal: RawRefusal, options: DualServerOptions = {}) {
  const firstBytesMs = options.firstBytesTimeoutMs ?? firstBytesTimeoutMs;
  let draining = false;
  /** HTTP/1.1 answers under way: once draining, each closes its connection when it is done. */
  const inFlight = new InFlight<http.ServerResponse>();
  const closeWhenDone = (res: http.ServerResponse) => {
    if (!res.headersSent) res.setHeader("connection", "close");
    else res.once("finish", () => res.socket?.end());
  };
  const onH1Request = (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (draining) closeWhenDone(res);
    const entry = inFlight.add(res);
    res.once("close", () => inFlight.delete(entry));
    handler(req, res);
  };
  // An HTTP/1.1 request without Host, or with an expectation other than 100-continue, gets the
  // hub's refusal (http-handler.ts), not Node's bare 400 or 417.
  const h1 = http.createServer({ requireHostHeader: false }, onH1Request);
  h1.on("checkExpectation", (req: http.IncomingMessage, res: http.ServerResponse) => {
    unmetExpectations.add(req);
    onH1Request(req, res);
  });
  answerBareRefusals(h1, refusal);
  // h1 never listens itself (it is fed sockets), but Node starts its connection tracking —
  // which idle-connection closing and request timeouts rely on — on "listening".
  h1.emit("listening");
  const h2 = http2.createServer({ settings: { maxConcurrentStreams: h2MaxConcurrentStreams } }, handler);
  // HTTP/2 CONNECT would get a bare 405; the handler answers it with the REST error body.
  h2.on("connect", handler);
  h2.on("checkExpectation", (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
    unmetExpectations.add(req);
    handler(req, res);
  });
  const sessions = new InFlight<http2.Http2Session>();
  const requestMs = options.h2RequestTimeoutMs ?? h2RequestTimeoutMs;
  const idleMs = options.h2IdleTimeoutMs ?? h2IdleTimeoutMs;
  h2.on("session", (s) => {
    const entry = sessions.add(s);
    let open = 0;
    let idle: NodeJS.Timeout | undefined;
    const idleFrom = () => {
      idle = setTimeout(() => s.close(), idleMs);
      idle.unref();
    };
    idleFrom();
    s.on("stream", (stream: http2.ServerHttp2Stream) => {
      open++;
      clearTimeout(idle);
      // Reset unless the client has sent the request whole by then (an answer may take longer:
      // a waiting acquire, a stream of events).
      const deadline = setTimeout(() => {
        if (!stream.destroyed && !stream.state.remoteClose) stream.close(http2.constants.NGHTTP2_CANCEL);
      }, requestMs);
      deadline.unref();
      stream.once("close", () => {
        clearTimeout(deadline);
        if (--open === 0 && !s.closed && !s.destroyed) idleFrom();
      });
    });
    s.once("close", () => {
      clearTimeout(idle);
      sessions.delete(entry);
    });
  });
  const sockets = new InFlight<net.Socket>();
  /** Connections that have not sent their first bytes yet (not routed), or were refused. */
  const unrouted = new InFlight<net.Socket>();
  /** Connections in their TLS handshake, by peer address (what their TLS socket shares with them). */
  const handshaking = new Map<string, net.Socket>();
  const tlsServer = options.tls ? tls.createServer(options.tls) : undefined;
  tlsServer?.on("secureConnection", (s: tls.TLSSocket) => {
    handshaking.delete(peerOf(s));
    if (draining) return void s.destroy();
    if (s.alpnProtocol === "h2") h2.emit("connection", s);
    else h1.emit("connection", s);
  });
  // A failed or timed-out handshake: the client has its alert; nothing to answer.
  tlsServer?.on("tlsClientError", (_e: Error, s: tls.TLSSocket) => s.destroy());

  /** Hands a TLS connection to the tls.Server, its sniffed bytes first. */
  const toTls = (socket: net.Socket, seen: Buffer) => {
    socket.pause();
    socket.unshift(seen);
    const peer = peerOf(socket);
    handshaking.set(peer, socket);
    socket.once("close", () => {
      if (handshaking.get(peer) === socket) handshaking.delete(peer);
    });
    tlsServer!.emit("connection", socket);
  };
  /** Plaintext on a TLS port: one 400 with the REST error body, the rest of what it sends discarded. */
  const refusePlaintext = (socket: net.Socket) => answerAndLinger(socket, refusal(400, "protocol_error", "this port speaks TLS; use https://"));

  // noDelay: with Nagle on, an h2 response could wait ~40 ms for the client's delayed ACK.
  const server = net.createServer({ noDelay: true }, (socket) => {
    const connected = sockets.add(socket);
    const waiting = unrouted.add(socket);
    socket.once("close", () => {
      sockets.delete(connected);
      unrouted.delete(waiting);
    });
    const silent = () => socket.destroy();
    socket.setTimeout(firstBytesMs);
    socket.once("timeout", silent);
    /** From here the connection is HTTP/1.1's, HTTP/2's or TLS's: they time it out their way (HTTP/2's above). */
    const routed = () => {
      socket.off("data", onData);
      unrouted.delete(waiting);
      socket.setTimeout(0);
      socket.off("timeout", silent);
    };
    let seen = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      seen = Buffer.concat([seen, chunk]);
      if (tlsServer) {
        if (seen[0] !== tlsHandshakeRecord) {
          socket.off("data", onData);
          return refusePlaintext(socket); // still unrouted: closed by the timeout or on drain
        }
        routed();
        return toTls(socket, seen);
      }
      const n = Math.min(seen.length, h2Preface.length);
      const looksH2 = seen.subarray(0, n).equals(h2Preface.subarray(0, n));
      if (looksH2 && seen.length < h2Preface.length) return; // wait for the whole preface
      routed();
      // The sniffed bytes go back into the socket's buffer. HTTP/2 then reads the socket
      // natively (no JavaScript stream in between); it takes in what is buffered first.
      socket.pause();
      socket.unshift(seen);
      if (looksH2) {
        h2.emit("connection", socket);
      } else {
        h1.emit("connection", socket);
        socket.resume();
      }
    };
    socket.on("data", onData);
    socket.on("error", () => socket.destroy());
  });
  return {
    server,
    /** The TLS front of the port (undefined: plaintext); `setSecureContext` serves a new certificate. */
    tlsServer,
    /**
     * Stops taking new calls on every connection while the calls under way finish: no new
     * connections; idle HTTP/1.1 connections closed and busy ones closed after their answer
     * (`connection: close`); every HTTP/2 session sent GOAWAY, so clients open no new streams;
     * connections not serving yet (no first bytes, a TLS handshake under way) closed.
     * The server's "close" event follows once the last connection is gone.
     */
    closeGracefully() {
      draining = true;
      server.close();
      h1.close(); // stops the tracking timer and closes idle keep-alive connections
      h1.closeIdleConnections();
      for (const res of inFlight.values()) closeWhenDone(res);
      for (const s of sessions.values()) s.close();
      for (const s of unrouted.values()) s.destroy();
      for (const s of handshaking.values()) s.destroy();
    },
    /** Ends every remaining connection. */
    closeAll() {
      h1.closeAllConnections();
      for (const s of sessions.values()) s.destroy();
      for (const s of sockets.values()) s.destroy();
    },
  };
}

/** A connection's peer address and port: a TLS socket and the TCP socket it wraps share them. */
function peerOf(s: net.Socket): string {
  return `${s.remoteAddress}|${s.remotePort}`;
}
