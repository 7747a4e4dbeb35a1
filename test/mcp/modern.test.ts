import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { mcpAgent, tokenOf, type ToolResult } from "../fixtures/mcp.js";

/**
 * The MCP face in protocol 2026-07-28 (stateless: no initialize, no session) through the official
 * TypeScript client pinned to it: each client is one agent, named by the headers it sends on every
 * request; the tools are the hub's RPCs as that agent, as in a 2025-era session.
 */

type Result = ToolResult;

/** A 2026-07-28 client as `name` (its X-Kxm-Agent header), or with name undefined, one that names no agent. */
async function agent(t: TestHub, name: string | undefined, o: { project?: string; token?: string } = {}) {
  const a = await mcpAgent(t, name, { ...o, era: "modern" });
  expect(a.client.getProtocolEra()).toBe("modern");
  return a;
}

/** The hub's open-streams gauge, by kind (subscribe, watch_presence, watch_leases). */
async function openStreams(t: TestHub): Promise<Record<string, number>> {
  const text = await (await fetch(`${t.baseUrl}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^kxm_open_streams\{kind="([a-z_]+)"\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}


describe("MCP face, protocol 2026-07-28 (official TypeScript client pinned to it)", () => {
  it("lists the tools, opens no session, and lands a negotiating client on 2026-07-28", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const { tools } = await a.client.listTools();
    expect(tools.map((x) => x.name)).toEqual(expect.arrayContaining(["acquire_lease", "read_inbox", "send_message", "whoami", "register"]));
    expect(tools.find((x) => x.name === "acquire_lease")!.inputSchema).toMatchObject({ type: "object", required: ["name"] });
    expect((await a.call("whoami")).structuredContent?.agent).toMatchObject({ name: "alpha", project: "p" });
    expect(a.transport.sessionId).toBeUndefined();

    // A client that negotiates ('auto') gets the newest version; one that does not (the default) the 2025 handshake.
    const auto = new Client({ name: "auto", version: "1" }, { versionNegotiation: { mode: "auto" } });
    await auto.connect(new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/mcp`), { requestInit: { headers: { "x-kxm-project": "p", "x-kxm-agent": "gamma" } } }));
    expect(auto.getProtocolEra()).toBe("modern");
    expect(((await auto.callTool({ name: "whoami", arguments: {} })) as Result).structuredContent?.agent).toMatchObject({ name: "gamma" });
    const legacyTransport = new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/mcp`), { requestInit: { headers: { "x-kxm-project": "p", "x-kxm-agent": "delta" } } });
    const legacy = new Client({ name: "legacy", version: "1" });
    await legacy.connect(legacyTransport);
    expect(legacy.getProtocolEra()).toBe("legacy");
    expect(legacyTransport.sessionId).toBeDefined();
    await legacyTransport.terminateSession();
    await Promise.all([a.client.close(), auto.close(), legacy.close()]);
  });

  it("hands a lease from one agent to a waiting other on a higher token, and refuses the stale token", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    const first = await a.call("acquire_lease", { name: "repo/main", ttl_ms: 30_000 });
    expect(first.isError).toBeFalsy();
    expect(await b.call("acquire_lease", { name: "repo/main" })).toMatchObject({ isError: true, structuredContent: { code: "lease_held", lease: { holderAgentName: "alpha" } } });

    const waiting = b.call("acquire_lease", { name: "repo/main", ttl_ms: 30_000, wait_ms: 60_000 });
    for (let i = 0; i < 200 && ((await a.call("get_lease", { name: "repo/main" })).structuredContent?.lease?.waiters ?? []).length === 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect((await a.call("release_lease", { name: "repo/main", fencing_token: tokenOf(first) })).isError).toBeFalsy();
    const granted = await waiting;
    expect(granted.structuredContent?.lease).toMatchObject({ holderAgentName: "beta" });
    expect(tokenOf(granted)).toBe(tokenOf(first) + 1);
    expect(await a.call("renew_lease", { name: "repo/main", fencing_token: tokenOf(first) })).toMatchObject({ isError: true, structuredContent: { code: "lease_superseded" } });

    // Each tool call is a call like any other: counted by face, service, method and outcome.
    const metrics = await (await fetch(`${t.baseUrl}/metrics`)).text();
    expect(metrics).toMatch(/kxm_rpc_requests_total\{face="mcp",service="kxm\.hub\.v1\.LeaseService",method="AcquireLease",code="ok"\} 2/);
    await Promise.all([a.client.close(), b.client.close()]);
  });

  it("waits for mail in read_inbox, and carries the acknowledgement and the reply", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    const sleepers = t.clock.sleepers;
    const waiting = b.call("read_inbox", { wait_ms: 30_000 });
    for (let i = 0; i < 300 && t.clock.sleepers === sleepers; i++) await new Promise((r) => setTimeout(r, 10));
    expect(t.clock.sleepers).toBeGreaterThan(sleepers);
    const sent = (await a.call("send_message", { target: "beta", content: "standup at 10" })).structuredContent!.message;
    const got = (await waiting).structuredContent!;
    expect(got.events).toHaveLength(1);
    expect(got.events[0].message).toMatchObject({ id: sent.id, content: "standup at 10" });

    expect((await b.call("ack_message", { message_id: sent.id })).structuredContent?.message).toMatchObject({ status: "delivered" });
    expect((await b.call("read_inbox")).structuredContent!.events).toEqual([]);
    expect((await b.call("reply_message", { message_id: sent.id, content: "see you there" })).isError).toBeFalsy();
    const read = await a.call("get_message", { message_id: sent.id });
    expect(read.structuredContent?.message).toMatchObject({ status: "replied", reply: { content: "see you there" } });
    await Promise.all([a.client.close(), b.client.close()]);
  });

  it("refuses a wrong token with 401, keeps projects apart, and answers a clear error to a client that names no agent", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p", q: "tok-q" } } });
    for (const name of ["mallory", undefined]) {
      const refused = await agent(t, name, { token: "nope" }).then(
        () => undefined,
        (e: unknown) => e as { data?: { status?: number } },
      );
      expect(refused?.data?.status, String(name)).toBe(401);
    }
    // The refusal is the hub's, before the SDK: a JSON-RPC error body and a Bearer challenge.
    const raw = await fetch(`${t.baseUrl}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "x-kxm-project": "p", "x-kxm-agent": "mallory", authorization: "Bearer nope", "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": { name: "raw", version: "0" } } } }),
    });
    expect(raw.status).toBe(401);
    expect(raw.headers.get("www-authenticate")).toBe("Bearer");
    expect(await raw.json()).toMatchObject({ jsonrpc: "2.0", error: { data: { code: "invalid_auth" } } });

    const a = await agent(t, "alpha", { token: "tok-p" });
    const q = await agent(t, "quentin", { project: "q", token: "tok-q" });
    await a.call("acquire_lease", { name: "repo/main" });
    expect((await q.call("get_lease", { name: "repo/main" })).structuredContent).toMatchObject({ code: "lease_not_found" });
    expect(((await q.call("list_agents", { include_offline: true })).structuredContent?.agents as { name: string }[]).map((x) => x.name)).toEqual(["quentin"]);
    expect(await q.call("send_message", { target: "alpha", content: "hi" })).toMatchObject({ isError: true, structuredContent: { code: "target_not_found" } });

    // No X-Kxm-Agent: it lists, but every tool (register too) says what to do instead.
    const n = await agent(t, undefined, { token: "tok-p" });
    expect((await n.client.listTools()).tools.length).toBeGreaterThan(10);
    for (const [tool, args] of [["whoami", {}], ["acquire_lease", { name: "x" }], ["register", { name: "nu" }]] as const) {
      const r = await n.call(tool, args);
      expect(r, tool).toMatchObject({ isError: true, structuredContent: { code: "invalid_agent_identity" } });
      expect(r.structuredContent?.error).toMatch(/2026-07-28 has no session.*X-Kxm-Agent.*2025-era/);
    }
    expect(((await a.call("list_agents")).structuredContent?.agents as { name: string }[]).map((x) => x.name)).toEqual(["alpha"]);
    await Promise.all([a.client.close(), q.client.close(), n.client.close()]);
  });

  it("forgets a binding left idle (the next request registers again), but not before the longest lease TTL: its key may be its agent's only one to live leases", async () => {
    await using t = await startTestHub({ config: { mcpSessionIdleMs: 10_000 } });
    const a = await agent(t, "alpha");
    const held = await a.call("acquire_lease", { name: "db", ttl_ms: 600_000 });
    expect(held.isError).toBeFalsy();
    const registrations = t.counters.get("registrations") ?? 0;
    // Idle past KXM_MCP_SESSION_IDLE_MS, within the lease's TTL: kept, and the lease with it.
    t.clock.advance(15_000);
    await t.hub.sweepNow();
    expect((await a.call("renew_lease", { name: "db", fencing_token: tokenOf(held), ttl_ms: 600_000 })).isError).toBeFalsy();
    expect(t.counters.get("registrations")).toBe(registrations);
    // Idle past the longest TTL (the lease lapsed meanwhile): forgotten; the next request registers again.
    t.clock.advance(600_001);
    await t.hub.sweepNow();
    expect((await a.call("whoami")).structuredContent?.agent).toMatchObject({ name: "alpha" });
    expect(t.counters.get("registrations")).toBe(registrations + 1);
    await a.client.close();
  });

  it("registers again after another client took the agent's name over", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    expect((await a.call("whoami")).isError).toBeFalsy();
    // Another client (a 2025-era session) takes "alpha" over: the key a's binding holds no longer works.
    const transport = new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/mcp`), { requestInit: { headers: { "x-kxm-project": "p", "x-kxm-agent": "alpha" } } });
    const other = new Client({ name: "other", version: "1" });
    await other.connect(transport);
    expect((await a.call("whoami")).structuredContent?.agent).toMatchObject({ name: "alpha" });
    // A client of another face takes it over: the next call is refused, and the one after registers again.
    const taken = await t.rest("/v1/agents/register", { json: { name: "alpha", project: "p", takeover: true } });
    expect(taken.status).toBeLessThan(300);
    expect(await a.call("whoami")).toMatchObject({ isError: true, structuredContent: { code: "invalid_agent_identity" } });
    expect((await a.call("whoami")).structuredContent?.agent).toMatchObject({ name: "alpha" });
    await Promise.all([a.client.close(), other.close()]);
  });

  it("tells a listener of its project's lease changes (subscriptions/listen), never of another project's", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    const q = await agent(t, "quentin", { project: "q" });
    const sub = await b.client.listen({ resourceSubscriptions: ["kxm://leases"] });
    expect(sub.honoredFilter).toMatchObject({ resourceSubscriptions: ["kxm://leases"] });
    // Another project's lease first: had it woken b, that notification would come before the one awaited.
    await q.call("acquire_lease", { name: "q/main" });
    const told = b.updated("kxm://leases");
    await a.call("acquire_lease", { name: "repo/main" });
    await told;
    expect(b.seen).toEqual(["kxm://leases"]);
    const { contents } = await b.client.readResource({ uri: "kxm://leases" });
    expect(JSON.parse((contents[0] as { text: string }).text).leases.map((l: { name: string }) => l.name)).toEqual(["repo/main"]);
    expect((await openStreams(t)).watch_leases).toBe(1);
    await sub.close();
    expect(await sub.closed).toBe("local");
    // The listen stream's watch ends with it.
    for (let i = 0; i < 300 && (await openStreams(t)).watch_leases !== 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect((await openStreams(t)).watch_leases).toBe(0);
    // One left open: the hub's shutdown ends it (gracefully) with its watch.
    const open = await a.client.listen({ resourceSubscriptions: ["kxm://inbox", "kxm://agents"] });
    expect((await openStreams(t)).subscribe).toBe(1);
    await t.hub.close();
    expect(await open.closed).toBe("graceful");
    await Promise.all([a.client.close(), b.client.close(), q.client.close()]);
  });

  it("a request the SDK refuses or drops itself (an unknown method, a notification, a tool call naming no tool) takes nothing over", async () => {
    await using t = await startTestHub();
    const v = await t.register("victim");
    expect((await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 60_000 }, headers: v.headers })).status).toBe(200);
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": { name: "raw", version: "0" }, "io.modelcontextprotocol/clientCapabilities": {} };
    const send = (body: Record<string, unknown>, method: string) =>
      fetch(`${t.baseUrl}/mcp`, {
        method: "POST",
        headers: { accept: "application/json, text/event-stream", "content-type": "application/json", "mcp-protocol-version": "2026-07-28", "mcp-method": method, "x-kxm-project": "p", "x-kxm-agent": "victim" },
        body: JSON.stringify({ jsonrpc: "2.0", ...body }),
      });
    const unknown = await send({ id: 1, method: "bogus/method", params: { _meta: meta } }, "bogus/method");
    expect(unknown.status).toBe(404);
    await unknown.body?.cancel();
    const note = await send({ method: "notifications/progress", params: { _meta: meta, progressToken: 1, progress: 1 } }, "notifications/progress");
    expect(note.status).toBeLessThan(500);
    await note.body?.cancel();
    const nameless = await send({ id: 2, method: "tools/call", params: { _meta: meta } }, "tools/call");
    expect(nameless.status).toBeLessThan(500);
    await nameless.body?.cancel();
    // The victim's key still works, and its lease is still its own.
    expect((await t.rest(`/v1/agents/${v.id}/heartbeat`, { method: "POST", headers: v.headers })).status).toBe(200);
    expect(await (await t.rest("/v1/leases/db?project=p")).json()).toMatchObject({ lease: { holderAgentName: "victim" } });
    expect(t.events.filter((e) => e.event === "agent_taken_over")).toEqual([]);
  });

  it("a request refused before any RPC (a read of a resource the hub does not have or of no URI, a cursor or listen filter the SDK's schema refuses, ping) takes nothing over", async () => {
    await using t = await startTestHub();
    const v = await t.register("victim");
    expect((await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 60_000 }, headers: v.headers })).status).toBe(200);
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": { name: "raw", version: "0" }, "io.modelcontextprotocol/clientCapabilities": {} };
    /** One request as "victim": its status and its answer's text (the JSON-RPC error in it). */
    const send = async (method: string, params: Record<string, unknown>) => {
      const res = await fetch(`${t.baseUrl}/mcp`, {
        method: "POST",
        headers: {
          accept: "application/json, text/event-stream",
          "content-type": "application/json",
          "mcp-protocol-version": "2026-07-28",
          "mcp-method": method,
          ...(typeof params.uri === "string" && { "mcp-name": params.uri }),
          "x-kxm-project": "p",
          "x-kxm-agent": "victim",
        },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: { ...params, _meta: meta } }),
      });
      return { status: res.status, text: await res.text() };
    };
    const refusals: [string, Record<string, unknown>, number][] = [
      ["resources/read", { uri: "kxm://nope" }, -32602],
      ["resources/read", { uri: "file:///etc/passwd" }, -32602],
      ["resources/read", { uri: 5 }, -32602],
      ["resources/read", {}, -32602],
      ["tools/list", { cursor: 5 }, -32602],
      ["resources/list", { cursor: {} }, -32602],
      ["resources/templates/list", { cursor: [] }, -32602],
      ["subscriptions/listen", {}, -32602],
      ["subscriptions/listen", { notifications: { resourceSubscriptions: "kxm://leases" } }, -32602],
      ["ping", {}, -32601],
    ];
    for (const [method, params, code] of refusals) {
      const r = await send(method, params);
      const what = `${method} ${JSON.stringify(params)}: ${r.text.slice(0, 200)}`;
      expect(r.status, what).toBeLessThan(500);
      expect(r.text, what).toContain(`"code":${code}`);
      expect((await t.rest(`/v1/agents/${v.id}/heartbeat`, { method: "POST", headers: v.headers })).status, what).toBe(200);
      expect(await (await t.rest("/v1/leases/db?project=p")).json(), what).toMatchObject({ lease: { holderAgentName: "victim" } });
      expect(t.events.filter((e) => e.event === "agent_taken_over"), what).toEqual([]);
    }
    // A read of one of the hub's resources does act as the agent, taking it over.
    expect((await send("resources/read", { uri: "kxm://leases" })).text).toContain('"contents"');
    expect(t.events.filter((e) => e.event === "agent_taken_over")).toHaveLength(1);
  });

  it("a tool call whose arguments are refused (a wrong type, one the tool does not take, a required one left out, no object, an unknown tool), or a register call, takes nothing over", async () => {
    await using t = await startTestHub();
    const v = await t.register("victim");
    expect((await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 60_000 }, headers: v.headers })).status).toBe(200);
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": { name: "raw", version: "0" }, "io.modelcontextprotocol/clientCapabilities": {} };
    /** One tools/call as "victim"; its answer (the one server-sent event's JSON-RPC message). */
    const call = async (name: string, args: unknown) => {
      const res = await fetch(`${t.baseUrl}/mcp`, {
        method: "POST",
        headers: { accept: "application/json, text/event-stream", "content-type": "application/json", "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": name, "x-kxm-project": "p", "x-kxm-agent": "victim" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { _meta: meta, name, arguments: args } }),
      });
      expect(res.status).toBe(200);
      const data = (await res.text()).split("\n").find((l) => l.startsWith("data: "));
      return JSON.parse(data!.slice(6)) as { result?: ToolResult; error?: { code: number } };
    };
    const stillVictims = async () => {
      expect((await t.rest(`/v1/agents/${v.id}/heartbeat`, { method: "POST", headers: v.headers })).status).toBe(200);
      expect(await (await t.rest("/v1/leases/db?project=p")).json()).toMatchObject({ lease: { holderAgentName: "victim" } });
      expect(t.events.filter((e) => e.event === "agent_taken_over")).toEqual([]);
    };
    const toolRefusals: [string, unknown][] = [
      ["a wrong type", { name: "db", ttl_ms: "x" }],
      ["an argument the tool does not take", { name: "db", ttlMs: 60_000 }],
      ["a required argument left out", { ttl_ms: 60_000 }],
    ];
    for (const [why, args] of toolRefusals) {
      const r = await call("acquire_lease", args);
      expect(r.result, why).toMatchObject({ isError: true, structuredContent: { code: "protocol_error" } });
      await stillVictims();
    }
    // The SDK's refusals (its params schema, the face's unknown tool): invalid params, -32602.
    for (const [name, args] of [["acquire_lease", "x"], ["acquire_lease", [1]], ["whoami", null], ["whoami", 5], ["no_such_tool", {}]] as const) {
      expect((await call(name, args)).error, `${name} ${JSON.stringify(args)}`).toMatchObject({ code: -32602 });
      await stillVictims();
    }
    // register: in this era the headers register, and the call itself is refused as unbound.
    const registerCall = await call("register", { name: "victim" });
    expect(registerCall.result).toMatchObject({ isError: true, structuredContent: { code: "invalid_agent_identity" } });
    expect(registerCall.result?.structuredContent?.error).toMatch(/2026-07-28 has no session.*X-Kxm-Agent/);
    await stillVictims();
    // The same headers with arguments the tool takes do act as the agent, taking it over.
    expect((await call("whoami", {})).result?.structuredContent?.agent).toMatchObject({ name: "victim" });
    expect(t.events.filter((e) => e.event === "agent_taken_over")).toHaveLength(1);
    expect((await t.rest(`/v1/agents/${v.id}/heartbeat`, { method: "POST", headers: v.headers })).status).toBe(401);
  });
});
