import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { mcpAgent, tokenOf, type McpAgentOptions } from "../fixtures/mcp.js";

/**
 * The MCP face through the official TypeScript SDK's client over Streamable HTTP: each client is
 * one agent, named by its session's headers; the tools are the hub's RPCs as that agent.
 */

const agent = (t: TestHub, name: string | undefined, o: McpAgentOptions = {}) => mcpAgent(t, name, o);

describe("MCP face (official TypeScript client)", () => {
  it("lists the tools with their schemas and annotations", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const { tools } = await a.client.listTools();
    expect(tools.map((x) => x.name).sort()).toEqual(
      ["ack_message", "acquire_lease", "cancel_message", "get_lease", "get_message", "list_agents", "list_leases", "read_inbox", "release_lease", "register", "renew_lease", "reply_message", "send_message", "whoami"].sort(),
    );
    const acquire = tools.find((x) => x.name === "acquire_lease")!;
    expect(acquire.inputSchema).toMatchObject({ type: "object", required: ["name"], properties: { name: { type: "string" }, ttl_ms: { type: "integer" }, wait_ms: { type: "integer" } } });
    expect(acquire.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: false });
    expect(tools.find((x) => x.name === "get_lease")!.annotations).toMatchObject({ readOnlyHint: true });
    // No tool takes an identity: the session is the agent.
    for (const tool of tools) expect(Object.keys((tool.inputSchema as { properties?: object }).properties ?? {})).not.toContain("agent_id");
    await a.transport.terminateSession();
  });

  it("hands a lease from one agent to a waiting other on a higher token, refuses the stale token, and carries mail", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    expect((await a.call("whoami")).structuredContent?.agent).toMatchObject({ name: "alpha", project: "p" });

    const first = await a.call("acquire_lease", { name: "repo/main", ttl_ms: 30_000 });
    expect(first.isError).toBeFalsy();
    const held = await b.call("acquire_lease", { name: "repo/main" });
    expect(held).toMatchObject({ isError: true, structuredContent: { code: "lease_held", lease: { holderAgentName: "alpha" } } });

    const waiting = b.call("acquire_lease", { name: "repo/main", ttl_ms: 30_000, wait_ms: 60_000 });
    for (let i = 0; i < 200 && ((await a.call("get_lease", { name: "repo/main" })).structuredContent?.lease?.waiters ?? []).length === 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect((await a.call("release_lease", { name: "repo/main", fencing_token: tokenOf(first) })).isError).toBeFalsy();
    const granted = await waiting;
    expect(granted.structuredContent?.lease).toMatchObject({ holderAgentName: "beta" });
    expect(tokenOf(granted)).toBe(tokenOf(first) + 1);
    expect(await a.call("renew_lease", { name: "repo/main", fencing_token: tokenOf(first) })).toMatchObject({ isError: true, structuredContent: { code: "lease_superseded" } });

    // Mail: sent, read as the recipient, acknowledged and replied; the sender reads the reply.
    const sent = (await a.call("send_message", { target: "beta", content: "please review main" })).structuredContent!.message;
    const id = sent.id as string;
    expect((await b.call("ack_message", { message_id: id })).structuredContent?.message).toMatchObject({ status: "delivered" });
    expect((await b.call("reply_message", { message_id: id, content: "looks good" })).isError).toBeFalsy();
    const read = await a.call("get_message", { message_id: id });
    expect(read.structuredContent?.message).toMatchObject({ status: "replied", reply: { content: "looks good" } });
    expect(read.content[0]?.text).toContain("looks good");

    // Each tool call is a call like any other: counted by face, service, method and outcome, and logged.
    const metrics = await (await fetch(`${t.baseUrl}/metrics`)).text();
    expect(metrics).toMatch(/kxm_rpc_requests_total\{face="mcp",service="kxm\.hub\.v1\.LeaseService",method="AcquireLease",code="ok"\} 2/);
    expect(metrics).toMatch(/kxm_rpc_requests_total\{face="mcp",service="kxm\.hub\.v1\.LeaseService",method="AcquireLease",code="aborted"\} 1/);
    expect(t.events.some((e) => e.event === "request_error" || e.event === "lease_denied")).toBe(true);
    await Promise.all([a.transport.terminateSession(), b.transport.terminateSession()]);
  });

  it("waits for mail in read_inbox instead of polling, and never answers an acknowledged message again", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    // beta waits (on the hub clock) for mail that is not there yet.
    const sleepers = t.clock.sleepers;
    const waiting = b.call("read_inbox", { wait_ms: 30_000 });
    for (let i = 0; i < 300 && t.clock.sleepers === sleepers; i++) await new Promise((r) => setTimeout(r, 10));
    expect(t.clock.sleepers).toBeGreaterThan(sleepers);
    const sent = (await a.call("send_message", { target: "beta", content: "standup at 10" })).structuredContent!.message;
    const got = (await waiting).structuredContent!;
    expect(got.events).toHaveLength(1);
    expect(got.events[0].message).toMatchObject({ id: sent.id, content: "standup at 10" });

    // Read again without a cursor: still there until acknowledged; then never again.
    expect(((await b.call("read_inbox")).structuredContent!.events as unknown[]).length).toBe(1);
    await b.call("ack_message", { message_id: sent.id });
    expect((await b.call("read_inbox")).structuredContent!.events).toEqual([]);
    // Nothing new after the cursor, and a wait that runs out answers empty.
    const quiet = b.call("read_inbox", { after_cursor: got.nextCursor, wait_ms: 5_000 });
    for (let i = 0; i < 300 && t.clock.sleepers === sleepers; i++) await new Promise((r) => setTimeout(r, 10));
    t.clock.advance(5_000);
    expect((await quiet).structuredContent).toMatchObject({ events: [], nextCursor: got.nextCursor });
    // The sender reads the reply on its own inbox.
    await b.call("reply_message", { message_id: sent.id, content: "see you there" });
    const replies = (await a.call("read_inbox", { after_cursor: 0 })).structuredContent!.events as { reply?: { reply?: { content: string } } }[];
    expect(replies.map((e) => e.reply?.reply?.content)).toContain("see you there");
    await Promise.all([a.transport.terminateSession(), b.transport.terminateSession()]);
  });

  it("releases the agent's leases at once when its session ends with DELETE, and unregisters it", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    const lease = await a.call("acquire_lease", { name: "deploy", ttl_ms: 300_000 });
    await a.transport.terminateSession();
    const after = await b.call("acquire_lease", { name: "deploy" });
    expect(tokenOf(after)).toBe(tokenOf(lease) + 1);
    const agents = (await b.call("list_agents", { include_offline: true })).structuredContent?.agents as { name: string; online: boolean }[];
    expect(agents.find((x) => x.name === "alpha")?.online).toBeFalsy();
    await b.transport.terminateSession();
  });

  it("ends a session whose agent is taken over, through /mcp or outside it: its next request is refused 404, so the client starts again", async () => {
    await using t = await startTestHub();
    // Through /mcp: the new session's initialize ends the old session at once.
    const first = await agent(t, "bob");
    const second = await agent(t, "bob");
    await expect(first.call("whoami")).rejects.toThrow(/session not found/);
    expect((await second.call("whoami")).structuredContent?.agent).toMatchObject({ name: "bob" });
    // Outside /mcp (another client with takeover): the first call the old key makes is refused and
    // answered; the session ends with it, and its next request is refused 404 instead of every
    // call answering invalid_agent_identity for as long as the client keeps calling.
    const a = await agent(t, "alice");
    expect((await t.rest("/v1/agents/register", { json: { name: "alice", project: "p", takeover: true } })).status).toBe(200);
    expect(await a.call("whoami")).toMatchObject({ isError: true, structuredContent: { code: "invalid_agent_identity" } });
    await expect(a.call("whoami")).rejects.toThrow(/session not found/);
    await expect(a.call("register", { name: "alice2" })).rejects.toThrow(/session not found/);
    // A subscription opened with the old key ends the session the same way.
    const c = await agent(t, "carol");
    expect((await t.rest("/v1/agents/register", { json: { name: "carol", project: "p", takeover: true } })).status).toBe(200);
    await expect(c.client.subscribeResource({ uri: "kxm://leases" })).rejects.toThrow(/invalid agent identity/);
    await expect(c.call("whoami")).rejects.toThrow(/session not found/);
  });

  it("holds a vanished session's lease until its TTL and no longer: no hidden renewal, no hidden release", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    const held = await a.call("acquire_lease", { name: "deploy", ttl_ms: 10_000 });
    expect(held.isError).toBeFalsy();
    // The client goes without DELETE (a crash, a closed laptop): its session releases nothing.
    await a.client.close();
    expect(await b.call("acquire_lease", { name: "deploy" })).toMatchObject({ isError: true, structuredContent: { code: "lease_held", lease: { holderAgentName: "alpha" } } });
    t.clock.advance(9_999);
    expect(await b.call("acquire_lease", { name: "deploy" })).toMatchObject({ isError: true, structuredContent: { code: "lease_held" } });
    t.clock.advance(2);
    const next = await b.call("acquire_lease", { name: "deploy" });
    expect(next.structuredContent?.lease).toMatchObject({ holderAgentName: "beta" });
    expect(tokenOf(next)).toBe(tokenOf(held) + 1);
    await b.transport.terminateSession();
  });

  it("closes a session left idle, never one with a call under way", async () => {
    await using t = await startTestHub({ config: { mcpSessionIdleMs: 10_000 } });
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    const sleepers = t.clock.sleepers;
    const waiting = b.call("read_inbox", { wait_ms: 30_000 });
    for (let i = 0; i < 300 && t.clock.sleepers === sleepers; i++) await new Promise((r) => setTimeout(r, 10));
    t.clock.advance(15_000);
    await t.hub.sweepNow();
    // alpha did nothing for 15 s: its session is gone; beta's wait goes on and is answered.
    await expect(a.call("whoami")).rejects.toThrow();
    t.clock.advance(15_000);
    expect((await waiting).structuredContent).toMatchObject({ events: [] });
    expect((await b.call("whoami")).structuredContent?.agent).toMatchObject({ name: "beta" });
    await b.transport.terminateSession();
  });

  it("refuses a wrong token at initialize and keeps projects apart", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p", q: "tok-q" } } });
    const refused = await agent(t, "mallory", { token: "nope" }).then(
      () => undefined,
      (e: unknown) => e as { data?: { status?: number } },
    );
    expect(refused?.data?.status).toBe(401);
    const a = await agent(t, "alpha", { token: "tok-p" });
    const q = await agent(t, "quentin", { project: "q", token: "tok-q" });
    await a.call("acquire_lease", { name: "repo/main" });
    await a.call("send_message", { target: "alpha", content: "self" }).catch(() => undefined);
    expect((await q.call("get_lease", { name: "repo/main" })).structuredContent).toMatchObject({ code: "lease_not_found" });
    expect(((await q.call("list_agents", { include_offline: true })).structuredContent?.agents as { name: string }[]).map((x) => x.name)).toEqual(["quentin"]);
    expect(await q.call("send_message", { target: "alpha", content: "hi" })).toMatchObject({ isError: true, structuredContent: { code: "target_not_found" } });
    await Promise.all([a.transport.terminateSession(), q.transport.terminateSession()]);
  });

  it("answers bad arguments with a typed tool error and an unknown tool with a protocol error", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    expect(await a.call("acquire_lease", { name: "x", ttl_ms: "soon" })).toMatchObject({ isError: true, structuredContent: { code: "protocol_error" } });
    expect(await a.call("acquire_lease", { name: "x", agent_id: "agt_someone" })).toMatchObject({ isError: true, structuredContent: { code: "protocol_error" } });
    expect(await a.call("acquire_lease", { name: "x", ttl_ms: 1 })).toMatchObject({ isError: true, structuredContent: { code: "protocol_error" } });
    await expect(a.call("format_disk")).rejects.toThrow(/unknown tool/);
    await a.transport.terminateSession();
  });

  it("binds a session opened without X-Kxm-Agent once, with register, and never shows the agent key", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    // The token is checked at initialize all the same.
    const refused = await agent(t, undefined, { token: "nope" }).then(
      () => undefined,
      (e: unknown) => e as { data?: { status?: number } },
    );
    expect(refused?.data?.status).toBe(401);

    const alpha = await agent(t, "alpha", { token: "tok-p" });
    const u = await agent(t, undefined, { token: "tok-p" });
    // Until it registers, the session is no one: tools and resources refuse, and nothing is registered.
    expect(await u.call("whoami")).toMatchObject({ isError: true, structuredContent: { code: "invalid_agent_identity" } });
    expect(await u.call("acquire_lease", { name: "repo/main" })).toMatchObject({ isError: true, structuredContent: { code: "invalid_agent_identity" } });
    await expect(u.client.readResource({ uri: "kxm://leases" })).rejects.toThrow(/register/);
    expect(((await alpha.call("list_agents")).structuredContent?.agents as { name: string }[]).map((a) => a.name)).toEqual(["alpha"]);

    // A name held by an agent that is online is refused unless taken over; the project is the session's.
    expect(await u.call("register", { name: "alpha" })).toMatchObject({ isError: true, structuredContent: { code: "duplicate_agent_name" } });
    expect(await u.call("register", { name: "gamma", project: "q" })).toMatchObject({ isError: true, structuredContent: { code: "protocol_error" } });
    const registered = await u.call("register", { name: "gamma", purpose: "reviews" });
    expect(registered.isError).toBeFalsy();
    expect(registered.structuredContent?.agent).toMatchObject({ name: "gamma", project: "p", purpose: "reviews" });
    expect(JSON.stringify(registered)).not.toMatch(/agentKey|key_/);
    expect(JSON.stringify((await u.client.listTools()).tools.find((x) => x.name === "register")?.outputSchema)).not.toContain("agentKey");

    // From now on it acts as gamma, once and for all.
    expect((await u.call("whoami")).structuredContent?.agent).toMatchObject({ name: "gamma" });
    expect((await u.call("acquire_lease", { name: "repo/main" })).isError).toBeFalsy();
    expect(await u.call("register", { name: "delta" })).toMatchObject({ isError: true, structuredContent: { code: "protocol_error" } });
    expect(await alpha.call("register", { name: "delta" })).toMatchObject({ isError: true, structuredContent: { code: "protocol_error" } });
    expect((await alpha.call("get_lease", { name: "repo/main" })).structuredContent?.lease).toMatchObject({ holderAgentName: "gamma" });
    await Promise.all([alpha.transport.terminateSession(), u.transport.terminateSession()]);
  });
});
