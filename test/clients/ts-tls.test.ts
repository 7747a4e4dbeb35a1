import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, HubError, RunFactSync } from "../../clients/ts/src/index.js";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * The TypeScript library over TLS (`tls.ca`) and mutual TLS (`tls.cert`, `tls.key`), PEM text or
 * files, on its own transport (Connect over HTTP/2 by ALPN): served with the right files, and a
 * failed handshake is HubError tls_failed with Node's TLS code, never a transient `unavailable`.
 */

let certs: TestCerts;
let tlsHub: TestHub;
let mtlsHub: TestHub;

beforeAll(async () => {
  certs = makeCerts();
  const config = { tlsCert: certs.server.cert, tlsKey: certs.server.key, projectTokens: { p: "tok-p" }, cleanupIntervalMs: 3_600_000 };
  tlsHub = await startTestHub({ config });
  mtlsHub = await startTestHub({ config: { ...config, tlsClientCa: certs.ca.cert } });
});

afterAll(async () => {
  await tlsHub?.close();
  await mtlsHub?.close();
  certs?.remove();
});

const open = (t: TestHub, name: string, tls?: Parameters<typeof connect>[0]["tls"]) =>
  connect({ url: t.baseUrl, token: "tok-p", project: "p", name, heartbeatMs: 60_000, clock: t.clock, ...(tls && { tls }) });

/** The HubError a promise rejects with. */
const refusal = (p: Promise<unknown>) =>
  p.then(
    () => expect.unreachable("expected a refusal"),
    (e: unknown) => {
      expect(e).toBeInstanceOf(HubError);
      return e as HubError;
    },
  );

describe("TypeScript library over TLS", () => {
  it("holds a lease on an https hub whose CA it is given as PEM text; run facts sync with the CA as a file", async () => {
    const s = await open(tlsHub, "tls-keeper", { ca: certs.ca.certPem });
    await s.withLease("repo/tls", async ({ token }) => expect(token).toBe(1n), { ttlMs: 10_000 });
    expect((await s.presence.listAgents({})).agents.map((a) => a.name)).toContain("tls-keeper");
    await s.close();

    const sync = new RunFactSync({ url: tlsHub.baseUrl, token: "tok-p", project: "p", runtimeId: "rtm_runtime0001", tls: { ca: certs.ca.cert } });
    expect(await sync.cursor("prj_project0001", "run_unknown01")).toBe(0n);
    sync.close();
  });

  it("without the CA the handshake fails: tls_failed, not transient, with Node's code", async () => {
    const e = await refusal(open(tlsHub, "untrusting"));
    expect([e.code, e.transient, e.metadata.tlsCode]).toEqual(["tls_failed", false, "UNABLE_TO_VERIFY_LEAF_SIGNATURE"]);
    // Node's own text follows (Node 24 adds a hint about --use-system-ca).
    expect(e.message).toMatch(/^TLS with the hub failed: UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate/);
  });

  it("a TLS file it cannot read, or half a client pair, is invalid_tls_config naming it", async () => {
    const missing = path.join(certs.dir, "missing.pem");
    const e = await refusal(open(tlsHub, "unread", { ca: missing }));
    expect([e.code, e.message]).toEqual(["invalid_tls_config", `cannot read tls.ca ${missing}: ENOENT`]);
    expect((await refusal(open(tlsHub, "half", { ca: certs.ca.cert, cert: certs.client.cert }))).message).toContain("tls.cert needs tls.key");
  });
});

describe("TypeScript library over mutual TLS", () => {
  it("is served with the client certificate its CA signed (files), and refused without one", async () => {
    const s = await open(mtlsHub, "mtls-keeper", { ca: certs.ca.cert, cert: certs.client.cert, key: certs.client.key });
    const held = await s.acquire("repo/mtls", { ttlMs: 10_000 });
    expect(held.token).toBe(1n);
    await s.close();

    const e = await refusal(open(mtlsHub, "no-certificate", { ca: certs.ca.certPem }));
    expect([e.code, e.metadata.tlsCode]).toEqual(["tls_failed", "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED"]);
    expect(e.message).toContain("certificate required");

    // Another CA's certificate: the hub closes the connection after the handshake, without an
    // alert; the session's own handshake tells it from a hub that is down.
    const stranger = await refusal(open(mtlsHub, "stranger", { ca: certs.ca.cert, cert: certs.strangerClient.cert, key: certs.strangerClient.key }));
    expect([stranger.code, stranger.metadata.tlsCode]).toEqual(["tls_failed", "ECONNRESET"]);
  });
});
