import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { mcpAgent, tokenOf, type McpAgent } from "../fixtures/mcp.js";

/**
 * The MCP face's resources (kxm://inbox, kxm://agents, kxm://leases) through the official
 * TypeScript client: a read holds what the matching tool answers; a subscription is one stream of
 * the hub, and each change it reports reaches the client as notifications/resources/updated on the
 * session's GET stream. Notifications are awaited (with a generous bound), never slept for; that
 * one did not come is shown by the order of those that did.
 */

const uris = ["kxm://inbox", "kxm://agents", "kxm://leases"] as const;

/** A session whose notification stream is open before anything else happens. */
const agent = (t: TestHub, name: string, o: { project?: string; token?: string } = {}) => mcpAgent(t, name, { ...o, listen: true });

/** A resource as the session reads it: its one JSON content. */
async function read(a: McpAgent, uri: string) {
  const { contents } = await a.client.readResource({ uri }, { cacheMode: "bypass" });
  expect(contents).toHaveLength(1);
  expect(contents[0]).toMatchObject({ uri, mimeType: "application/json" });
  return JSON.parse((contents[0] as { text: string }).text) as Record<string, unknown>;
}

/** The hub's open-streams gauge, by kind (subscribe, watch_presence, watch_leases). */
async function openStreams(t: TestHub): Promise<Record<string, number>> {
  const text = await (await fetch(`${t.baseUrl}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^kxm_open_streams\{kind="([a-z_]+)"\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}


describe("MCP resources (official TypeScript client)", () => {
  it("lists the three resources and advertises subscriptions", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    expect(a.client.getServerCapabilities()?.resources).toEqual({ subscribe: true, listChanged: false });
    const { resources } = await a.client.listResources(undefined, { cacheMode: "bypass" });
    expect(resources.map((r) => r.uri).sort()).toEqual([...uris].sort());
    for (const r of resources) {
      expect(r).toMatchObject({ mimeType: "application/json", name: expect.any(String), title: expect.any(String) });
      expect(r.description).toMatch(/subscribe/i);
    }
    await a.transport.terminateSession();
  });

  it("reads each resource as its tool answers it, and refuses an unknown URI", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    expect((await b.call("acquire_lease", { name: "repo/main", ttl_ms: 60_000 })).isError).toBeFalsy();
    const waiting = a.call("acquire_lease", { name: "repo/main", wait_ms: 60_000 });
    for (let i = 0; i < 300 && ((await b.call("get_lease", { name: "repo/main" })).structuredContent?.lease?.waiters ?? []).length === 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await b.call("send_message", { target: "alpha", content: "your turn next" });

    const inbox = await read(a, "kxm://inbox");
    expect(inbox).toEqual((await a.call("read_inbox")).structuredContent);
    expect((inbox.events as { message?: { content: string } }[]).map((e) => e.message?.content)).toEqual(["your turn next"]);
    const agents = await read(a, "kxm://agents");
    expect(agents).toEqual((await a.call("list_agents")).structuredContent);
    expect((agents.agents as { name: string }[]).map((x) => x.name).sort()).toEqual(["alpha", "beta"]);
    const leases = await read(a, "kxm://leases");
    expect(leases).toEqual((await a.call("list_leases")).structuredContent);
    expect(leases.leases).toMatchObject([{ name: "repo/main", holderAgentName: "beta", waiters: [expect.objectContaining({ agentName: "alpha" })] }]);

    // An unknown resource is a JSON-RPC error (resource not found: Invalid Params), to read and to subscribe.
    await expect(a.client.readResource({ uri: "kxm://nothing" }, { cacheMode: "bypass" })).rejects.toMatchObject({ code: -32602 });
    await expect(a.client.subscribeResource({ uri: "kxm://nothing" })).rejects.toMatchObject({ code: -32602 });

    const lease = await b.call("get_lease", { name: "repo/main" });
    await b.call("release_lease", { name: "repo/main", fencing_token: tokenOf(lease) });
    await waiting;
    await Promise.all([a.transport.terminateSession(), b.transport.terminateSession()]);
  });

  it("tells a subscriber of lease, inbox and agent changes, and of nothing it already had", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    const b = await agent(t, "beta");
    // State before the subscriptions: a lease, and mail waiting for alpha. Subscribing tells nothing of it.
    const held = await b.call("acquire_lease", { name: "deploy", ttl_ms: 60_000 });
    await b.call("send_message", { target: "alpha", content: "before you subscribed" });
    for (const uri of uris) await a.client.subscribeResource({ uri });
    // Subscribing again changes nothing: still one stream each.
    await a.client.subscribeResource({ uri: "kxm://leases" });
    expect(await openStreams(t)).toMatchObject({ watch_leases: 1, watch_presence: 1, subscribe: 1 });

    const joined = a.updated("kxm://agents");
    const c = await agent(t, "gamma");
    await joined;
    expect(a.seen, "the state at subscribe time was notified").toEqual(["kxm://agents"]);

    const leased = a.updated("kxm://leases");
    expect((await c.call("acquire_lease", { name: "repo/main" })).isError).toBeFalsy();
    await leased;

    const released = a.updated("kxm://leases");
    await b.call("release_lease", { name: "deploy", fencing_token: tokenOf(held) });
    await released;

    const mailed = a.updated("kxm://inbox");
    await b.call("send_message", { target: "alpha", content: "ping" });
    await mailed;

    // A reply to what alpha sent is in its inbox too.
    const sent = (await a.call("send_message", { target: "gamma", content: "review?" })).structuredContent!.message as { id: string };
    const replied = a.updated("kxm://inbox");
    await c.call("reply_message", { message_id: sent.id, content: "done" });
    await replied;
    const inbox = await read(a, "kxm://inbox");
    expect((inbox.events as { reply?: { reply?: { content: string } } }[]).some((e) => e.reply?.reply?.content === "done")).toBe(true);

    await Promise.all([a.transport.terminateSession(), b.transport.terminateSession(), c.transport.terminateSession()]);
  });

  it("stops telling once unsubscribed, and never tells of another project's changes", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p", q: "tok-q" } } });
    const a = await agent(t, "alpha", { token: "tok-p" });
    const b = await agent(t, "beta", { token: "tok-p" });
    const q = await agent(t, "quentin", { project: "q", token: "tok-q" });
    for (const uri of uris) await a.client.subscribeResource({ uri });

    // Another project's agent, lease and mail: nothing; then this project's mail: the inbox. Nothing came between.
    let from = a.seen.length;
    const q2 = await agent(t, "quinn", { project: "q", token: "tok-q" });
    expect((await q.call("acquire_lease", { name: "repo/main" })).isError).toBeFalsy();
    expect((await q.call("send_message", { target: "quinn", content: "psst" })).isError).toBeFalsy();
    const mailed = a.updated("kxm://inbox");
    await b.call("send_message", { target: "alpha", content: "hello" });
    await mailed;
    expect(a.seen.slice(from)).toEqual(["kxm://inbox"]);

    // Unsubscribed from the leases: a lease taken here tells nothing; the mail after it does.
    await a.client.unsubscribeResource({ uri: "kxm://leases" });
    await a.client.unsubscribeResource({ uri: "kxm://leases" }); // idempotent
    expect(await openStreams(t)).toMatchObject({ watch_leases: 0, watch_presence: 1, subscribe: 1 });
    from = a.seen.length;
    expect((await b.call("acquire_lease", { name: "repo/main" })).isError).toBeFalsy();
    const again = a.updated("kxm://inbox");
    await b.call("send_message", { target: "alpha", content: "again" });
    await again;
    expect(a.seen.slice(from)).toEqual(["kxm://inbox"]);

    // Subscribed again, it tells again.
    await a.client.subscribeResource({ uri: "kxm://leases" });
    const leased = a.updated("kxm://leases");
    expect((await b.call("acquire_lease", { name: "repo/other" })).isError).toBeFalsy();
    await leased;
    await Promise.all([a, b, q, q2].map((x) => x.transport.terminateSession()));
  });

  it("ends every stream of a session with the session: DELETE, and a takeover", async () => {
    await using t = await startTestHub();
    const a = await agent(t, "alpha");
    for (const uri of uris) await a.client.subscribeResource({ uri });
    expect(await openStreams(t)).toMatchObject({ watch_leases: 1, watch_presence: 1, subscribe: 1 });
    await a.transport.terminateSession();
    expect(await openStreams(t)).toMatchObject({ watch_leases: 0, watch_presence: 0, subscribe: 0 });
    // Each stream was one call of the MCP face, from its opening to its end.
    const metrics = await (await fetch(`${t.baseUrl}/metrics`)).text();
    expect(metrics).toMatch(/kxm_rpc_requests_total\{face="mcp",service="kxm\.hub\.v1\.LeaseService",method="WatchLeases",code="ok"\} 1/);
    expect(metrics).toMatch(/kxm_rpc_requests_total\{face="mcp",service="kxm\.hub\.v1\.PresenceService",method="WatchPresence",code="ok"\} 1/);
    expect(metrics).toMatch(/kxm_rpc_requests_total\{face="mcp",service="kxm\.hub\.v1\.PeerService",method="Subscribe",code="ok"\} 1/);

    // A client that starts again takes the agent over: the earlier session ends, and its streams with it.
    const first = await agent(t, "beta");
    for (const uri of uris) await first.client.subscribeResource({ uri });
    expect(await openStreams(t)).toMatchObject({ watch_leases: 1, watch_presence: 1, subscribe: 1 });
    const second = await agent(t, "beta");
    expect(await openStreams(t)).toMatchObject({ watch_leases: 0, watch_presence: 0, subscribe: 0 });
    await second.client.subscribeResource({ uri: "kxm://leases" });
    const leased = second.updated("kxm://leases");
    expect((await second.call("acquire_lease", { name: "repo/main" })).isError).toBeFalsy();
    await leased;
    await second.transport.terminateSession();
    expect(await openStreams(t)).toMatchObject({ watch_leases: 0, watch_presence: 0, subscribe: 0 });
    await first.client.close().catch(() => undefined);
  });
});
