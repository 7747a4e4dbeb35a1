import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseEventKind, LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { withHeaders } from "../fixtures/clients.js";
import { makeCerts, type TestCerts } from "../fixtures/certs.js";
import type { TestHub } from "../fixtures/hub.js";
import { refusalOf } from "../fixtures/rpc.js";
import { Frames } from "../fixtures/streams.js";
import { curl, curlStream, h2Get, httpsGet, registerOverTls, startTlsHub, tlsWires, trusting } from "./tls.helpers.js";

/**
 * Every face of the one port over TLS, on HTTP/1.1 and HTTP/2 (ALPN): Connect, gRPC and gRPC-Web
 * (a unary call and a server stream each), REST with real curl, server-sent events, MCP, the
 * operator page and /health.
 */

let certs: TestCerts;
let t: TestHub;

beforeAll(async () => {
  certs = makeCerts();
  t = await startTlsHub(certs, { config: { cleanupIntervalMs: 3_600_000 } });
});

afterAll(async () => {
  await t?.close();
  certs?.remove();
});

it("listens at an https:// URL", () => {
  expect(t.baseUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
});

describe.each(tlsWires)("RPC over TLS: $name", (wire) => {
  it("a unary call and a WatchLeases stream that sees the grant", async () => {
    const client = trusting(certs);
    const name = `agent-${wire.name.replace(/\W+/g, "-")}`;
    const presence = createClient(PresenceService, wire.make(t.baseUrl, client));
    const registered = await presence.registerAgent({ name, project: "p" });
    expect(registered.agent?.name).toBe(name);
    const headers = { "x-kxm-agent-id": registered.agent!.id, "x-kxm-agent-key": registered.agentKey };
    const leases = createClient(LeaseService, wire.make(t.baseUrl, client, [withHeaders(headers)]));

    const frames = new Frames((signal) => leases.watchLeases({}, { signal }));
    try {
      expect((await frames.next()).event.case).toBe("snapshot");
      const lease = `tls/${name}`;
      const acquired = await leases.acquireLease({ name: lease, ttlMs: 60_000 });
      expect(acquired.lease?.fencingToken).toBe(1n);
      for (;;) {
        const r = await frames.next();
        if (r.event.case === "change" && r.event.value.lease?.name === lease) {
          expect(LeaseEventKind[r.event.value.kind]).toBe("GRANTED");
          break;
        }
      }
    } finally {
      frames.close();
    }
  });
});

describe.each([
  ["HTTP/1.1", "--http1.1", "1.1"],
  ["HTTP/2", "--http2", "2"],
] as const)("REST, SSE, MCP, the page and /health with curl over %s", (_name, flag, version) => {
  it("REST: register and acquire", async () => {
    const reg = await curl(certs, [flag, "-H", "content-type: application/json", "-d", JSON.stringify({ name: `rest-${version}`, project: "p" }), `${t.baseUrl}/v1/agents/register`]);
    expect([reg.status, reg.version]).toEqual([201, version]);
    const { agent, agentKey } = JSON.parse(reg.body) as { agent: { id: string }; agentKey: string };
    const acq = await curl(certs, [
      flag, "-H", "content-type: application/json", "-H", `x-kxm-agent-id: ${agent.id}`, "-H", `x-kxm-agent-key: ${agentKey}`,
      "-d", JSON.stringify({ ttlMs: 60_000 }), `${t.baseUrl}/v1/leases/rest%2F${version}/acquire`,
    ]);
    expect([acq.status, acq.version]).toEqual([200, version]);
    expect(JSON.parse(acq.body).lease).toMatchObject({ name: `rest/${version}`, fencingToken: 1 });
  });

  it("server-sent events: WatchLeases as events, a grant seen live", async () => {
    const a = await registerOverTls(t.baseUrl, trusting(certs), `sse-${version}`);
    const h = Object.entries(a.headers).flatMap(([k, v]) => ["-H", `${k}: ${v}`]);
    const events = curlStream(certs, [flag, ...h, `${t.baseUrl}/v1/watch/leases`]);
    try {
      await events.until("event: snapshot");
      const from = events.output().length;
      const acq = await curl(certs, [flag, ...h, "-H", "content-type: application/json", "-d", "{}", `${t.baseUrl}/v1/leases/sse%2F${version}/acquire`]);
      expect(acq.status).toBe(200);
      await events.until(`"name":"sse/${version}"`, from);
      expect(events.output().slice(from)).toContain("event: change");
    } finally {
      await events.stop();
    }
  });

  it("MCP: initialize answers with a JSON-RPC result", async () => {
    const init = {
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "curl", version: "1" } },
    };
    const r = await curl(certs, [
      flag, "-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream",
      "-H", "x-kxm-project: p", "-H", `x-kxm-agent: mcp-${version}`, "-d", JSON.stringify(init), `${t.baseUrl}/mcp`,
    ]);
    expect([r.status, r.version], r.body).toEqual([200, version]);
    // JSON, or one server-sent event holding it.
    const json = r.body.trimStart().startsWith("{") ? r.body : r.body.split("\n").find((l) => l.startsWith("data: "))!.slice(6);
    const answer = JSON.parse(json) as { id: number; result?: { serverInfo?: { name: string }; protocolVersion?: string } };
    expect(answer.id).toBe(1);
    expect(answer.result?.serverInfo?.name).toBeTruthy();
    expect(answer.result?.protocolVersion).toBeTruthy();
  });

  it("the operator page and /health", async () => {
    const page = await curl(certs, [flag, `${t.baseUrl}/`]);
    expect([page.status, page.version]).toEqual([200, version]);
    expect(page.body).toMatch(/<html/i);
    const health = await curl(certs, [flag, `${t.baseUrl}/health`]);
    expect([health.status, health.version]).toEqual([200, version]);
    expect(JSON.parse(health.body)).toMatchObject({ ok: true });
  });
});

it("node's own clients: https on HTTP/1.1 and http2 with ALPN h2", async () => {
  expect(await httpsGet(`${t.baseUrl}/health`, trusting(certs))).toMatchObject({ status: 200 });
  expect(await h2Get(`${t.baseUrl}/health`, trusting(certs))).toMatchObject({ status: 200 });
});

it("an expectation other than 100-continue gets the hub's protocol_error on HTTP/1.1 and HTTP/2, not Node's bare 417", async () => {
  for (const get of [httpsGet, h2Get]) {
    const r = await get(`${t.baseUrl}/health`, trusting(certs), { expect: "bogus" });
    expect(r.status).toBe(400);
    expect(JSON.parse(r.body)).toMatchObject({ code: "protocol_error", requestId: expect.any(String) });
  }
});

it("stops gracefully with TLS streams open on HTTP/2 and HTTP/1.1: they end unavailable, nothing forced", async () => {
  const a = await registerOverTls(t.baseUrl, trusting(certs), "closing");
  const streams = [tlsWires[2], tlsWires[0]].map((wire) => {
    const leases = createClient(LeaseService, wire.make(t.baseUrl, trusting(certs), [withHeaders(a.headers)]));
    return new Frames((signal) => leases.watchLeases({}, { signal }));
  });
  for (const f of streams) expect((await f.next()).event.case).toBe("snapshot");
  const closed = t.close();
  for (const f of streams) expect(refusalOf(await f.error()).code).toBe("unavailable");
  await closed;
  expect(t.events.find((e) => e.event === "hub_stopped")?.fields).toMatchObject({ forced: false });
});
