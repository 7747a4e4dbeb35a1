import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { ConfigError, defaultConfig, loadConfig, type HubConfig } from "../../src/config.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectAgentIdentityRefused, expectRestOk } from "../fixtures/rest.js";
import { idle } from "../fixtures/streams.js";

/**
 * Offline agents that nothing open names (no open message to or from them, no live lease) are
 * forgotten by the sweep once they were last seen `agentRetentionMs` ago; the others stay. The
 * sweep runs through hub.sweepNow() on the fake clock.
 */

const tokens = { p: "tok-p" };
const retentionMs = 60_000;
const staleAfterMs = 30_000;
const config: Partial<HubConfig> = { projectTokens: tokens, cleanupIntervalMs: 3_600_000, agentRetentionMs: retentionMs, staleAfterMs };
const bearer = { authorization: `Bearer ${tokens.p}` };

/** Moves the hub clock and sweeps. */
async function sweepAfter(t: TestHub, ms: number) {
  t.clock.advance(ms);
  await t.hub.sweepNow();
}

const unregister = async (t: TestHub, a: AgentCreds) =>
  expect((await t.rest(`/v1/agents/${a.id}`, { method: "DELETE", headers: a.headers })).status).toBe(204);

describe.each(protocols)("agent retention, read over $name", (protocol) => {
  /** ListAgents with includeOffline, as the project's operator: names in registration order. */
  const listed = async (t: TestHub) =>
    (await createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders(bearer)])).listAgents({ includeOffline: true, project: "p" })).agents.map(
      (a) => [a.name, a.online],
    );

  it("forgets an offline agent with nothing open once it was last seen the retention ago, not before", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    await unregister(t, a);
    await sweepAfter(t, retentionMs - 1);
    expect(await listed(t)).toEqual([["alpha", false]]);
    await sweepAfter(t, 1);
    expect(await listed(t)).toEqual([]);
    expect(t.events.filter((e) => e.event === "agent_forgotten").map((e) => e.fields.agentId)).toEqual([a.id]);
    // The name is free: registering it makes a new agent, and the old key stays refused.
    const again = await t.register("alpha", "p", tokens.p);
    expect(again.id).not.toBe(a.id);
    await expectAgentIdentityRefused(await t.rest(`/v1/agents/${a.id}/heartbeat`, { method: "POST", headers: a.headers }));
  });

  it("measures a stale agent from its last sighting: offline at the stale sweep, forgotten the retention after it was last seen", async () => {
    await using t = await startTestHub({ config });
    await t.register("alpha", "p", tokens.p);
    await sweepAfter(t, staleAfterMs + 1);
    expect(await listed(t)).toEqual([["alpha", false]]);
    await sweepAfter(t, retentionMs - staleAfterMs - 2);
    expect(await listed(t)).toEqual([["alpha", false]]);
    await sweepAfter(t, 1);
    expect(await listed(t)).toEqual([]);
  });

  it("keeps an online agent however long ago it registered, while it keeps calling", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    for (let i = 0; i < 5; i++) {
      await sweepAfter(t, 20_000);
      expect((await t.rest(`/v1/agents/${a.id}/heartbeat`, { method: "POST", headers: a.headers })).status).toBe(200);
    }
    await t.hub.sweepNow();
    expect(await listed(t)).toEqual([["alpha", true]]);
  });

  it("keeps an offline agent an open message names, to it or from it, until the message ends", async () => {
    await using t = await startTestHub({ config: { ...config, messageTtlMs: 300_000 } });
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "p", tokens.p);
    const c = await t.register("gamma", "p", tokens.p);
    await expectRestOk(await t.rest("/v1/messages", { headers: a.headers, json: { target: b.id, content: "still open" } }), 202);
    for (const x of [a, b, c]) await unregister(t, x);

    await sweepAfter(t, retentionMs);
    // gamma had nothing open; alpha (sender) and beta (recipient) stay.
    expect(await listed(t)).toEqual([
      ["alpha", false],
      ["beta", false],
    ]);
    await sweepAfter(t, 300_000 - retentionMs - 1);
    expect((await listed(t)).map(([n]) => n)).toEqual(["alpha", "beta"]);
    // The message expires in this sweep; the agents it named go with the same sweep.
    await sweepAfter(t, 1);
    expect(await listed(t)).toEqual([]);
  });

  it("keeps an offline agent that holds a live lease; once the lease lapses it goes, and the lease's floor stays", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    await expectRestOk(await t.rest("/v1/leases/db/acquire", { headers: a.headers, json: { ttlMs: 600_000 } }));
    await unregister(t, a);
    await sweepAfter(t, retentionMs);
    expect(await listed(t)).toEqual([["alpha", false]]);
    await sweepAfter(t, 600_000 - retentionMs - 1);
    expect(await listed(t)).toEqual([["alpha", false]]);
    await sweepAfter(t, 1);
    expect(await listed(t)).toEqual([]);
    const b = await t.register("beta", "p", tokens.p);
    expect((await expectRestOk(await t.rest("/v1/leases/db/acquire", { headers: b.headers, json: {} }))).lease.fencingToken).toBe(2);
  });
});

