import { raw } from "../fixtures/wire.js";
import http2 from "node:http2";
import https from "node:https";
import net from "node:net";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDualServer, remoteAddressOf, type RawRefusal } from "../../src/http/listen.js";
import { loadTlsMaterial, tlsServerOptions } from "../../src/http/tls.js";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import { eventually, trusting, type ClientTls } from "./tls.helpers.js";

/**
 * createDualServer with TLS, on its own: ALPN routes to HTTP/1.1 or HTTP/2 with the socket facts
 * requests are read by (remote address and port, encrypted); plaintext is refused; connections
 * that send nothing, or stop mid-handshake, neither pile up nor hold a graceful close.
 */

let certs: TestCerts;
beforeAll(() => {
  certs = makeCerts();
});
afterAll(() => certs?.remove());

const refusal: RawRefusal = (status, code, message) => {
  const body = JSON.stringify({ error: message, code });
  return `HTTP/1.1 ${status} Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`;
};

/** A dual server whose handler echoes what it knows of the connection. */
async function serve(options: Parameters<typeof createDualServer>[2] = {}) {
  let handled = 0;
  const dual = createDualServer((req, res) => {
    handled++;
    const socket = req.socket as { remotePort?: number; encrypted?: boolean; alpnProtocol?: string | false };
    res.setHeader("content-type", "application/json");
    res.end(
      JSON.stringify({
        remoteAddress: remoteAddressOf(req),
        remotePort: socket.remotePort,
        encrypted: socket.encrypted === true,
        alpn: socket.alpnProtocol ?? null,
        httpVersion: req.httpVersion,
      }),
    );
  }, refusal, options);
  await new Promise<void>((r) => dual.server.listen(0, "127.0.0.1", r));
  const { port } = dual.server.address() as net.AddressInfo;
  return { dual, port, handled: () => handled };
}

const tlsOf = (c: TestCerts) => ({ tls: tlsServerOptions(loadTlsMaterial({ cert: c.server.cert, key: c.server.key })) });

/** Whether the socket gets closed by the other side within `ms`. */
function closedWithin(socket: net.Socket, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

function h1(port: number, t: ClientTls): Promise<{ body: Record<string, unknown>; localPort: number }> {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: "127.0.0.1", port, path: "/", ...t, agent: false }, (res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c.toString()));
      res.on("end", () => resolve({ body: JSON.parse(body), localPort: req.socket!.localPort! }));
    });
    req.on("error", reject);
  });
}

function h2(port: number, t: ClientTls): Promise<{ body: Record<string, unknown>; localPort: number }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, t);
    session.on("error", reject);
    const req = session.request({ ":path": "/" });
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const localPort = session.socket.localPort!;
      session.close();
      resolve({ body: JSON.parse(body), localPort });
    });
    req.on("error", reject);
  });
}

