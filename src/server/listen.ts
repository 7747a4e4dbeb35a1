import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { Duplex } from "node:stream";

type Handler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

const h2Preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** The remote address of a request, over HTTP/1.1 or HTTP/2. */
export function remoteAddressOf(req: { socket: unknown }): string {
  return (req.socket as { remoteAddress?: string } | undefined)?.remoteAddress ?? "unknown";
}

/**
 * One plaintext port for HTTP/1.1 and HTTP/2 (h2c with prior knowledge): Node's `allowHTTP1`
 * only works with TLS, so each new connection is routed by its first bytes — the HTTP/2
 * client preface goes to the HTTP/2 server, anything else to the HTTP/1.1 server.
 */
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
    socket.end(refusal(status, "protocol_error", message));
  });
  h1.on("connect", (_req: http.IncomingMessage, socket: Duplex) => {
    socket.on("error", () => socket.destroy());
    socket.end(refusal(404, "route_not_found", "route not found"));
  });
}

export function createDualServer(handler: Handler, refusal: RawRefusal) {
  let draining = false;
  /** HTTP/1.1 answers under way: once draining, each closes its connection when it is done. */
  const inFlight = new Set<http.ServerResponse>();
  const closeWhenDone = (res: http.ServerResponse) => {
    if (!res.headersSent) res.setHeader("connection", "close");
    else res.once("finish", () => res.socket?.end());
  };
  const h1 = http.createServer((req, res) => {
    if (draining) closeWhenDone(res);
    inFlight.add(res);
    res.once("close", () => inFlight.delete(res));
    handler(req, res);
  });
  answerBareRefusals(h1, refusal);
  // h1 never listens itself (it is fed sockets), but Node starts its connection tracking —
  // which idle-connection closing and request timeouts rely on — on "listening".
  h1.emit("listening");
  const h2 = http2.createServer({}, handler);
  // HTTP/2 CONNECT would get a bare 405; the handler answers it with the REST error body.
  h2.on("connect", handler);
  const sessions = new Set<http2.Http2Session>();
  h2.on("session", (s) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
  });
  const sockets = new Set<net.Socket>();
  /** Connections that have not sent their first bytes yet (not routed to h1 or h2). */
  const unrouted = new Set<net.Socket>();
  // noDelay: with Nagle on, an h2 response could wait ~40 ms for the client's delayed ACK.
  const server = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    unrouted.add(socket);
    socket.once("close", () => {
      sockets.delete(socket);
      unrouted.delete(socket);
    });
    let seen = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      seen = Buffer.concat([seen, chunk]);
      const n = Math.min(seen.length, h2Preface.length);
      const looksH2 = seen.subarray(0, n).equals(h2Preface.subarray(0, n));
      if (looksH2 && seen.length < h2Preface.length) return; // wait for the whole preface
      socket.off("data", onData);
      unrouted.delete(socket);
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
    /**
     * Stops taking new calls on every connection while the calls under way finish: no new
     * connections; idle HTTP/1.1 connections closed and busy ones closed after their answer
     * (`connection: close`); every HTTP/2 session sent GOAWAY, so clients open no new streams.
     * The server's "close" event follows once the last connection is gone.
     */
    closeGracefully() {
      draining = true;
      server.close();
      h1.close(); // stops the tracking timer and closes idle keep-alive connections
      h1.closeIdleConnections();
      for (const res of inFlight) closeWhenDone(res);
      for (const s of sessions) s.close();
      for (const s of unrouted) s.destroy();
    },
    /** Ends every remaining connection. */
    closeAll() {
      h1.closeAllConnections();
      for (const s of sessions) s.destroy();
      for (const s of sockets) s.destroy();
    },
  };
}
