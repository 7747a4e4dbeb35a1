import { describe, expect, it } from "vitest";
import { FenceReason } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import type { HubConfig } from "../../src/config.js";
import { decideFence } from "../../src/lease/rules.js";
import { hubClients, protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectAuthRefused, expectRestError, expectRestOk, iso, type Json } from "../fixtures/rest.js";
import { refused } from "../fixtures/rpc.js";
import type { LeaseRow } from "../../src/domain.js";

/**
 * CheckFence (issue 22): a resource a lease protects asks whether the fencing token a writer
 * presents is the live holder's current token. `valid` only for `current`; the other reasons say
 * why not. A read scoped to the caller's project, callable with the project token alone.
 */

const tokens = { p: "tok-p", q: "tok-q" };
// With an admin token: a loopback hub without one takes any caller naming a project as admin.
const config: Partial<HubConfig> = { projectTokens: tokens, authToken: "tok-admin" };
const ttlMs = 5_000;
const projectToken = (project: keyof typeof tokens) => ({ authorization: `Bearer ${tokens[project]}` });

describe("decideFence", () => {
  const nowMs = 1_000_000;
  const row = (over: Partial<LeaseRow> = {}): LeaseRow => ({
    project: "p",
    name: "db",
    holderAgentId: "agt_a",
    holderAgentName: "a",
    fencingToken: 3,
    acquiredAtMs: nowMs - 1_000,
    expiresAtMs: nowMs + 1_000,
    ...over,
  });
  const floor = row({ holderAgentId: null, holderAgentName: null });

  it.each([
    ["no row", undefined, 1, "unknown", false],
    ["a token above the current one", row(), 4, "unknown", false],
    ["a token above a released floor", floor, 4, "unknown", false],
    ["a token below a held lease's", row(), 2, "superseded", true],
    ["a token below a lapsed lease's", row({ expiresAtMs: nowMs }), 1, "superseded", true],
    ["a token below a released floor", floor, 2, "superseded", false],
    ["the current token, live", row(), 3, "current", true],
    ["the current token, lapsed at now", row({ expiresAtMs: nowMs }), 3, "expired", true],
    ["the current token, released", floor, 3, "released", false],
  ] as const)("%s", (_what, current, token, reason, withLease) => {
    const v = decideFence(current, token, nowMs);
    expect(v.reason).toBe(reason);
    expect(v.valid).toBe(reason === "current");
    expect(v.lease !== undefined).toBe(withLease);
    if (v.lease) expect(v.lease).toMatchObject({ project: "p", name: "db", fencingToken: 3, holderAgentId: "agt_a" });
  });
});