describe("agent retention over REST", () => {
  it("GET /v1/agents?includeOffline=true no longer lists a forgotten agent; the one inside the retention stays", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    t.clock.advance(10_000);
    const b = await t.register("beta", "p", tokens.p);
    await unregister(t, a);
    t.clock.advance(20_000);
    await unregister(t, b);
    const names = async () =>
      ((await expectRestOk(await t.rest("/v1/agents?includeOffline=true&project=p", { headers: bearer }))).agents as { name: string }[]).map((x) => x.name);
    await sweepAfter(t, retentionMs - 20_000);
    expect(await names()).toEqual(["beta"]);
    await sweepAfter(t, 20_000);
    expect(await names()).toEqual([]);
  });
});

describe("agent retention configuration", () => {
  it("defaults to 30 days; KXM_AGENT_RETENTION_MS sets it, 60000 at least", () => {
    expect(defaultConfig.agentRetentionMs).toBe(30 * 86_400_000);
    expect(loadConfig([], {}).agentRetentionMs).toBe(30 * 86_400_000);
    expect(loadConfig([], { KXM_AGENT_RETENTION_MS: "60000" }).agentRetentionMs).toBe(60_000);
    expect(loadConfig(["--agent-retention-ms", "120000"], { KXM_AGENT_RETENTION_MS: "60000" }).agentRetentionMs).toBe(120_000);
    for (const raw of ["59999", "0", "-1", "1e6", "abc"]) {
      expect(() => loadConfig([], { KXM_AGENT_RETENTION_MS: raw }), raw).toThrow(ConfigError);
    }
  });
});

describe("agent retention and a waiting acquire", () => {
  const leases = (t: TestHub, a: AgentCreds) => createClient(LeaseService, protocols[1]!.make(t.baseUrl, [withHeaders(a.headers)]));

  it("keeps an offline agent whose acquire still waits in a lease's queue, and hands it the lease alive", async () => {
    await using t = await startTestHub({ config: { agentRetentionMs: 60_000, staleAfterMs: 30_000, cleanupIntervalMs: 3_600_000 } });
    const alpha = await t.register("alpha");
    const beta = await t.register("beta");
    const held = await leases(t, alpha).acquireLease({ name: "db", ttlMs: 600_000 });
    // beta waits up to 10 minutes for the lease, its call in flight while the sweeps run.
    const waited = leases(t, beta)
      .acquireLease({ name: "db", ttlMs: 300_000, waitMs: 600_000 })
      .then((r) => ({ holder: r.lease?.holderAgentName }), (e: unknown) => ({ refused: String(e) }));
    await idle(t.clock, 1);
    t.clock.advance(31_000);
    await t.hub.sweepNow(); // stale: offline
    t.clock.advance(30_000);
    expect((await t.rest(`/v1/agents/${alpha.id}/heartbeat`, { method: "POST", headers: alpha.headers })).status).toBe(200);
    await t.hub.sweepNow(); // past retention: forgotten, unless something names it
    expect((await t.sql("SELECT name FROM agents ORDER BY name")).map((r) => r.name)).toEqual(["alpha", "beta"]);
    // alpha releases: the lease goes to beta's waiting call, held by an agent the hub knows.
    await leases(t, alpha).releaseLease({ name: "db", fencingToken: held.lease!.fencingToken });
    expect(await waited).toEqual({ holder: "beta" });
    const [row] = await t.sql("SELECT holder_agent_id FROM leases WHERE name = 'db'");
    expect(row!.holder_agent_id).toBe(beta.id);
  });
});
