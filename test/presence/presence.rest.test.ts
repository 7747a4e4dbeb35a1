import { describe, expect, it } from "vitest";
import { defaultConfig } from "../../src/config.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { idle } from "../fixtures/streams.js";
import {
  AGENT_ID,
  AGENT_KEY,
  expectAgentIdentityRefused,
  expectAuthRefused,
  expectRestError,
  expectRestOk,
  iso,
  ISO_MS,
  ms,
  type Json,
} from "../fixtures/rest.js";

// PresenceService over the REST face: the reference hub's routes, statuses and bodies
// (reference-hub.md §2), with kxm-hub's deliberate differences (decisions D38, D39, D41).

const RUNTIME_ID = "rtm_74573b9df67705d8f6596518";

const registerRaw = (t: TestHub, body: unknown, headers: Record<string, string> = {}) =>
  t.rest("/v1/agents/register", { json: body, headers });

const listAgents = async (t: TestHub, as: AgentCreds, query = "?includeOffline=true"): Promise<Json[]> =>
  (await expectRestOk(await t.rest(`/v1/agents${query}`, { headers: as.headers }))).agents as Json[];

const heartbeat = (t: TestHub, as: AgentCreds, init: RequestInit & { json?: unknown } = {}) =>
  t.rest(`/v1/agents/${as.id}/heartbeat`, { method: "POST", ...init, headers: { ...as.headers, ...(init.headers as Record<string, string>) } });

const unregister = (t: TestHub, as: AgentCreds) => t.rest(`/v1/agents/${as.id}`, { method: "DELETE", headers: as.headers });

const agentNamed = (agents: Json[], name: string) => agents.find((a) => a.name === name);

