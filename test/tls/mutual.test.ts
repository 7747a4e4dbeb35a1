import { execFile } from "node:child_process";
import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import type { TestHub } from "../fixtures/hub.js";
import { refusalOf } from "../fixtures/rpc.js";
import { withHeaders } from "../fixtures/clients.js";
import { curl, eventually, h2Get, httpsGet, servedFingerprint, startTlsHub, tlsWires, trusting } from "./tls.helpers.js";

/**
 * Mutual TLS (KXM_TLS_CLIENT_CA): a client without a certificate that CA signed is refused at the
 * handshake, on HTTP/1.1 and HTTP/2 alike; one with such a certificate is served. The certificate
 * admits the host; the bearer token still names the project.
 */

let certs: TestCerts;
let t: TestHub;
const tokens = { p: "tok-p" };

beforeAll(async () => {
  certs = makeCerts();
  t = await startTlsHub(certs, { config: { tlsClientCa: certs.ca.cert, authToken: "admin", projectTokens: tokens, cleanupIntervalMs: 3_600_000 } });
});

afterAll(async () => {
  await t?.close();
  certs?.remove();
});

describe.each([
  ["no client certificate", () => trusting(certs)],
  ["a certificate another CA signed", () => trusting(certs, certs.strangerClient)],
] as const)("%s", (_name, client) => {
  it("is refused over HTTP/1.1 and HTTP/2", async () => {
    await expect(httpsGet(`${t.baseUrl}/health`, client())).rejects.toThrow();
    await expect(h2Get(`${t.baseUrl}/health`, client())).rejects.toThrow();
    // Nothing of them is left on the hub.
    await eventually(async () => (await new Promise<number>((r) => t.hub.server.getConnections((_e, n) => r(n)))) === 0, "the refused connections gone");
  });

  it("is refused to every RPC wire", async () => {
    for (const wire of tlsWires) {
      const presence = createClient(PresenceService, wire.make(t.baseUrl, client(), [withHeaders({ authorization: `Bearer ${tokens.p}` })]));
      await expect(presence.registerAgent({ name: "x", project: "p" }), wire.name).rejects.toThrow();
    }
    // Refused by the port, not by the API: no call got through.
    expect(t.counters.get("registrations") ?? 0).toBe(0);
    expect(t.events.filter((e) => e.event === "request_error" || e.event === "request_completed")).toEqual([]);
  });
});

it("curl without a certificate is refused; with the CA's client certificate it is served", async () => {
  const refused = await new Promise<number>((resolve) =>
    execFile("curl", ["-sS", "--max-time", "5", "--cacert", certs.ca.cert, `${t.baseUrl}/health`], (err) => resolve(err ? ((err as { code?: number }).code ?? -1) : 0)),
  );
  expect(refused).not.toBe(0);
  for (const flag of ["--http1.1", "--http2"]) {
    const ok = await curl(certs, [flag, "--cert", certs.client.cert, "--key", certs.client.key, `${t.baseUrl}/health`]);
    expect([ok.status, ok.version]).toEqual([200, flag === "--http2" ? "2" : "1.1"]);
  }
});

it("the CA's client certificate is served on HTTP/1.1, HTTP/2 and every RPC wire", async () => {
  const client = trusting(certs, certs.client);
  expect(await httpsGet(`${t.baseUrl}/health`, client)).toMatchObject({ status: 200 });
  expect(await h2Get(`${t.baseUrl}/health`, client)).toMatchObject({ status: 200 });
  for (const wire of tlsWires) {
    const presence = createClient(PresenceService, wire.make(t.baseUrl, client, [withHeaders({ authorization: `Bearer ${tokens.p}` })]));
    const name = `mtls-${wire.name.replace(/\W+/g, "-")}`;
    expect((await presence.registerAgent({ name, project: "p" })).agent?.name, wire.name).toBe(name);
  }
});

it("a client certificate stands for no project: the bearer token still decides", async () => {
  const client = trusting(certs, certs.client);
  const presence = createClient(PresenceService, tlsWires[1].make(t.baseUrl, client));
  const refused = await presence.registerAgent({ name: "no-token", project: "p" }).then(
    () => undefined,
    (e: unknown) => refusalOf(e),
  );
  expect(refused?.code).toBe("unauthenticated");
  const rest = await curl(certs, ["--cert", certs.client.cert, "--key", certs.client.key, "-H", "content-type: application/json", "-d", JSON.stringify({ name: "no-token", project: "p" }), `${t.baseUrl}/v1/agents/register`]);
  expect(rest.status).toBe(401);
});

it("a reloaded certificate keeps requiring client certificates", async () => {
  const files = certs.copyPair();
  await using m = await startTlsHub(certs, {
    config: { tlsCert: files.cert, tlsKey: files.key, tlsClientCa: certs.ca.cert, tlsReloadIntervalMs: 50, cleanupIntervalMs: 3_600_000 },
  });
  const port = Number(new URL(m.baseUrl).port);
  const client = trusting(certs, certs.client);
  fs.writeFileSync(files.key, certs.server2.keyPem);
  fs.writeFileSync(files.cert, certs.server2.certPem);
  await eventually(async () => (await servedFingerprint(port, client)) === certs.server2.fingerprint256, "the new certificate served");
  expect(m.events.find((e) => e.event === "tls_reloaded")?.fields).toMatchObject({ clientCa: true });
  await expect(httpsGet(`${m.baseUrl}/health`, trusting(certs))).rejects.toThrow();
  await expect(httpsGet(`${m.baseUrl}/health`, trusting(certs, certs.strangerClient))).rejects.toThrow();
  expect(await httpsGet(`${m.baseUrl}/health`, client)).toMatchObject({ status: 200 });
});
