import http from "node:http";
import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { mcpAgent, tokenOf } from "../fixtures/mcp.js";

/**
 * Hostile input at `/mcp`: JSON-RPC garbage and batches, huge ids, unknown methods, a wrong
 * protocol version, missing or foreign session ids, a missing Accept, an oversized body. Each is
 * a 4xx or a JSON-RPC error, never a 5xx, and leaves the store as it was.
 */

const accept = "application/json, text/event-stream";
const init = (over: Record<string, unknown> = {}) => ({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "probe", version: "0" } },
  ...over,
});

async function post(t: TestHub, body: string | object, headers: Record<string, string> = {}) {
  const res = await fetch(`${t.baseUrl}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept, "x-kxm-project": "p", "x-kxm-agent": "probe", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, text: await res.text(), session: res.headers.get("mcp-session-id") };
}

const rows = async (t: TestHub) => JSON.stringify(await t.sql("SELECT id, online, key_hash FROM agents ORDER BY id"));

describe("MCP face: hostile input", () => {
  it("refuses garbage before any session, changing nothing", async () => {
    await using t = await startTestHub();
    const before = await rows(t);
    const cases: [string, string | object, Record<string, string>][] = [
      ["not JSON", "{nope", {}],
      ["not UTF-8", Buffer.from([0x7b, 0xff, 0xfe, 0x7d]).toString("latin1"), {}],
      ["a JSON string", '"initialize"', {}],
      ["an empty batch", [], {}],
      ["a batch of garbage", [1, null, "x", {}], {}],
      ["an unknown method", { jsonrpc: "2.0", id: 1, method: "tools/destroy" }, {}],
      ["a huge id", init({ id: "9".repeat(100_000) }), { "x-kxm-project": "" }],
      ["a foreign session id", { jsonrpc: "2.0", id: 2, method: "tools/list" }, { "mcp-session-id": "00000000-0000-0000-0000-000000000000" }],
      ["initialize without the project header", init(), { "x-kxm-project": "" }],
      ["initialize with a hostile agent name", init(), { "x-kxm-agent": "a".repeat(500) }],
      ["initialize without Accept", init(), { accept: "" }],
      ["initialize as plain text", init(), { "content-type": "text/plain" }],
    ];
    for (const [what, body, headers] of cases) {
      const r = await post(t, body, headers);
      expect(r.status, `${what}: ${r.text.slice(0, 200)}`).toBeGreaterThanOrEqual(400);
      expect(r.status, what).toBeLessThan(500);
    }
    const big = await post(t, { ...init(), pad: "x".repeat(300_000) });
    expect(big.status).toBe(413);
    for (const method of ["PUT", "PATCH"]) {
      const res = await fetch(`${t.baseUrl}/mcp`, { method, body: "{}" });
      expect(res.status).toBe(405);
    }
    expect(await rows(t)).toBe(before);
  });

  it("an initialize the SDK's transport refuses (its Content-Type, its Accept) or that is no single initialize takes nothing over: the agent it names keeps its session and lease", async () => {
    await using t = await startTestHub();
    const alice = await mcpAgent(t, "alice");
    const held = await alice.call("acquire_lease", { name: "deploy", ttl_ms: 300_000 });
    expect(held.isError).toBeFalsy();
    const before = await rows(t);
    const cases: [string, string | object, Record<string, string>][] = [
      ["a media type that only starts with application/json", init(), { "content-type": "application/jsonx" }],
      ["another JSON media type", init(), { "content-type": "application/json-patch+json" }],
      ["application/json only as a parameter", init(), { "content-type": "text/plain; a=application/json" }],
      ["an Accept without text/event-stream", init(), { accept: "application/json" }],
      ["an Accept without application/json", init(), { accept: "text/event-stream" }],
      ["an initialize in a batch", [init()], {}],
      ["an initialize with another JSON-RPC version", init({ jsonrpc: "1.0" }), {}],
      ["an initialize without params", init({ params: undefined }), {}],
    ];
    for (const [what, body, headers] of cases) {
      const r = await post(t, body, { "x-kxm-agent": "alice", ...headers });
      expect(r.status, `${what}: ${r.text.slice(0, 200)}`).toBeGreaterThanOrEqual(400);
      expect(r.status, what).toBeLessThan(500);
      expect(r.session, what).toBeNull();
    }
    expect(await rows(t)).toBe(before);
    expect(t.events.filter((e) => e.event === "agent_taken_over")).toEqual([]);
    const again = await alice.call("get_lease", { name: "deploy" });
    expect(again.isError, JSON.stringify(again.structuredContent)).toBeFalsy();
    expect(tokenOf(again)).toBe(tokenOf(held));
    // The same initialize as the transport takes it does take alice over (the client that starts again).
    expect((await post(t, init(), { "x-kxm-agent": "alice", "content-type": "application/json; charset=utf-8" })).status).toBe(200);
    expect(t.events.filter((e) => e.event === "agent_taken_over")).toHaveLength(1);
  });

  it("refuses a Host that is no authority with 400 before anything is decided: the agent it names is not taken over", async () => {
    await using t = await startTestHub();
    const opened = await post(t, init(), { "x-kxm-agent": "victim" });
    expect(opened.status).toBe(200);
    const before = await rows(t);
    const { port } = new URL(t.baseUrl);
    for (const host of ["a b", "x:99999", "[::1", "%"]) {
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const body = JSON.stringify(init());
        const req = http.request(
          { host: "127.0.0.1", port, path: "/mcp", method: "POST", headers: { host, "content-type": "application/json", accept, "x-kxm-project": "p", "x-kxm-agent": "victim", "content-length": Buffer.byteLength(body) } },
          (res) => {
            let text = "";
            res.on("data", (c: Buffer) => (text += c.toString()));
            res.on("end", () => resolve({ status: res.statusCode!, body: text }));
          },
        );
        req.on("error", reject);
        req.end(body);
      });
      expect(answer.status, `${host}: ${answer.body}`).toBe(400);
      expect(JSON.parse(answer.body)).toMatchObject({ jsonrpc: "2.0", error: { data: { code: "protocol_error" } } });
    }
    // The session "victim" opened is still its own: same key, still online.
    expect(await rows(t)).toBe(before);
  });

  it("refuses what is wrong inside a session with a JSON-RPC error, never a 5xx", async () => {
    await using t = await startTestHub();
    const opened = await post(t, init());
    expect(opened.status).toBe(200);
    const session = opened.session!;
    const inSession = (body: string | object, headers: Record<string, string> = {}) => post(t, body, { "mcp-session-id": session, "mcp-protocol-version": "2025-06-18", ...headers });
    await inSession({ jsonrpc: "2.0", method: "notifications/initialized" });
    const cases: [string, string | object, Record<string, string>][] = [
      ["a second initialize", init({ id: 7 }), {}],
      ["an unknown method", { jsonrpc: "2.0", id: 3, method: "tools/destroy" }, {}],
      ["an unknown tool", { jsonrpc: "2.0", id: 4, method: "tools/call", params: { name: "rm_rf", arguments: {} } }, {}],
      ["arguments that are not an object", { jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "get_lease", arguments: [1, 2] } }, {}],
      ["a wrong protocol version", { jsonrpc: "2.0", id: 6, method: "tools/list" }, { "mcp-protocol-version": "1999-01-01" }],
      ["another token on the session", { jsonrpc: "2.0", id: 8, method: "tools/list" }, { authorization: "Bearer someone-else" }],
      ["a batch of a hundred calls", Array.from({ length: 101 }, (_, i) => ({ jsonrpc: "2.0", id: 100 + i, method: "tools/list" })), {}],
    ];
    for (const [what, body, headers] of cases) {
      const r = await inSession(body, headers);
      expect(r.status, `${what}: ${r.text.slice(0, 200)}`).toBeLessThan(500);
      if (r.status === 200) expect(r.text, what).toContain('"error"');
    }
    // A tool's own refusal is a result, not a fault.
    const refused = await inSession({ jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "get_lease", arguments: { name: "nothing" } } });
    expect(refused.text).toContain('"isError":true');
    expect(refused.text).toContain("lease_not_found");
  });

  it("charges a JSON-RPC batch one request per message in it: a budget of 5 makes 5 leases of a batch of 20, not 20", async () => {
    await using t = await startTestHub({ config: { rateLimit: { windowMs: 60_000, maxRequests: 8 } } });
    const opened = await post(t, init({ params: { protocolVersion: "2025-03-26", capabilities: {}, clientInfo: { name: "probe", version: "0" } } }));
    expect(opened.status).toBe(200);
    const h = { "mcp-session-id": opened.session!, "mcp-protocol-version": "2025-03-26" };
    expect((await post(t, { jsonrpc: "2.0", method: "notifications/initialized" }, h)).status).toBe(202);
    // initialize (the address) and the notification (the agent's) spent 1 of the agent's 8.
    const call = (i: number) => ({ jsonrpc: "2.0", id: 10 + i, method: "tools/call", params: { name: "acquire_lease", arguments: { name: `res-${i}`, ttl_ms: 60_000 } } });
    const small = await post(t, [call(0), call(1), call(2), call(3), call(4)], h);
    expect(small.status).toBe(200);
    expect(await t.sql("SELECT name FROM leases ORDER BY name")).toHaveLength(5);
    const big = await post(t, Array.from({ length: 20 }, (_, i) => call(100 + i)), h);
    expect(big.status).toBe(429);
    expect(JSON.parse(big.text)).toMatchObject({ error: { data: { code: "rate_limited" } } });
    expect(await t.sql("SELECT name FROM leases ORDER BY name")).toHaveLength(5);
  });

  it("serves a browser only for an allowed origin, and lets it send and read MCP's headers", async () => {
    await using t = await startTestHub({ config: { corsOrigins: ["https://console.example"] } });
    const before = await rows(t);
    // A page the hub does not list (a DNS-rebinding page, say) is refused before anything happens.
    const evil = await post(t, init(), { origin: "https://evil.example" });
    expect(evil.status).toBe(403);
    expect(JSON.parse(evil.text)).toMatchObject({ jsonrpc: "2.0", error: { data: { code: "protocol_error" } } });
    expect(await rows(t)).toBe(before);
    // A listed page is served, and its preflight allows the headers the transport sends and reads.
    const preflight = await fetch(`${t.baseUrl}/mcp`, {
      method: "OPTIONS",
      headers: { origin: "https://console.example", "access-control-request-method": "POST", "access-control-request-headers": "mcp-session-id, mcp-protocol-version, x-kxm-agent" },
    });
    expect(preflight.status).toBe(204);
    const allowed = (preflight.headers.get("access-control-allow-headers") ?? "").toLowerCase();
    for (const h of ["mcp-session-id", "mcp-protocol-version", "x-kxm-project", "x-kxm-agent", "authorization"]) expect(allowed).toContain(h);
    const ok = await post(t, init(), { origin: "https://console.example" });
    expect(ok.status).toBe(200);
    expect(ok.session).toBeTruthy();
  });
});