describe("POST /v1/agents/register", () => {
  it("creates an agent: 201 with the public record, a key and resumed false", async () => {
    await using t = await startTestHub();
    const now = t.clock.now();
    const body = await expectRestOk(await registerRaw(t, { name: "alpha", project: "p" }), 201);

    expect(Object.keys(body).sort()).toEqual(["agent", "agentKey", "releasedLeases", "resumed", "takenOver"]);
    expect(body.agentKey).toMatch(AGENT_KEY);
    expect(body.resumed).toBe(false);
    expect(body.agent).toEqual({
      id: expect.stringMatching(AGENT_ID),
      name: "alpha",
      purpose: "General-purpose agent",
      project: "p",
      connectedAt: iso(now),
      lastSeenAt: iso(now),
      online: true,
      presence: "online",
      leaseExpiresAt: iso(now + 30_000),
    });
    for (const k of ["connectedAt", "lastSeenAt", "leaseExpiresAt"]) expect(body.agent[k]).toMatch(ISO_MS);
    expect(body.agent).not.toHaveProperty("model");
    expect(body.agent).not.toHaveProperty("host");
    expect(body.agent).not.toHaveProperty("key");
  });

  it("keeps purpose, model and host when given, trimmed", async () => {
    await using t = await startTestHub();
    const body = await expectRestOk(
      // The project is taken as written, never trimmed (decision D44; test/presence/project-names.test.ts).
      await registerRaw(t, { name: "  alpha  ", project: "p", purpose: " reviews ", model: " gpt ", host: " box-1 " }),
      201,
    );
    expect(body.agent).toMatchObject({ name: "alpha", project: "p", purpose: "reviews", model: "gpt", host: "box-1" });
  });

  it("treats empty and null optional strings as absent", async () => {
    await using t = await startTestHub();
    const body = await expectRestOk(
      await registerRaw(t, { name: "alpha", project: "p", purpose: "  ", model: "", host: null }),
      201,
    );
    expect(body.agent.purpose).toBe("General-purpose agent");
    expect(body.agent).not.toHaveProperty("model");
    expect(body.agent).not.toHaveProperty("host");
  });

  it("resumes an offline agent of the same name: 200, same id, new key, old key refused", async () => {
    await using t = await startTestHub();
    const first = await expectRestOk(
      await registerRaw(t, { name: "alpha", project: "p", model: "m1", host: "h1", purpose: "one" }),
      201,
    );
    const old: AgentCreds = {
      id: first.agent.id,
      key: first.agentKey,
      name: "alpha",
      project: "p",
      headers: { "x-kxm-agent-id": first.agent.id, "x-kxm-agent-key": first.agentKey },
    };
    expect((await unregister(t, old)).status).toBe(204);
    t.clock.advance(5_000);

    const resumed = await expectRestOk(await registerRaw(t, { name: "ALPHA", project: "p" }), 200);
    expect(resumed.resumed).toBe(true);
    expect(resumed.agent.id).toBe(first.agent.id);
    expect(resumed.agentKey).toMatch(AGENT_KEY);
    expect(resumed.agentKey).not.toBe(first.agentKey);
    expect(resumed.agent).toMatchObject({
      name: "ALPHA",
      purpose: "General-purpose agent",
      connectedAt: iso(t.clock.now()),
      lastSeenAt: iso(t.clock.now()),
      online: true,
      presence: "online",
    });
    // model and host are replaced, or removed when absent from the resuming request.
    expect(resumed.agent).not.toHaveProperty("model");
    expect(resumed.agent).not.toHaveProperty("host");

    await expectAgentIdentityRefused(await heartbeat(t, old));
    const fresh = { ...old, headers: { "x-kxm-agent-id": first.agent.id, "x-kxm-agent-key": resumed.agentKey } };
    expect((await heartbeat(t, fresh)).status).toBe(200);
  });

  it("refuses a case-insensitive duplicate of an online agent with 409 duplicate_agent_name", async () => {
    await using t = await startTestHub();
    await t.register("Alpha");
    await expectRestError(await registerRaw(t, { name: "aLPHA", project: "p" }), 409, "duplicate_agent_name", {
      message: "agent name already active in project: aLPHA",
    });
  });

  it("refuses the name of a stale agent until the sweep marks it offline", async () => {
    await using t = await startTestHub();
    await t.register("alpha");
    t.clock.advance(30_001);
    await expectRestError(await registerRaw(t, { name: "alpha", project: "p" }), 409, "duplicate_agent_name");
    await t.hub.sweepNow();
    const body = await expectRestOk(await registerRaw(t, { name: "alpha", project: "p" }), 200);
    expect(body.resumed).toBe(true);
  });

  it("allows the same name in another project", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha", "p");
    const b = await t.register("alpha", "q");
    expect(b.id).not.toBe(a.id);
  });

  it.each([
    { field: "name", body: { name: "", project: "p" } },
    { field: "name", body: { name: "   ", project: "p" } },
    { field: "name", body: { project: "p" } },
    { field: "name", body: { name: "x".repeat(65), project: "p" } },
    { field: "project", body: { name: "alpha", project: "" } },
    { field: "project", body: { name: "alpha" } },
    { field: "project", body: { name: "alpha", project: "p".repeat(129) } },
    { field: "purpose", body: { name: "alpha", project: "p", purpose: "x".repeat(257) } },
    { field: "model", body: { name: "alpha", project: "p", model: "x".repeat(129) } },
    { field: "host", body: { name: "alpha", project: "p", host: "x".repeat(65) } },
  ])("refuses an invalid $field with 400 protocol_error and registers nothing ($body)", async ({ field, body }) => {
    await using t = await startTestHub();
    const err = await expectRestError(await registerRaw(t, body), 400, "protocol_error");
    expect(err.error).toContain(field);
    const witness = await t.register("witness");
    expect((await listAgents(t, witness)).map((a) => a.name)).toEqual(["witness"]);
  });

  it.each([
    { name: "x".repeat(64), project: "p".repeat(128), host: "h".repeat(64), model: "m".repeat(128), purpose: "u".repeat(256) },
    { name: ` ${"x".repeat(64)} `, project: "p", host: ` ${"h".repeat(64)} ` },
  ])("accepts every field at its maximum length (trimmed before the check)", async (body) => {
    await using t = await startTestHub();
    await expectRestOk(await registerRaw(t, body), 201);
  });
});

