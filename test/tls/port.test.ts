import { raw } from "../fixtures/wire.js";
import { execFile } from "node:child_process";
import net from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import type { TestHub } from "../fixtures/hub.js";
import { curl, eventually, httpsGet, startTlsHub, trusting } from "./tls.helpers.js";

/**
 * A hub's TLS port refuses plaintext (HTTP/1.1 gets one 400 with the REST error body, h2c gets no
 * HTTP/2) and keeps answering while hundreds of connections hold a half-sent handshake or nothing.
 */

let certs: TestCerts;
let t: TestHub;
let port: number;

beforeAll(async () => {
  certs = makeCerts();
  t = await startTlsHub(certs, { config: { cleanupIntervalMs: 3_600_000 } });
  port = Number(new URL(t.baseUrl).port);
});

afterAll(async () => {
  await t?.close();
  certs?.remove();
});

it("answers plaintext HTTP/1.1 with a 400 protocol_error naming https, and closes", async () => {
  const out = await raw(t.baseUrl, "GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n");
  const [head, body] = [out.slice(0, out.indexOf("\r\n\r\n")), out.slice(out.indexOf("\r\n\r\n") + 4)];
  expect(head).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
  expect(head).toMatch(/\r\nx-request-id: req_/);
  expect(head).toMatch(/\r\nconnection: close/);
  expect(JSON.parse(body)).toMatchObject({ code: "protocol_error", error: "this port speaks TLS; use https://" });
  expect(body).not.toContain("agents"); // /health was not served
  const logged = t.events.filter((e) => e.event === "request_error" && e.fields.face === "http");
  expect(logged.at(-1)?.fields).toMatchObject({ statusCode: 400, code: "protocol_error" });
});

it("curl over plaintext HTTP/1.1 gets the 400; with h2c prior knowledge it gets no answer", async () => {
  const plain = await curl(certs, ["--http1.1", `http://127.0.0.1:${port}/health`]);
  expect(plain.status).toBe(400);
  expect(JSON.parse(plain.body)).toMatchObject({ code: "protocol_error" });
  const h2c = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
    execFile("curl", ["-sS", "--max-time", "5", "--http2-prior-knowledge", "-w", "%{http_code}", `http://127.0.0.1:${port}/health`], (err, stdout) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout }),
    );
  });
  expect(h2c.code).not.toBe(0);
  expect(h2c.stdout).not.toContain("agents");
});

it("answers /health within 1 s while 300 connections hold half a handshake or nothing", async () => {
  const held: net.Socket[] = [];
  try {
    await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        new Promise<void>((resolve, reject) => {
          const s = net.connect(port, "127.0.0.1", () => {
            // Half of them start a ClientHello (a record header announcing 512 bytes, then 5 of them).
            if (i % 2 === 0) s.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03]));
            resolve();
          });
          s.on("error", reject);
          held.push(s);
        }),
      ),
    );
    await eventually(async () => (await new Promise<number>((r) => t.hub.server.getConnections((_e, n) => r(n)))) >= 300, "300 connections accepted");
    const started = performance.now();
    const health = await httpsGet(`${t.baseUrl}/health`, trusting(certs));
    const took = performance.now() - started;
    expect(health.status).toBe(200);
    expect(took).toBeLessThan(1_000);
    expect(held.every((s) => !s.destroyed)).toBe(true); // they were still holding
  } finally {
    for (const s of held) s.destroy();
  }
  await eventually(async () => (await new Promise<number>((r) => t.hub.server.getConnections((_e, n) => r(n)))) === 0, "the held connections gone");
});

it("stops gracefully at once, not by force, while connections hold half a handshake or nothing", async () => {
  const held = Array.from({ length: 20 }, (_, i) => {
    const s = net.connect(port, "127.0.0.1", () => {
      if (i % 2 === 0) s.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]));
    });
    s.on("error", () => undefined);
    return s;
  });
  await eventually(async () => (await new Promise<number>((r) => t.hub.server.getConnections((_e, n) => r(n)))) >= 20, "20 connections accepted");
  const started = performance.now();
  await t.close();
  expect(performance.now() - started).toBeLessThan(2_000);
  expect(t.events.find((e) => e.event === "hub_stopped")?.fields).toMatchObject({ forced: false });
  // The hub closed them (their clients see it).
  await eventually(async () => held.every((s) => s.closed), "the held connections closed by the hub");
});
