import fs from "node:fs";
import http2 from "node:http2";
import https from "node:https";
import { afterAll, beforeAll, expect, it } from "vitest";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import { eventually, servedFingerprint, startTlsHub, tlsConfig, trusting } from "./tls.helpers.js";

/**
 * The certificate and key files are watched: new connections get a new pair written over them
 * (no restart), connections opened before stay usable, and a pair that does not hold together
 * (the certificate written, its key not yet) keeps the old one until it does.
 */

let certs: TestCerts;
beforeAll(() => {
  certs = makeCerts();
});
afterAll(() => certs?.remove());

const intervalMs = 50;

/** One GET /health on an open HTTP/2 session. */
function h2Health(session: http2.ClientHttp2Session): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ":path": "/health" });
    let status = 0;
    req.on("response", (h) => (status = Number(h[":status"])));
    req.on("data", () => undefined);
    req.on("end", () => resolve(status));
    req.on("error", reject);
  });
}

/** One GET /health through a keep-alive agent; the fingerprint of the certificate its connection got. */
function h1Health(agent: https.Agent, url: string): Promise<{ status: number; fingerprint: string; reused: boolean }> {
  return new Promise((resolve, reject) => {
    const req = https.get(`${url}/health`, { agent, ...trusting(certs) }, (res) => {
      res.resume();
      res.on("end", () => {
        const socket = req.socket as import("node:tls").TLSSocket;
        resolve({ status: res.statusCode!, fingerprint: socket.getPeerCertificate().fingerprint256, reused: req.reusedSocket });
      });
    });
    req.on("error", reject);
  });
}

it("serves a pair written over the files to new connections within seconds (default polling); open ones keep working", async () => {
  const files = certs.copyPair();
  await using t = await startTlsHub(certs, { config: tlsConfig(certs, files) });
  const port = Number(new URL(t.baseUrl).port);
  expect(await servedFingerprint(port, trusting(certs))).toBe(certs.server.fingerprint256);

  // Connections opened before the change: an HTTP/2 session and a keep-alive HTTP/1.1 one.
  const session = http2.connect(t.baseUrl, trusting(certs));
  session.on("error", () => undefined);
  expect(await h2Health(session)).toBe(200);
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
  expect(await h1Health(agent, t.baseUrl)).toMatchObject({ status: 200, fingerprint: certs.server.fingerprint256 });

  try {
    fs.writeFileSync(files.key, certs.server2.keyPem);
    fs.writeFileSync(files.cert, certs.server2.certPem);
    await eventually(async () => (await servedFingerprint(port, trusting(certs))) === certs.server2.fingerprint256, "the new certificate served");
    expect(t.events.filter((e) => e.event === "tls_reloaded").at(-1)?.fields).toMatchObject({ fingerprint256: certs.server2.fingerprint256, clientCa: false });

    // The old connections were not dropped.
    expect(await h2Health(session)).toBe(200);
    expect(await h1Health(agent, t.baseUrl)).toEqual({ status: 200, fingerprint: certs.server.fingerprint256, reused: true });
  } finally {
    session.close();
    agent.destroy();
  }
});

it("keeps the old pair while the new one does not hold together, logs why, and takes it once it does", async () => {
  const files = certs.copyPair();
  await using t = await startTlsHub(certs, { config: { ...tlsConfig(certs, files), tlsReloadIntervalMs: intervalMs } });
  const port = Number(new URL(t.baseUrl).port);
  const failures = () => t.events.filter((e) => e.event === "tls_reload_failed");

  // The certificate first: it does not match the key still on disk.
  fs.writeFileSync(files.cert, certs.server2.certPem);
  await eventually(async () => failures().length > 0, "tls_reload_failed");
  const failed = failures()[0]!.fields;
  expect(failed.reason).toContain("is not the private key of the certificate");
  expect(failed.reason).toContain(files.key);
  expect(failed.serving).toBe(certs.server.fingerprint256);
  expect(JSON.stringify(failed)).not.toContain("PRIVATE KEY"); // never a secret
  expect(await servedFingerprint(port, trusting(certs))).toBe(certs.server.fingerprint256);

  // A key that is no key: still the old pair.
  const before = failures().length;
  fs.writeFileSync(files.key, "not a key\n");
  await eventually(async () => failures().length > before, "a second tls_reload_failed");
  expect(failures().at(-1)!.fields.reason).toContain(`KXM_TLS_KEY ${files.key} holds no usable PEM private key`);
  expect(await servedFingerprint(port, trusting(certs))).toBe(certs.server.fingerprint256);

  // Then the right key: the new pair is served.
  fs.writeFileSync(files.key, certs.server2.keyPem);
  await eventually(async () => (await servedFingerprint(port, trusting(certs))) === certs.server2.fingerprint256, "the new certificate served");
  expect(t.events.filter((e) => e.event === "tls_reloaded")).toHaveLength(1);
});

it("stops watching the files when the hub closes", async () => {
  const files = certs.copyPair();
  const t = await startTlsHub(certs, { config: { ...tlsConfig(certs, files), tlsReloadIntervalMs: intervalMs } });
  await t.close();
  fs.writeFileSync(files.cert, certs.server2.certPem);
  fs.writeFileSync(files.key, certs.server2.keyPem);
  // Several polling intervals pass without a reload attempt (a negative check needs a wait).
  await new Promise((r) => setTimeout(r, intervalMs * 8));
  expect(t.events.filter((e) => e.event.startsWith("tls_reload"))).toEqual([]);
});