describe("CheckFence over REST", () => {
  const post = (t: TestHub, headers: Record<string, string>, name: string, json: unknown) =>
    t.rest(`/v1/leases/${encodeURIComponent(name)}/check`, { method: "POST", headers, json });
  const lease = (t: TestHub, as: AgentCreds, name: string, verb: "acquire" | "release", json: unknown) =>
    t.rest(`/v1/leases/${encodeURIComponent(name)}/${verb}`, { method: "POST", headers: as.headers, json }).then((r) => expectRestOk(r));
  /** The answer to the project token alone, which an agent of the project must get too. */
  async function check(t: TestHub, name: string, fencingToken: number, agent?: AgentCreds): Promise<Json> {
    const body = await expectRestOk(await post(t, projectToken("p"), name, { project: "p", fencingToken }));
    if (agent) expect(await expectRestOk(await post(t, agent.headers, name, { fencingToken }))).toEqual(body);
    return body;
  }

  it("follows a lease through current, expired, superseded (takeover), released and superseded (regrant)", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "p", tokens.p);
    const startMs = t.clock.now();

    await lease(t, a, "repo/main", "acquire", { ttlMs });
    expect(await check(t, "repo/main", 1, b)).toEqual({
      valid: true,
      reason: "current",
      lease: {
        resource: "p/repo/main",
        project: "p",
        name: "repo/main",
        holderAgentId: a.id,
        holderAgentName: "alpha",
        fencingToken: 1,
        acquiredAt: iso(startMs),
        expiresAt: iso(startMs + ttlMs),
        waiters: [],
      },
    });

    // Lapsed at expires_at (expires_at <= now), though nobody took it over yet.
    t.clock.advance(ttlMs);
    expect(await check(t, "repo/main", 1, a)).toEqual({ valid: false, reason: "expired", lease: expect.objectContaining({ holderAgentId: a.id, fencingToken: 1 }) });

    // Another agent takes the lapsed lease over: token 2; the old one is superseded for good.
    await lease(t, b, "repo/main", "acquire", { ttlMs });
    expect(await check(t, "repo/main", 1, a)).toEqual({ valid: false, reason: "superseded", lease: expect.objectContaining({ holderAgentId: b.id, fencingToken: 2 }) });
    expect(await check(t, "repo/main", 2, a)).toMatchObject({ valid: true, reason: "current" });

    // Released: the token stays as the floor, nobody holds the lease.
    await lease(t, b, "repo/main", "release", { fencingToken: 2 });
    expect(await check(t, "repo/main", 2, b)).toEqual({ valid: false, reason: "released" });
    expect(await check(t, "repo/main", 1)).toEqual({ valid: false, reason: "superseded" });
    expect(await check(t, "repo/main", 3)).toEqual({ valid: false, reason: "unknown" });

    // Granted again after the release: floor + 1; the released token is superseded.
    await lease(t, a, "repo/main", "acquire", { ttlMs });
    expect(await check(t, "repo/main", 2, b)).toEqual({ valid: false, reason: "superseded", lease: expect.objectContaining({ holderAgentId: a.id, fencingToken: 3 }) });
    expect(await check(t, "repo/main", 3, b)).toMatchObject({ valid: true, reason: "current", lease: { fencingToken: 3 } });
  });

  it("answers unknown for a name never leased and for a token above every one issued", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    expect(await check(t, "never/leased", 1, a)).toEqual({ valid: false, reason: "unknown" });
    await lease(t, a, "db", "acquire", { ttlMs });
    expect(await check(t, "db", 2, a)).toEqual({ valid: false, reason: "unknown" });
    expect(await check(t, "db", Number.MAX_SAFE_INTEGER, a)).toEqual({ valid: false, reason: "unknown" });
  });

  it("is a read: nothing written, logged as a lease decision or counted beyond the call", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    await lease(t, a, "db", "acquire", { ttlMs });
    const rows = async () => [await t.sql("SELECT * FROM leases"), await t.sql("SELECT * FROM watch_changes"), await t.sql("SELECT * FROM watch_heads")];
    const before = await rows();
    const events = t.events.length;
    const counters = new Map(t.counters);
    for (const token of [1, 2]) await check(t, "db", token, a);
    expect(await rows()).toEqual(before);
    expect(t.events.slice(events).filter((e) => e.event.startsWith("lease_"))).toEqual([]);
    expect([...t.counters].filter(([name]) => name.startsWith("leases"))).toEqual([...counters].filter(([name]) => name.startsWith("leases")));
    // Counted like every call, by method.
    const metrics = await (await t.rest("/metrics", { headers: { authorization: "Bearer tok-admin" } })).text();
    expect(metrics).toMatch(/kxm_rpc_requests_total\{face="rest",service="kxm\.hub\.v1\.LeaseService",method="CheckFence",code="ok"\} 4\n/);
  });

  it("never tells about another project: a lease of the same name there is unknown here", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    const other = await t.register("other", "q", tokens.q);
    for (let i = 0; i < 2; i++) {
      await lease(t, a, "db", "acquire", { ttlMs });
      await lease(t, a, "db", "release", { fencingToken: i + 1 });
    }
    await lease(t, a, "db", "acquire", { ttlMs }); // p's db: token 3
    await lease(t, other, "db", "acquire", { ttlMs }); // q's db: token 1

    expect(await check(t, "db", 3, a)).toMatchObject({ valid: true, reason: "current" });
    const asQ = [projectToken("q"), other.headers];
    for (const headers of asQ) {
      expect(await expectRestOk(await post(t, headers, "db", { project: "q", fencingToken: 3 }))).toEqual({ valid: false, reason: "unknown" });
      const own = await expectRestOk(await post(t, headers, "db", { project: "q", fencingToken: 1 }));
      expect(own).toMatchObject({ valid: true, reason: "current", lease: { project: "q", holderAgentId: other.id } });
    }
    // An agent always checks its own project, whatever it names; q's token does not open p.
    expect(await expectRestOk(await post(t, other.headers, "db", { project: "p", fencingToken: 3 }))).toEqual({ valid: false, reason: "unknown" });
    await expectAuthRefused(await post(t, projectToken("q"), "db", { project: "p", fencingToken: 3 }));
  });

  it("refuses a missing or out-of-range token, a bad name and a wrong project token", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    await lease(t, a, "db", "acquire", { ttlMs });
    for (const headers of [projectToken("p"), a.headers]) {
      await expectRestError(await post(t, headers, "db", { project: "p" }), 400, "lease_token_required");
      for (const fencingToken of [0, -1, 2 ** 53]) await expectRestError(await post(t, headers, "db", { project: "p", fencingToken }), 400, "protocol_error");
      await expectRestError(await post(t, headers, "x".repeat(201), { project: "p", fencingToken: 1 }), 400, "protocol_error");
    }
    await expectAuthRefused(await post(t, { authorization: "Bearer nope" }, "db", { project: "p", fencingToken: 1 }));
    await expectAuthRefused(await post(t, { ...a.headers, authorization: "Bearer nope" }, "db", { fencingToken: 1 }));
  });
});

