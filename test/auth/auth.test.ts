import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/ts/google/rpc/error_details_pb.js";
import { hubClients, protocols, withHeaders } from "../fixtures/clients.js";
import { jsonOf, startTestHub } from "../fixtures/hub.js";

const tokens = { projectTokens: { p: "tok-p" } };

async function agentRecord(t: Awaited<ReturnType<typeof startTestHub>>, id: string) {
  return t.hub.store.agents.getAgent(id);
}

describe("auth improvements (decisions D38-D41)", () => {
  it("D38: a good agent key with a wrong project token changes nothing", async () => {
    await using t = await startTestHub({ config: tokens });
    const a = await t.register("alpha", "p", "tok-p");
    t.clock.advance(31_000);
    await t.hub.sweepNow();
    const before = await agentRecord(t, a.id);
    expect(before?.online).toBe(false);

    t.clock.advance(1_000);
    const res = await t.rest("/v1/agents", {
      headers: { "x-kxm-agent-id": a.id, "x-kxm-agent-key": a.key, authorization: "Bearer wrong" },
    });
    expect(res.status).toBe(401);
    expect((await jsonOf(res)).code).toBe("invalid_auth");
    expect(await agentRecord(t, a.id)).toEqual(before);

    // With both credentials right, the same call revives the agent.
    const ok = await t.rest("/v1/agents", { headers: a.headers });
    expect(ok.status).toBe(200);
    expect((await agentRecord(t, a.id))?.online).toBe(true);
  });

  it("D39: unregistering rotates the key away: the old key is refused afterwards", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const del = await t.rest(`/v1/agents/${a.id}`, { method: "DELETE", headers: a.headers });
    expect(del.status).toBe(204);
    const again = await t.rest(`/v1/agents/${a.id}/heartbeat`, { method: "POST", headers: a.headers });
    expect(again.status).toBe(401);
    expect((await jsonOf(again)).code).toBe("invalid_agent_identity");
    expect((await agentRecord(t, a.id))?.online).toBe(false);
    // Registering again resumes the same agent with a new key.
    const b = await t.register("alpha");
    expect(b.id).toBe(a.id);
    expect(b.key).not.toBe(a.key);
  });

  describe("D40: rate limiting keyed by the authenticated identity", () => {
    const limited = { rateLimit: { windowMs: 60_000, maxRequests: 3 } };

    it("refuses an agent over its budget with 429, retry-after and x-ratelimit headers", async () => {
      await using t = await startTestHub({ config: limited });
      const a = await t.register("alpha"); // register is charged to the token/address, not to the agent
      for (let i = 0; i < 3; i++) {
        const res = await t.rest("/v1/agents", { headers: a.headers });
        expect(res.status).toBe(200);
        expect(res.headers.get("x-ratelimit-remaining")).toBe(String(2 - i));
      }
      const res = await t.rest("/v1/agents", { headers: a.headers });
      expect(res.status).toBe(429);
      expect((await jsonOf(res)).code).toBe("rate_limited");
      expect(res.headers.get("retry-after")).toBe("60");
      expect(res.headers.get("x-ratelimit-limit")).toBe("3");

      t.clock.advance(60_000);
      expect((await t.rest("/v1/agents", { headers: a.headers })).status).toBe(200);
    });

    it("leaves an agent as it was when its call is refused for its budget: a refused call is no activity", async () => {
      await using t = await startTestHub({ config: { rateLimit: { windowMs: 600_000, maxRequests: 2 } } });
      const a = await t.register("alpha");
      for (let i = 0; i < 2; i++) expect((await t.rest("/v1/agents", { headers: a.headers })).status).toBe(200);
      t.clock.advance(31_000); // past its stale-after: the sweep takes it offline
      await t.hub.sweepNow();
      const before = await t.hub.store.agents.getAgent(a.id);
      expect(before?.online).toBe(false);
      t.clock.advance(1_000);
      const res = await t.rest("/v1/agents", { headers: a.headers });
      expect(res.status).toBe(429);
      expect(await t.hub.store.agents.getAgent(a.id)).toEqual(before);
    });

    it("charges /metrics to the budget of its caller, refused admin tokens to the address", async () => {
      await using t = await startTestHub({ config: { authToken: "tok-admin", rateLimit: { windowMs: 600_000, maxRequests: 3 } } });
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) statuses.push((await t.rest("/metrics", { headers: { authorization: `Bearer guess-${i}` } })).status);
      expect(statuses).toEqual([401, 401, 401, 429, 429]);
      const ok = await t.rest("/metrics", { headers: { authorization: "Bearer tok-admin" } });
      expect(ok.status).toBe(200);
      expect(ok.headers.get("x-ratelimit-limit")).toBe("3");
    });

    it("charges every MCP request once to the agent it acts as, in a 2025-era session and a 2026-07-28 binding alike: a tools/list too, a tool call not twice", async () => {
      await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" }, rateLimit: { windowMs: 600_000, maxRequests: 4 } } });
      const base = { "content-type": "application/json", accept: "application/json, text/event-stream", "x-kxm-project": "p", authorization: "Bearer tok-p" };
      const post = async (headers: Record<string, string>, body: unknown) => {
        const res = await fetch(`${t.baseUrl}/mcp`, { method: "POST", headers, body: JSON.stringify(body) });
        return { status: res.status, session: res.headers.get("mcp-session-id"), text: await res.text() };
      };
      // 2025 era: initialize (charged to the address: no agent yet), then alpha's session.
      const init = await post({ ...base, "x-kxm-agent": "alpha" }, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } } });
      expect(init.status).toBe(200);
      const inSession = { ...base, "x-kxm-agent": "alpha", "mcp-session-id": init.session!, "mcp-protocol-version": "2025-06-18" };
      const session = [];
      session.push((await post(inSession, { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "whoami", arguments: {} } })).status);
      for (let i = 0; i < 4; i++) session.push((await post(inSession, { jsonrpc: "2.0", id: 3 + i, method: "tools/list", params: {} })).status);
      // alpha's budget of 4: the tool call cost one, three lists the rest.
      expect(session).toEqual([200, 200, 200, 200, 429]);

      // 2026-07-28: beta's binding (made by its first request), then lists on it.
      const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": { name: "raw", version: "0" } };
      const modern = { ...base, "x-kxm-agent": "beta", "mcp-protocol-version": "2026-07-28" };
      const bound = [];
      bound.push((await post({ ...modern, "mcp-method": "tools/call", "mcp-name": "whoami" }, { jsonrpc: "2.0", id: 1, method: "tools/call", params: { _meta: meta, name: "whoami", arguments: {} } })).status);
      for (let i = 0; i < 4; i++) bound.push((await post({ ...modern, "mcp-method": "tools/list" }, { jsonrpc: "2.0", id: 2 + i, method: "tools/list", params: { _meta: meta } })).status);
      // The first request is the address's (no binding yet; its registration is not charged again); then beta's 4.
      expect(bound).toEqual([200, 200, 200, 200, 200]);
      expect((await post({ ...modern, "mcp-method": "tools/list" }, { jsonrpc: "2.0", id: 9, method: "tools/list", params: { _meta: meta } })).status).toBe(429);
    });

    it("does not let a forged agent id spend another agent's budget", async () => {
      await using t = await startTestHub({ config: { rateLimit: { windowMs: 60_000, maxRequests: 5 } } });
      const a = await t.register("alpha");
      const b = await t.register("beta");
      // Requests claiming to be `a` with a wrong key are charged to the remote address.
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) {
        const res = await t.rest("/v1/agents", { headers: { "x-kxm-agent-id": a.id, "x-kxm-agent-key": "key_forged" } });
        statuses.push(res.status);
      }
      expect(statuses.slice(0, 3)).toEqual([401, 401, 401]);
      expect(statuses).toContain(429);
      // The real agents still have their whole budgets.
      for (const agent of [a, b]) {
        const res = await t.rest("/v1/agents", { headers: agent.headers });
        expect(res.status).toBe(200);
        expect(res.headers.get("x-ratelimit-remaining")).toBe("4");
      }
    });

    it("charges a bearer nothing checked (an open project) to the address, not to a budget of the caller's choosing", async () => {
      await using t = await startTestHub({ config: limited });
      const body = { project: "open", runtimeId: "rtm_runtime0001", events: [] };
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) statuses.push((await t.rest("/v1/sync/events", { json: body, headers: { authorization: `Bearer made-up-${i}` } })).status);
      expect(statuses).toEqual([200, 200, 200, 429, 429, 429]);
    });

    it("gives a checked project token a budget of its own, apart from its address's", async () => {
      await using t = await startTestHub({ config: { ...limited, projectTokens: { p: "tok-p", q: "tok-q" } } });
      const push = (project: string, token: string) =>
        t.rest("/v1/sync/events", { json: { project, runtimeId: "rtm_runtime0001", events: [] }, headers: { authorization: `Bearer ${token}` } });
      for (let i = 0; i < 3; i++) expect((await push("p", "tok-p")).status).toBe(200);
      expect((await push("p", "tok-p")).status).toBe(429);
      expect((await push("q", "tok-q")).status).toBe(200);
    });

    it("answers RPC clients with resource_exhausted and retryAfterMs", async () => {
      await using t = await startTestHub({ config: { rateLimit: { windowMs: 10_000, maxRequests: 1 } } });
      const a = await t.register("alpha");
      const c = hubClients(protocols[2].make(t.baseUrl, [withHeaders(a.headers)]));
      await c.presence.listAgents({});
      const err = ConnectError.from(await c.presence.listAgents({}).catch((e: unknown) => e));
      expect(err.code).toBe(Code.ResourceExhausted);
      const info = err.findDetails(ErrorInfoSchema)[0];
      expect(info?.reason).toBe("RATE_LIMITED");
      expect(info?.metadata.retryAfterMs).toBe("10000");
    });
  });

  describe("D41: transport leniency", () => {
    it("accepts a body-less heartbeat without a content type", async () => {
      await using t = await startTestHub();
      const a = await t.register("alpha");
      const res = await t.rest(`/v1/agents/${a.id}/heartbeat`, { method: "POST", headers: a.headers });
      expect(res.status).toBe(200);
      expect((await jsonOf(res)).agent.id).toBe(a.id);
    });

    it("answers a malformed percent-escape with 400, not 500", async () => {
      await using t = await startTestHub();
      const a = await t.register("alpha");
      const res = await t.rest("/v1/leases/%E0%A4%A/acquire", { method: "POST", headers: a.headers });
      expect(res.status).toBe(400);
      expect((await jsonOf(res)).code).toBe("protocol_error");
    });
  });

  it("trusts loopback callers as admin only while no admin token is configured", async () => {
    {
      await using t = await startTestHub();
      expect((await t.rest("/metrics")).status).toBe(200);
    }
    await using t = await startTestHub({ config: { authToken: "admin" } });
    const refused = await t.rest("/metrics");
    expect(refused.status).toBe(401);
    expect((await jsonOf(refused)).code).toBe("invalid_auth");
    expect((await t.rest("/metrics", { headers: { authorization: "Bearer admin" } })).status).toBe(200);
  });
});
