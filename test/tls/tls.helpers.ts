import { execFile, spawn } from "node:child_process";
import http2 from "node:http2";
import https from "node:https";
import tls from "node:tls";
import { promisify } from "node:util";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { HubConfig } from "../../src/config.js";
import type { KeyPair, TestCerts } from "../fixtures/certs.js";
import { startTestHub, type TestHubOptions } from "../fixtures/hub.js";

/** What a TLS client trusts and, for mutual TLS, presents. */
export interface ClientTls {
  ca: string;
  cert?: string;
  key?: string;
}

export const trusting = (certs: TestCerts, as?: KeyPair): ClientTls => ({
  ca: certs.ca.certPem,
  ...(as && { cert: as.certPem, key: as.keyPem }),
});

/** The TLS settings of a hub serving `certs.server` (its files, or a copy's). */
export const tlsConfig = (certs: TestCerts, files: { cert: string; key: string } = certs.server): Partial<HubConfig> => ({
  tlsCert: files.cert,
  tlsKey: files.key,
});

/** A test hub with TLS; the fixture's REST helpers use plain fetch, so these tests bring their own clients. */
export const startTlsHub = (certs: TestCerts, options: TestHubOptions = {}) =>
  startTestHub({ ...options, config: { ...tlsConfig(certs), ...options.config } });

/** Every RPC wire over TLS: Connect (JSON on HTTP/1.1, binary on HTTP/2), gRPC, gRPC-Web on both. */
export const tlsWires = [
  { name: "connect-json (HTTP/1.1)", make: (baseUrl: string, t: ClientTls, interceptors: Interceptor[] = []): Transport => createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: false, interceptors, nodeOptions: t }) },
  { name: "connect-binary (HTTP/2)", make: (baseUrl: string, t: ClientTls, interceptors: Interceptor[] = []): Transport => createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true, interceptors, nodeOptions: t }) },
  { name: "grpc (HTTP/2)", make: (baseUrl: string, t: ClientTls, interceptors: Interceptor[] = []): Transport => createGrpcTransport({ baseUrl, interceptors, nodeOptions: t }) },
  { name: "grpc-web (HTTP/1.1)", make: (baseUrl: string, t: ClientTls, interceptors: Interceptor[] = []): Transport => createGrpcWebTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: true, interceptors, nodeOptions: t }) },
  { name: "grpc-web (HTTP/2)", make: (baseUrl: string, t: ClientTls, interceptors: Interceptor[] = []): Transport => createGrpcWebTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true, interceptors, nodeOptions: t }) },
] as const;

/** Registers an agent over Connect on HTTP/1.1 and TLS; its identity headers. */
export async function registerOverTls(baseUrl: string, t: ClientTls, name: string, project = "p") {
  const presence = createClient(PresenceService, tlsWires[0].make(baseUrl, t));
  const r = await presence.registerAgent({ name, project });
  return { id: r.agent!.id, headers: { "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey } };
}

const run = promisify(execFile);

export interface CurlAnswer {
  status: number;
  /** The HTTP version curl used: "1.1" or "2". */
  version: string;
  body: string;
}

/** `curl` against the hub with `--cacert`; `args` picks the HTTP version (--http1.1, --http2) and the request. */
export async function curl(certs: TestCerts, args: string[]): Promise<CurlAnswer> {
  const { stdout } = await run("curl", ["-sS", "--max-time", "10", "--cacert", certs.ca.cert, "-w", "\n%{http_code} %{http_version}", ...args]);
  const cut = stdout.lastIndexOf("\n");
  const [status, version] = stdout.slice(cut + 1).split(" ");
  return { status: Number(status), version: version!, body: stdout.slice(0, cut) };
}

/**
 * A server-sent events stream read by `curl -N`: `until(text)` resolves once the output holds
 * `text` (5 s at most); `stop()` ends curl.
 */
export function curlStream(certs: TestCerts, args: string[]) {
  const child = spawn("curl", ["-sS", "-N", "--cacert", certs.ca.cert, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  const waiters: (() => void)[] = [];
  child.stdout.on("data", (b: Buffer) => {
    out += b.toString();
    for (const w of [...waiters]) w();
  });
  child.stderr.on("data", (b: Buffer) => (err += b.toString()));
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
  return {
    output: () => out,
    until(text: string, from = 0): Promise<void> {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!out.includes(text, from)) return;
          done();
          resolve();
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`no ${JSON.stringify(text)} from curl within 5 s; got ${JSON.stringify(out)} ${err}`));
        }, 5_000);
        const done = () => {
          clearTimeout(timer);
          waiters.splice(waiters.indexOf(check), 1);
        };
        waiters.push(check);
        check();
      });
    },
    async stop() {
      child.kill("SIGTERM");
      await closed;
    },
  };
}

/** One GET over HTTP/1.1 and TLS on a fresh connection: status and body. */
export function httpsGet(url: string, t: ClientTls, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ...t, agent: false, headers, timeout: 5_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode!, body }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", reject);
  });
}

/** One GET over HTTP/2 and TLS on a fresh session: status and body. */
export function h2Get(url: string, t: ClientTls, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const session = http2.connect(u.origin, t);
    session.on("error", reject);
    const req = session.request({ ":path": `${u.pathname}${u.search}`, ...headers });
    let status = 0;
    let body = "";
    req.setEncoding("utf8");
    req.on("response", (h) => (status = Number(h[":status"])));
    req.on("data", (c: string) => (body += c));
    req.on("end", () => {
      session.close();
      // A session cut before any answer (a refused client certificate) ends its streams empty.
      if (status === 0) reject(new Error("the connection closed without an answer"));
      else resolve({ status, body });
    });
    session.on("close", () => reject(new Error("the connection closed without an answer")));
    req.on("error", (e) => {
      session.destroy();
      reject(e);
    });
  });
}

/** The SHA-256 fingerprint of the certificate the hub shows a new TLS connection. */
export function servedFingerprint(port: number, t: ClientTls): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: "127.0.0.1", port, ...t, servername: "localhost", ALPNProtocols: ["http/1.1"] }, () => {
      const fp = s.getPeerCertificate().fingerprint256;
      s.destroy();
      resolve(fp);
    });
    s.on("error", reject);
  });
}

export { eventually } from "../fixtures/streams.js";