describe.each(protocols)("CheckFence over $name", (protocol) => {
  const leasesOf = (t: TestHub, headers: Record<string, string>) => hubClients(protocol.make(t.baseUrl, [withHeaders(headers)])).leases;

  it("gives every reason to the project token alone and to an agent, and refuses bad tokens", async () => {
    await using t = await startTestHub({ config });
    const a = leasesOf(t, (await t.register("alpha", "p", tokens.p)).headers);
    const bCreds = await t.register("beta", "p", tokens.p);
    const b = leasesOf(t, bCreds.headers);
    const resource = leasesOf(t, projectToken("p"));
    const check = async (name: string, fencingToken: bigint) => {
      const r = await resource.checkFence({ project: "p", name, fencingToken });
      const agent = await a.checkFence({ name, fencingToken });
      expect(agent).toEqual(r);
      return { valid: r.valid, reason: r.reason, token: r.lease?.fencingToken, holder: r.lease?.holderAgentName };
    };

    expect(await check("repo/main", 1n)).toEqual({ valid: false, reason: FenceReason.UNKNOWN, token: undefined, holder: undefined });
    await a.acquireLease({ name: "repo/main", ttlMs });
    expect(await check("repo/main", 1n)).toEqual({ valid: true, reason: FenceReason.CURRENT, token: 1n, holder: "alpha" });
    expect(await check("repo/main", 2n)).toEqual({ valid: false, reason: FenceReason.UNKNOWN, token: undefined, holder: undefined });
    t.clock.advance(ttlMs + 1);
    expect(await check("repo/main", 1n)).toEqual({ valid: false, reason: FenceReason.EXPIRED, token: 1n, holder: "alpha" });
    await b.acquireLease({ name: "repo/main", ttlMs });
    expect(await check("repo/main", 1n)).toEqual({ valid: false, reason: FenceReason.SUPERSEDED, token: 2n, holder: "beta" });
    await b.releaseLease({ name: "repo/main", fencingToken: 2n });
    expect(await check("repo/main", 2n)).toEqual({ valid: false, reason: FenceReason.RELEASED, token: undefined, holder: undefined });
    await a.acquireLease({ name: "repo/main", ttlMs });
    expect(await check("repo/main", 2n)).toEqual({ valid: false, reason: FenceReason.SUPERSEDED, token: 3n, holder: "alpha" });
    expect(await check("repo/main", 3n)).toEqual({ valid: true, reason: FenceReason.CURRENT, token: 3n, holder: "alpha" });

    for (const caller of [resource, b]) {
      expect(await refused(caller.checkFence({ project: "p", name: "repo/main" }))).toMatchObject({ code: "invalid_argument", reason: "LEASE_TOKEN_REQUIRED" });
      for (const fencingToken of [0n, -1n, 2n ** 53n]) {
        expect(await refused(caller.checkFence({ project: "p", name: "repo/main", fencingToken }))).toMatchObject({ code: "invalid_argument", reason: "PROTOCOL_ERROR" });
      }
    }
    const wrong = leasesOf(t, { authorization: "Bearer nope" });
    expect(await refused(wrong.checkFence({ project: "p", name: "repo/main", fencingToken: 3n }))).toMatchObject({ code: "unauthenticated", reason: "INVALID_AUTH" });
    const other = leasesOf(t, projectToken("q"));
    const elsewhere = await other.checkFence({ project: "q", name: "repo/main", fencingToken: 3n });
    expect([elsewhere.valid, elsewhere.reason, elsewhere.lease]).toEqual([false, FenceReason.UNKNOWN, undefined]);
  });
});