describe("POST /v1/agents/{id}/heartbeat", () => {
  it.each([
    { how: "no body, no content type", init: { method: "POST" } },
    { how: "empty body with a JSON content type", init: { method: "POST", body: "", headers: { "content-type": "application/json" } } },
    { how: "an empty body with a non-JSON content type", init: { method: "POST", body: "", headers: { "content-type": "text/plain" } } },
    { how: "a JSON object body", init: { json: { anything: [1, 2, 3] } } },
    { how: "a body naming another agent id (the path wins)", init: { json: { agentId: "agt_other" } } },
  ])("renews the presence lease and answers 200 {agent} ($how)", async ({ init }) => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    t.clock.advance(12_345);
    const body = await expectRestOk(await heartbeat(t, a, init as RequestInit));
    expect(Object.keys(body)).toEqual(["agent"]);
    expect(body.agent).toMatchObject({
      id: a.id,
      name: "alpha",
      online: true,
      presence: "online",
      lastSeenAt: iso(t.clock.now()),
      leaseExpiresAt: iso(t.clock.now() + 30_000),
    });
  });

  it("refuses a path id that the key does not belong to with 401 invalid_agent_identity", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    await expectAgentIdentityRefused(await t.rest(`/v1/agents/${b.id}/heartbeat`, { method: "POST", headers: a.headers }));
    await expectAgentIdentityRefused(await t.rest(`/v1/agents/agt_unknown/heartbeat`, { method: "POST", headers: a.headers }));
  });

  it.each([
    { how: "no key", headers: (a: AgentCreds) => ({ "x-kxm-agent-id": a.id }) },
    { how: "an empty key", headers: (a: AgentCreds) => ({ "x-kxm-agent-id": a.id, "x-kxm-agent-key": "" }) },
    { how: "a wrong key", headers: (a: AgentCreds) => ({ "x-kxm-agent-id": a.id, "x-kxm-agent-key": `key_${"0".repeat(32)}` }) },
  ])("refuses $how with 401 invalid_agent_identity and does not renew the lease", async ({ headers }) => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const registeredAt = t.clock.now();
    t.clock.advance(5_000);
    await expectAgentIdentityRefused(await t.rest(`/v1/agents/${a.id}/heartbeat`, { method: "POST", headers: headers(a) }));
    const b = await t.register("beta");
    expect(agentNamed(await listAgents(t, b), "alpha")?.lastSeenAt).toBe(iso(registeredAt));
  });
});

describe("DELETE /v1/agents/{id}", () => {
  it("answers 204 with an empty body; the agent is listed only with includeOffline=true", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    t.clock.advance(2_000);
    const res = await unregister(t, a);
    expect(res.status).toBe(204);
    expect(await res.text()).toBe("");
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("content-type")).toBeNull();

    expect((await listAgents(t, b, "")).map((x) => x.name)).toEqual(["beta"]);
    expect((await listAgents(t, b, "?includeOffline=1")).map((x) => x.name)).toEqual(["beta"]);
    expect((await listAgents(t, b, "?includeOffline=TRUE")).map((x) => x.name)).toEqual(["beta"]);
    const all = await listAgents(t, b, "?includeOffline=true");
    expect(all.map((x) => x.name)).toEqual(["alpha", "beta"]);
    expect(agentNamed(all, "alpha")).toMatchObject({ online: false, presence: "offline", lastSeenAt: iso(t.clock.now()) });
  });

  it("rotates the key away: the old key is refused afterwards and does not revive the agent", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    expect((await unregister(t, a)).status).toBe(204);
    await expectAgentIdentityRefused(await heartbeat(t, a));
    await expectAgentIdentityRefused(await unregister(t, a));
    await expectAgentIdentityRefused(await t.rest("/v1/agents", { headers: a.headers }));
    expect(agentNamed(await listAgents(t, b), "alpha")).toMatchObject({ online: false, presence: "offline" });
  });

  it("refuses another agent's id with 401 invalid_agent_identity and leaves that agent online", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    await expectAgentIdentityRefused(await t.rest(`/v1/agents/${b.id}`, { method: "DELETE", headers: a.headers }));
    expect(agentNamed(await listAgents(t, a), "beta")).toMatchObject({ online: true });
  });
});