describe("a TLS port", () => {
  it("routes ALPN h2 to HTTP/2 and anything else to HTTP/1.1, with the peer's address and port", async () => {
    const { dual, port } = await serve(tlsOf(certs));
    try {
      const one = await h1(port, trusting(certs));
      expect(one.body).toEqual({ remoteAddress: "127.0.0.1", remotePort: one.localPort, encrypted: true, alpn: false, httpVersion: "1.1" });
      const two = await h2(port, trusting(certs));
      expect(two.body).toEqual({ remoteAddress: "127.0.0.1", remotePort: two.localPort, encrypted: true, alpn: "h2", httpVersion: "2.0" });
    } finally {
      dual.closeAll();
      dual.server.close();
    }
  });

  it("answers plaintext HTTP/1.1 with one 400 and closes; serves nothing", async () => {
    const { dual, port, handled } = await serve(tlsOf(certs));
    try {
      const out = await raw(`http://127.0.0.1:${port}`, "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n");
      expect(out).toMatch(/^HTTP\/1\.1 400 /);
      expect(JSON.parse(out.slice(out.indexOf("\r\n\r\n") + 4))).toEqual({ error: "this port speaks TLS; use https://", code: "protocol_error" });
      // An h2c client with prior knowledge gets no HTTP/2 at all.
      const session = http2.connect(`http://127.0.0.1:${port}`);
      const failed = await new Promise<boolean>((resolve) => {
        session.on("error", () => resolve(true));
        const req = session.request({ ":path": "/" });
        req.on("error", () => resolve(true));
        req.on("response", () => resolve(false));
      });
      session.destroy();
      expect(failed).toBe(true);
      expect(handled()).toBe(0);
    } finally {
      dual.closeAll();
      dual.server.close();
    }
  });

  it("answers a TLS connection's malformed request once, however much more it sends", async () => {
    const { dual, port } = await serve(tlsOf(certs));
    try {
      const client = tls.connect({ host: "127.0.0.1", port, ...trusting(certs), ALPNProtocols: ["http/1.1"] });
      let text = "";
      client.on("data", (c: Buffer) => (text += c.toString()));
      const closed = new Promise<void>((r) => client.once("close", () => r()));
      await new Promise<void>((r) => client.once("secureConnect", () => r()));
      // Each chunk after the refusal reached the parser again: before, each got a refusal of its
      // own, and four more listeners on the socket.
      for (let i = 0; i < 12; i++) {
        client.write("NOT HTTP AT ALL\r\n\r\n");
        await new Promise((r) => setImmediate(r));
      }
      client.end(); // everything the hub wrote before it read the end arrives before the close
      await closed;
      expect(text.split("HTTP/1.1 400").length - 1).toBe(1);
      expect(text).toContain('"code":"protocol_error"');
    } finally {
      dual.closeAll();
      dual.server.close();
    }
  });

  it("drops a handshake that stops half-way after the handshake timeout", async () => {
    const material = loadTlsMaterial({ cert: certs.server.cert, key: certs.server.key });
    const { dual, port } = await serve({ tls: { ...tlsServerOptions(material), handshakeTimeout: 200 } });
    try {
      const s = net.connect(port, "127.0.0.1", () => s.write(Buffer.from([0x16, 0x03, 0x01, 0x00])));
      s.on("error", () => undefined);
      expect(await closedWithin(s, 3_000)).toBe(true);
    } finally {
      dual.closeAll();
      dual.server.close();
    }
  });
});

describe.each([
  // Half-open: the start of an h2c preface (not routed yet), the start of a ClientHello.
  ["plaintext", () => ({}), Buffer.from("PRI * HTTP/2")],
  ["TLS", () => tlsOf(certs), Buffer.from([0x16, 0x03, 0x01])],
] as const)("a %s port", (_name, options, partialBytes) => {
  it("closes a connection that sends nothing after the first-bytes timeout", async () => {
    const { dual, port } = await serve({ ...options(), firstBytesTimeoutMs: 200 });
    try {
      const s = net.connect(port, "127.0.0.1");
      s.on("error", () => undefined);
      expect(await closedWithin(s, 3_000)).toBe(true);
      await eventually(async () => (await new Promise<number>((r) => dual.server.getConnections((_e, n) => r(n)))) === 0, "no connection left");
    } finally {
      dual.closeAll();
      dual.server.close();
    }
  });

  it("closes gracefully at once with silent and half-open connections", async () => {
    const { dual, port } = await serve(options());
    const silent = net.connect(port, "127.0.0.1");
    const partial = net.connect(port, "127.0.0.1", () => partial.write(partialBytes));
    for (const s of [silent, partial]) s.on("error", () => undefined);
    await eventually(async () => (await new Promise<number>((r) => dual.server.getConnections((_e, n) => r(n)))) === 2, "both connected");
    await new Promise((r) => setTimeout(r, 50)); // the partial bytes are on their way
    const started = Date.now();
    const closed = new Promise<void>((r) => dual.server.once("close", () => r()));
    dual.closeGracefully();
    await closed;
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});
