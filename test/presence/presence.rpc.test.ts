import { describe, expect, it } from "vitest";
import { PresenceState, RuntimePresenceState } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { hubClients, protocols, withHeaders, type HubClients } from "../fixtures/clients.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { ms, refused } from "../fixtures/rpc.js";

/** PresenceService through the generated client, once per RPC protocol, on a fresh hub per test. */
describe.each(protocols)("PresenceService over $name", (protocol) => {
  const client = (t: TestHub, headers: Record<string, string> = {}): HubClients =>
    hubClients(protocol.make(t.baseUrl, [withHeaders(headers)]));

  /** Registers over RPC; returns the response and a client speaking as the agent. */
  async function register(t: TestHub, name: string, extra: { project?: string; model?: string; host?: string } = {}) {
    const r = await client(t).presence.registerAgent({ name, project: extra.project ?? "p", ...extra });
    const headers = { "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey };
    return { ...r, id: r.agent!.id, as: client(t, headers).presence };
  }

  it("registers a new agent with a key and the hub-clock presence view", async () => {
    await using t = await startTestHub();
    const r = await register(t, "alpha", { model: "gpt", host: "box-1" });
    expect(r.resumed).toBe(false);
    expect(r.id).toMatch(/^agt_[0-9a-f]{32}$/);
    expect(r.agentKey).toMatch(/^key_[0-9a-f]{32}$/);
    const a = r.agent!;
    expect(a).toMatchObject({ name: "alpha", project: "p", model: "gpt", host: "box-1", online: true, presence: PresenceState.ONLINE });
    expect(a.purpose).toBe("General-purpose agent");
    expect(ms(a.connectedAt)).toBe(t.clock.now());
    expect(ms(a.lastSeenAt)).toBe(t.clock.now());
    expect(ms(a.leaseExpiresAt)).toBe(t.clock.now() + 30_000);
  });

  it("refuses a name already online in the project, case-insensitively (DUPLICATE_AGENT_NAME)", async () => {
    await using t = await startTestHub();
    await register(t, "alpha");
    const e = await refused(client(t).presence.registerAgent({ name: "ALPHA", project: "p" }));
    expect(e).toMatchObject({ code: "already_exists", reason: "DUPLICATE_AGENT_NAME", domain: "kxm-hub" });
    // another project may use the name
    expect((await register(t, "alpha", { project: "q" })).resumed).toBe(false);
  });

  it("resumes an unregistered agent: same id, new key; the old key is refused", async () => {
    await using t = await startTestHub();
    const first = await register(t, "alpha", { model: "gpt", host: "box-1" });
    await first.as.unregisterAgent({ agentId: first.id });
    const again = await register(t, "Alpha");
    expect(again.resumed).toBe(true);
    expect(again.id).toBe(first.id);
    expect(again.agentKey).not.toBe(first.agentKey);
    expect(again.agent).toMatchObject({ name: "Alpha", online: true, presence: PresenceState.ONLINE });
    expect(again.agent!.model).toBeUndefined();
    expect(again.agent!.host).toBeUndefined();
    const e = await refused(first.as.heartbeat({ agentId: first.id }));
    expect(e).toMatchObject({ code: "unauthenticated", reason: "INVALID_AGENT_IDENTITY" });
    expect((await again.as.heartbeat({ agentId: again.id })).agent?.id).toBe(first.id);
  });

  it("unregister rotates the key away: the old key is INVALID_AGENT_IDENTITY at once", async () => {
    await using t = await startTestHub();
    const a = await register(t, "alpha");
    const b = await register(t, "beta");
    expect(await a.as.unregisterAgent({ agentId: a.id })).toBeDefined();
    const calls = [
      () => a.as.heartbeat({ agentId: a.id }),
      () => a.as.listAgents({}),
      () => a.as.unregisterAgent({ agentId: a.id }),
    ];
    for (const call of calls) {
      const e = await refused(call());
      expect(e).toMatchObject({ code: "unauthenticated", reason: "INVALID_AGENT_IDENTITY" });
      expect(e.metadata).toMatchObject({ operation: "other", nextAction: "reconnect_with_current_agent_key" });
    }
    // and it stays offline: the refused calls did not revive it
    const all = (await b.as.listAgents({ includeOffline: true })).agents;
    expect(all.find((x) => x.id === a.id)).toMatchObject({ online: false, presence: PresenceState.OFFLINE });
  });

  it("heartbeat renews lastSeenAt and the presence lease on the hub clock", async () => {
    await using t = await startTestHub();
    const a = await register(t, "alpha");
    t.clock.advance(25_000);
    const hb = (await a.as.heartbeat({ agentId: a.id })).agent!;
    expect(ms(hb.lastSeenAt)).toBe(t.clock.now());
    expect(ms(hb.leaseExpiresAt)).toBe(t.clock.now() + 30_000);
    expect(hb.presence).toBe(PresenceState.ONLINE);
    // a heartbeat for another agent's id with this key is refused
    const b = await register(t, "beta");
    expect(await refused(a.as.heartbeat({ agentId: b.id }))).toMatchObject({ reason: "INVALID_AGENT_IDENTITY" });
  });

  it("lists its project in registration order; offline agents only with includeOffline", async () => {
    await using t = await startTestHub();
    const a = await register(t, "alpha");
    const b = await register(t, "beta");
    await register(t, "gamma", { project: "other" });
    const c = await register(t, "charlie");
    await c.as.unregisterAgent({ agentId: c.id });
    expect((await a.as.listAgents({})).agents.map((x) => x.name)).toEqual(["alpha", "beta"]);
    const all = await a.as.listAgents({ includeOffline: true });
    expect(all.agents.map((x) => [x.name, x.presence])).toEqual([
      ["alpha", PresenceState.ONLINE],
      ["beta", PresenceState.ONLINE],
      ["charlie", PresenceState.OFFLINE],
    ]);
    expect(all.agents.every((x) => x.project === "p" && x.id !== "")).toBe(true);
    expect(b.id).not.toBe(a.id);
  });

  it("an idle agent reads stale after staleAfterMs and goes offline at the next sweep past it", async () => {
    await using t = await startTestHub();
    const a = await register(t, "alpha");
    const b = await register(t, "beta");
    t.clock.advance(30_000);
    await b.as.heartbeat({ agentId: b.id });
    const seen = async () => (await b.as.listAgents({ includeOffline: true })).agents.find((x) => x.id === a.id)!;
    expect(await seen()).toMatchObject({ online: true, presence: PresenceState.STALE });
    // a stale-but-not-swept agent still blocks its name
    expect(await refused(client(t).presence.registerAgent({ name: "alpha", project: "p" }))).toMatchObject({
      reason: "DUPLICATE_AGENT_NAME",
    });
    await t.hub.sweepNow(); // strict <: last seen exactly staleAfterMs ago is not swept yet
    expect((await seen()).presence).toBe(PresenceState.STALE);
    t.clock.advance(1);
    await t.hub.sweepNow();
    expect(await seen()).toMatchObject({ online: false, presence: PresenceState.OFFLINE });
    expect((await b.as.listAgents({})).agents.map((x) => x.name)).toEqual(["beta"]);
    expect(t.events.some((e) => e.event === "agent_stale" && e.fields.agentId === a.id)).toBe(true);
    // the swept name can be resumed
    expect((await register(t, "alpha")).resumed).toBe(true);
  });

  it("any authenticated call revives a swept agent", async () => {
    await using t = await startTestHub();
    const a = await register(t, "alpha");
    t.clock.advance(30_001);
    await t.hub.sweepNow();
    const listed = (await a.as.listAgents({ includeOffline: true })).agents.find((x) => x.id === a.id)!;
    expect(listed).toMatchObject({ online: true, presence: PresenceState.ONLINE });
    expect(ms(listed.lastSeenAt)).toBe(t.clock.now());
  });

  it("runtime presence: first report registers, later ones keep registeredAt and replace host", async () => {
    await using t = await startTestHub();
    const rt = client(t).presence;
    const runtimeId = "rtm_74573b9df67705d8f6596518";
    const first = (await rt.reportRuntimePresence({ project: "p", runtimeId, host: "box-1" })).presence!;
    expect(first).toMatchObject({ runtimeId, host: "box-1", presence: RuntimePresenceState.ONLINE });
    expect(ms(first.registeredAt)).toBe(t.clock.now());
    expect(ms(first.leaseExpiresAt)).toBe(t.clock.now() + 30_000);
    const registeredAt = t.clock.now();
    t.clock.advance(60_000);
    const later = (await rt.reportRuntimePresence({ project: "p", runtimeId })).presence!;
    expect(ms(later.registeredAt)).toBe(registeredAt);
    expect(ms(later.heartbeatAt)).toBe(t.clock.now());
    expect(later.host).toBeUndefined();
    expect(later.presence).toBe(RuntimePresenceState.ONLINE);
    for (const bad of ["rtm-74573b9df67705d8f6596518", "r_abcdef", "rtm_abc", `rtm_${"a".repeat(141)}`]) {
      const e = await refused(rt.reportRuntimePresence({ project: "p", runtimeId: bad }));
      expect(e, bad).toMatchObject({ code: "invalid_argument", reason: "INVALID_RUNTIME_ID" });
    }
  });

  it("a wrong or missing project token is INVALID_AUTH with operation and nextAction", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    const auth = (token: string) => ({ authorization: `Bearer ${token}` });
    for (const headers of [{}, auth("nope"), { authorization: "tok-p" }]) {
      const e = await refused(client(t, headers).presence.registerAgent({ name: "alpha", project: "p" }));
      expect(e).toMatchObject({ code: "unauthenticated", reason: "INVALID_AUTH", domain: "kxm-hub" });
      expect(e.metadata).toMatchObject({ operation: "other", nextAction: "check_project_token" });
      const r = await refused(client(t, headers).presence.reportRuntimePresence({ project: "p", runtimeId: "rtm_74573b9df677" }));
      expect(r.reason).toBe("INVALID_AUTH");
    }
    const ok = await client(t, auth("tok-p")).presence.registerAgent({ name: "alpha", project: "p" });
    const agentHeaders = { "x-kxm-agent-id": ok.agent!.id, "x-kxm-agent-key": ok.agentKey };
    // a good agent key with a bad project token is still refused
    const e = await refused(client(t, { ...agentHeaders, ...auth("nope") }).presence.listAgents({}));
    expect(e).toMatchObject({ code: "unauthenticated", reason: "INVALID_AUTH" });
    const listed = await client(t, { ...agentHeaders, ...auth("tok-p") }).presence.listAgents({});
    expect(listed.agents.map((x) => x.name)).toEqual(["alpha"]);
  });

  it("an empty name is PROTOCOL_ERROR", async () => {
    await using t = await startTestHub();
    const e = await refused(client(t).presence.registerAgent({ name: "  ", project: "p" }));
    expect(e).toMatchObject({ code: "invalid_argument", reason: "PROTOCOL_ERROR" });
    const long = await refused(client(t).presence.registerAgent({ name: "n".repeat(65), project: "p" }));
    expect(long.reason).toBe("PROTOCOL_ERROR");
  });
});