describe("GET /v1/agents", () => {
  it("lists the caller's project in registration order and hides other projects", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha", "p");
    await t.register("zed", "q");
    await t.register("beta", "p");
    await t.register("other", "q");
    const agents = await listAgents(t, a, "");
    expect(agents.map((x) => x.name)).toEqual(["alpha", "beta"]);
    for (const x of agents) {
      expect(x.project).toBe("p");
      expect(x).not.toHaveProperty("key");
      expect(x).not.toHaveProperty("agentKey");
    }
  });

  it("requires an agent identity", async () => {
    await using t = await startTestHub();
    await t.register("alpha");
    await expectAgentIdentityRefused(await t.rest("/v1/agents"));
  });

  it("shows presence online, then stale after the lease passes, then offline after the sweep", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const registeredAt = t.clock.now();

    expect(agentNamed(await listAgents(t, b), "alpha")).toMatchObject({ online: true, presence: "online" });

    t.clock.advance(29_999);
    await expectRestOk(await heartbeat(t, b)); // keeps beta fresh; alpha stays untouched
    expect(agentNamed(await listAgents(t, b), "alpha")?.presence).toBe("online");

    t.clock.advance(2); // 30,001 ms after alpha's last call
    const stale = agentNamed(await listAgents(t, b), "alpha");
    expect(stale).toMatchObject({
      online: true,
      presence: "stale",
      lastSeenAt: iso(registeredAt),
      leaseExpiresAt: iso(registeredAt + 30_000),
    });
    // Stale agents are still listed without includeOffline (they are stored online).
    expect((await listAgents(t, b, "")).map((x) => x.name)).toEqual(["alpha", "beta"]);

    await t.hub.sweepNow();
    expect(agentNamed(await listAgents(t, b), "alpha")).toMatchObject({ online: false, presence: "offline" });
    expect((await listAgents(t, b, "")).map((x) => x.name)).toEqual(["beta"]);
    expect(t.events.some((e) => e.event === "agent_stale" && e.fields.agentId === a.id)).toBe(true);

    // Any authenticated call revives it.
    expect((await expectRestOk(await heartbeat(t, a))).agent).toMatchObject({ online: true, presence: "online" });
  });

  it("keeps an agent waiting in ReadInbox online past its presence lease, and reachable: the wait records its activity", async () => {
    await using t = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 } });
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const asleep = t.clock.sleepers;
    const waiting = t.rest("/v1/inbox?waitMs=60000", { headers: b.headers });
    // 45 s of hub time, one keep-alive interval (15 s) at a time, past the 30 s presence lease.
    for (let i = 0; i < 3; i++) {
      await idle(t.clock, asleep + 1);
      t.clock.advance(defaultConfig.streamKeepAliveMs);
    }
    await idle(t.clock, asleep + 1); // recorded, and waiting again
    await t.hub.sweepNow();
    expect(agentNamed(await listAgents(t, a), "beta")).toMatchObject({ online: true, presence: "online", lastSeenAt: iso(t.clock.now()) });
    const sent = await t.rest("/v1/messages", { json: { target: "beta", content: "are you there?" }, headers: a.headers });
    expect(sent.status).toBe(202);
    const read = await expectRestOk(await waiting);
    expect((read.events as Json[]).map((e) => (e.message as Json).content)).toEqual(["are you there?"]);
    expect(t.events.filter((e) => e.event === "agent_stale" && e.fields.agentId === b.id)).toEqual([]);
  });
});

describe("POST /v1/runtime/presence", () => {
  it("answers 201 on the first heartbeat and 200 later, keeping registeredAt", async () => {
    await using t = await startTestHub();
    const first = t.clock.now();
    const created = await expectRestOk(
      await t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: RUNTIME_ID, host: " box " } }),
      201,
    );
    expect(created).toEqual({
      presence: {
        runtimeId: RUNTIME_ID,
        host: "box",
        registeredAt: iso(first),
        heartbeatAt: iso(first),
        leaseExpiresAt: iso(first + 30_000),
        presence: "online",
      },
    });

    t.clock.advance(10_000);
    const later = await expectRestOk(await t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: RUNTIME_ID } }), 200);
    // A heartbeat without host clears it.
    expect(later).toEqual({
      presence: {
        runtimeId: RUNTIME_ID,
        registeredAt: iso(first),
        heartbeatAt: iso(t.clock.now()),
        leaseExpiresAt: iso(t.clock.now() + 30_000),
        presence: "online",
      },
    });
  });

  it("keys runtimes by project: the same runtime id is new in another project", async () => {
    await using t = await startTestHub();
    await expectRestOk(await t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: RUNTIME_ID } }), 201);
    await expectRestOk(await t.rest("/v1/runtime/presence", { json: { project: "q", runtimeId: RUNTIME_ID } }), 201);
    await expectRestOk(await t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: RUNTIME_ID } }), 200);
  });

  it.each(["", "rtm", "RTM_74573b9df677", "rtm_short", "r_74573b9df677", `rtm_${"a".repeat(141)}`, "rtm_-bad-start"])(
    "refuses runtime id %j with 400 invalid_runtime_id and records nothing",
    async (runtimeId) => {
      await using t = await startTestHub();
      await expectRestError(await t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId } }), 400, "invalid_runtime_id");
      expect(t.counters.get("runtimeHeartbeats") ?? 0).toBe(0);
    },
  );

  it.each([
    { field: "project", body: { runtimeId: RUNTIME_ID } },
    { field: "project", body: { project: "p".repeat(129), runtimeId: RUNTIME_ID } },
    { field: "host", body: { project: "p", runtimeId: RUNTIME_ID, host: "h".repeat(65) } },
  ])("refuses an invalid $field with 400 protocol_error", async ({ body }) => {
    await using t = await startTestHub();
    await expectRestError(await t.rest("/v1/runtime/presence", { json: body }), 400, "protocol_error");
    expect(t.counters.get("runtimeHeartbeats") ?? 0).toBe(0);
  });

  it("needs the project token", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    await expectAuthRefused(await t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: RUNTIME_ID } }));
    await expectRestOk(
      await t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: RUNTIME_ID }, headers: { authorization: "Bearer tok" } }),
      201,
    );
  });
});

describe("project token authentication", () => {
  const config = { projectTokens: { p: "tok" }, authToken: "admin" };

  it.each([
    { how: "no bearer", headers: {} as Record<string, string> },
    { how: "a wrong token", headers: { authorization: "Bearer nope" } },
    { how: "a lowercase scheme", headers: { authorization: "bearer tok" } },
    { how: "the bare token", headers: { authorization: "tok" } },
    { how: "the admin token (the project has its own)", headers: { authorization: "Bearer admin" } },
  ])("refuses register with $how: 401 invalid_auth, nothing registered", async ({ headers }) => {
    await using t = await startTestHub({ config });
    await expectAuthRefused(await registerRaw(t, { name: "alpha", project: "p" }, headers));
    const witness = await t.register("witness", "p", "tok");
    expect((await listAgents(t, witness)).map((x) => x.name)).toEqual(["witness"]);
    expect(t.counters.get("registrations")).toBe(1);
  });

  it("accepts the project's own token", async () => {
    await using t = await startTestHub({ config });
    await expectRestOk(await registerRaw(t, { name: "alpha", project: "p" }, { authorization: "Bearer tok" }), 201);
  });

  it("accepts the admin token for a project without its own token, and refuses another project's token there", async () => {
    await using t = await startTestHub({ config });
    await expectRestOk(await registerRaw(t, { name: "alpha", project: "q" }, { authorization: "Bearer admin" }), 201);
    await expectAuthRefused(await registerRaw(t, { name: "beta", project: "q" }, { authorization: "Bearer tok" }));
    await expectAuthRefused(await registerRaw(t, { name: "beta", project: "q" }));
  });

  // A documented choice (decision D19): the interceptor checks the project
  // token before the handler validates the name, so an unauthenticated caller learns nothing
  // about the request's validity.
  it("checks the project token before validating the name", async () => {
    await using t = await startTestHub({ config });
    await expectAuthRefused(await registerRaw(t, { name: "", project: "p" }, { authorization: "Bearer nope" }));
  });

  it("is open for every project when no token is configured at all", async () => {
    await using t = await startTestHub();
    await expectRestOk(await registerRaw(t, { name: "alpha", project: "anything" }, { authorization: "Bearer whatever" }), 201);
  });

  it("refuses agent calls whose key is right but bearer wrong, without recording activity", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", "tok");
    const registeredAt = t.clock.now();
    t.clock.advance(5_000);
    const noBearer = { "x-kxm-agent-id": a.id, "x-kxm-agent-key": a.key };
    await expectAuthRefused(await t.rest(`/v1/agents/${a.id}/heartbeat`, { method: "POST", headers: noBearer }));
    await expectAuthRefused(await t.rest("/v1/agents", { headers: { ...noBearer, authorization: "Bearer admin" } }));
    await expectAuthRefused(await t.rest(`/v1/agents/${a.id}`, { method: "DELETE", headers: noBearer }));
    const b = await t.register("beta", "p", "tok");
    expect(agentNamed(await listAgents(t, b), "alpha")).toMatchObject({ online: true, lastSeenAt: iso(registeredAt) });
  });

  it("checks the agent key before the project token", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", "tok");
    await expectAgentIdentityRefused(
      await t.rest(`/v1/agents/${a.id}/heartbeat`, { method: "POST", headers: { "x-kxm-agent-id": a.id, "x-kxm-agent-key": "key_wrong" } }),
    );
  });

  it("does not revive an offline agent when only the token is wrong", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", "tok");
    const b = await t.register("beta", "p", "tok");
    t.clock.advance(30_001);
    await expectRestOk(await heartbeat(t, b));
    await t.hub.sweepNow();
    await expectAuthRefused(await heartbeat(t, a, { headers: { authorization: "Bearer nope" } }));
    const alpha = agentNamed(await listAgents(t, b), "alpha");
    expect(alpha).toMatchObject({ online: false, presence: "offline" });
    expect(ms(alpha!.lastSeenAt)).toBe(ms(alpha!.connectedAt));
  });
});
