import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseEventKind, LeaseService, type LeaseEvent, type WatchLeasesResponse } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService, PresenceState } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { HubConfig } from "../../src/config.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { parseExposition, valueOf, type Family } from "../fixtures/prometheus.js";
import { expectAgentIdentityRefused, expectAuthRefused, expectRestError, expectRestOk, iso, type Json } from "../fixtures/rest.js";
import { ms, refusalOf, refused } from "../fixtures/rpc.js";
import { Frames, idle, StreamScope, streamProtocols } from "../fixtures/streams.js";

/**
 * The operator's hands: OpsService.ForceReleaseLease (a lease released whoever holds it, the
 * token kept as the floor, the first waiter served in the same transaction) and
 * OpsService.EvictAgent (offline, key rotated, streams ended, leases released, queued acquires
 * dropped), over RPC and REST, with the project's own token or the admin token.
 */

const tokens = { p: "tok-p", q: "tok-q" };
const admin = "admin";
const config: Partial<HubConfig> = { authToken: admin, projectTokens: tokens, cleanupIntervalMs: 3_600_000 };

/** A call left pending while the test goes on: a test that fails early must not leave it unhandled. */
function pending<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

/** Whether `p` settles within a few turns of the event loop (no hub time passes). */
async function settles(p: Promise<unknown>, turns = 200): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  for (let i = 0; i < turns && !done; i++) await new Promise((r) => setTimeout(r, 2));
  return done;
}

async function scrape(t: TestHub): Promise<Map<string, Family>> {
  const res = await t.rest("/metrics", { headers: { authorization: `Bearer ${admin}` } });
  expect(res.status).toBe(200);
  return parseExposition(await res.text());
}

const registerAll = async (t: TestHub, names: string[], project = "p") => {
  const out: AgentCreds[] = [];
  for (const n of names) out.push(await t.register(n, project, tokens[project as "p" | "q"]));
  return out;
};

describe.each(protocols)("ForceReleaseLease over $name", (protocol) => {
  const ops = (t: TestHub, token: string) => createClient(OpsService, protocol.make(t.baseUrl, [withHeaders({ authorization: `Bearer ${token}` })]));
  const leases = (t: TestHub, as: AgentCreds) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));
  const acquire = (t: TestHub, as: AgentCreds, name: string, opts: { ttlMs?: number; waitMs?: number } = {}) =>
    pending(leases(t, as).acquireLease({ name, ttlMs: opts.ttlMs ?? 60_000, ...(opts.waitMs !== undefined && { waitMs: opts.waitMs }) }));

  it("releases the holder's lease and grants the first waiter the next token in the same call; the old holder is LEASE_SUPERSEDED", async () => {
    await using t = await startTestHub({ config });
    const [a, b, c] = await registerAll(t, ["alpha", "beta", "gamma"]);
    const held = (await acquire(t, a!, "db")).lease!;
    const first = acquire(t, b!, "db", { waitMs: 60_000, ttlMs: 20_000 });
    await idle(t.clock, 1);
    const second = acquire(t, c!, "db", { waitMs: 60_000 });
    await idle(t.clock, 2);
    t.clock.advance(3_000);

    const r = await ops(t, tokens.p).forceReleaseLease({ project: "p", name: "db" });
    expect(r.lease).toMatchObject({ name: "db", resource: "p/db", holderAgentId: a!.id, holderAgentName: "alpha", fencingToken: 1n });
    expect(ms(r.lease?.expiresAt)).toBe(ms(held.expiresAt));
    expect(r.next).toMatchObject({ holderAgentId: b!.id, holderAgentName: "beta", fencingToken: 2n });
    expect(ms(r.next?.acquiredAt)).toBe(t.clock.now());
    expect(ms(r.next?.expiresAt)).toBe(t.clock.now() + 20_000);

    const got = await first;
    expect(got.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    expect(got.waitedMs).toBe(3_000);
    const view = (await leases(t, c!).getLease({ name: "db" })).lease!;
    expect([view.holderAgentName, Number(view.fencingToken), view.waiters.map((w) => w.agentName)]).toEqual(["beta", 2, ["gamma"]]);

    for (const call of [
      () => leases(t, a!).renewLease({ name: "db", fencingToken: 1n, ttlMs: 60_000 }),
      () => leases(t, a!).releaseLease({ name: "db", fencingToken: 1n }),
    ]) {
      const e = await refused(call());
      expect(e).toMatchObject({ code: "aborted", reason: "LEASE_SUPERSEDED" });
      expect(e.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    }
    await leases(t, b!).releaseLease({ name: "db", fencingToken: 2n });
    expect((await second).lease).toMatchObject({ holderAgentName: "gamma", fencingToken: 3n });
  });

  it("without a waiter the token stays as the floor: the old holder's renew is LEASE_NOT_FOUND, the next grant is token+1", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await acquire(t, a!, "db");
    await leases(t, a!).renewLease({ name: "db", fencingToken: 1n, ttlMs: 60_000 });
    const r = await ops(t, admin).forceReleaseLease({ project: "p", name: "db" });
    expect(r.lease).toMatchObject({ holderAgentName: "alpha", fencingToken: 1n });
    expect(r.next).toBeUndefined();

    expect(await refused(leases(t, a!).renewLease({ name: "db", fencingToken: 1n, ttlMs: 60_000 }))).toMatchObject({ code: "not_found", reason: "LEASE_NOT_FOUND" });
    expect(await refused(leases(t, a!).releaseLease({ name: "db", fencingToken: 1n }))).toMatchObject({ reason: "LEASE_NOT_FOUND" });
    expect(await refused(leases(t, b!).getLease({ name: "db" }))).toMatchObject({ reason: "LEASE_NOT_FOUND" });
    // Nobody holds it now: a second force release finds nothing.
    expect(await refused(ops(t, tokens.p).forceReleaseLease({ project: "p", name: "db" }))).toMatchObject({ code: "not_found", reason: "LEASE_NOT_FOUND" });
    expect((await acquire(t, b!, "db")).lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    // The old holder acquiring again is a new grant on a higher token still.
    await leases(t, b!).releaseLease({ name: "db", fencingToken: 2n });
    expect((await acquire(t, a!, "db")).lease?.fencingToken).toBe(3n);
  });

  it("with a fencingToken: refuses a stale one (LEASE_SUPERSEDED) and changes nothing; releases with the current one", async () => {
    await using t = await startTestHub({ config });
    const [a, b, c] = await registerAll(t, ["alpha", "beta", "gamma"]);
    await acquire(t, a!, "db");
    await leases(t, a!).releaseLease({ name: "db", fencingToken: 1n });
    const current = (await acquire(t, b!, "db")).lease!;
    const waiting = acquire(t, c!, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    const before = (await leases(t, b!).getLease({ name: "db" })).lease!;

    const e = await refused(ops(t, tokens.p).forceReleaseLease({ project: "p", name: "db", fencingToken: 1n }));
    expect(e).toMatchObject({ code: "aborted", reason: "LEASE_SUPERSEDED" });
    expect(e.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    expect((await leases(t, b!).getLease({ name: "db" })).lease).toEqual(before);
    expect(await settles(waiting)).toBe(false);
    await leases(t, b!).renewLease({ name: "db", fencingToken: current.fencingToken, ttlMs: 60_000 });

    const r = await ops(t, tokens.p).forceReleaseLease({ project: "p", name: "db", fencingToken: 2n });
    expect(r.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    expect(r.next).toMatchObject({ holderAgentName: "gamma", fencingToken: 3n });
    expect((await waiting).lease?.fencingToken).toBe(3n);
  });

  it("refuses a lease that was never held with LEASE_NOT_FOUND, and releases only the named project's lease", async () => {
    await using t = await startTestHub({ config });
    const [a] = await registerAll(t, ["alpha"]);
    const [qa] = await registerAll(t, ["alpha"], "q");
    expect(await refused(ops(t, tokens.p).forceReleaseLease({ project: "p", name: "nothing" }))).toMatchObject({ code: "not_found", reason: "LEASE_NOT_FOUND" });
    await acquire(t, a!, "db");
    await acquire(t, qa!, "db");
    const r = await ops(t, admin).forceReleaseLease({ project: "q", name: "db" });
    expect(r.lease).toMatchObject({ resource: "q/db", holderAgentId: qa!.id });
    expect((await leases(t, a!).getLease({ name: "db" })).lease).toMatchObject({ holderAgentId: a!.id, fencingToken: 1n });
  });

  it("takes the project's own token or the admin token; refuses another project's token and an agent's identity (INVALID_AUTH)", async () => {
    await using t = await startTestHub({ config });
    const [a] = await registerAll(t, ["alpha"]);
    await acquire(t, a!, "db");
    const asAgent = createClient(OpsService, protocol.make(t.baseUrl, [withHeaders({ "x-kxm-agent-id": a!.id, "x-kxm-agent-key": a!.key })]));
    const asAgentWithToken = createClient(OpsService, protocol.make(t.baseUrl, [withHeaders(a!.headers)]));
    for (const call of [
      () => ops(t, tokens.q).forceReleaseLease({ project: "p", name: "db" }),
      () => ops(t, "wrong").forceReleaseLease({ project: "p", name: "db" }),
      () => asAgent.forceReleaseLease({ project: "p", name: "db" }),
    ]) {
      expect(await refused(call())).toMatchObject({ code: "unauthenticated", reason: "INVALID_AUTH" });
    }
    expect((await leases(t, a!).getLease({ name: "db" })).lease).toMatchObject({ holderAgentName: "alpha", fencingToken: 1n });
    // An agent's headers with its project's token: the token is what counts, as an operator.
    expect((await asAgentWithToken.forceReleaseLease({ project: "p", name: "db" })).lease?.fencingToken).toBe(1n);
    await acquire(t, a!, "db");
    expect((await ops(t, admin).forceReleaseLease({ project: "p", name: "db" })).lease?.fencingToken).toBe(2n);
  });

  it("counts a forced release in kxm_leases_released_total", async () => {
    await using t = await startTestHub({ config });
    const [a] = await registerAll(t, ["alpha"]);
    await acquire(t, a!, "one");
    await acquire(t, a!, "two");
    expect(valueOf(await scrape(t), "kxm_leases_released_total")).toBe(0);
    await ops(t, tokens.p).forceReleaseLease({ project: "p", name: "one" });
    await ops(t, admin).forceReleaseLease({ project: "p", name: "two", fencingToken: 1n });
    await refused(ops(t, admin).forceReleaseLease({ project: "p", name: "two" })); // nobody holds it: not counted
    const m = await scrape(t);
    expect([valueOf(m, "kxm_leases_released_total"), valueOf(m, "kxm_leases_granted_total")]).toEqual([2, 2]);
  });

  it("counts the handover a forced release makes to a waiter once in kxm_leases_granted_total", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await acquire(t, a!, "db");
    const wait = acquire(t, b!, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    expect(valueOf(await scrape(t), "kxm_leases_granted_total")).toBe(1);
    await ops(t, tokens.p).forceReleaseLease({ project: "p", name: "db" });
    expect((await wait).lease?.fencingToken).toBe(2n);
    const m = await scrape(t);
    // One grant to alpha, one handover to beta.
    expect(valueOf(m, "kxm_leases_granted_total")).toBe(2);
    expect(t.events.filter((e) => e.event === "lease_acquired").map((e) => e.fields.agentId)).toEqual([a!.id, b!.id]);
  });
});

describe("ForceReleaseLease over REST", () => {
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
  const forceRelease = (t: TestHub, project: string, name: string, token: string, json: unknown = {}) =>
    t.rest(`/v1/ops/projects/${project}/leases/${name}/release`, { headers: bearer(token), json });
  const acquire = async (t: TestHub, as: AgentCreds, name: string, json: Json = { ttlMs: 60_000 }) =>
    t.rest(`/v1/leases/${name}/acquire`, { headers: as.headers, json });

  it("answers {lease, next}: the released lease and the waiter's grant on token+1; the old holder's renew is 409 lease_superseded", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    const now = t.clock.now();
    await expectRestOk(await acquire(t, a!, "db"));
    const wait = pending(acquire(t, b!, "db", { ttlMs: 30_000, waitMs: 60_000 }));
    await idle(t.clock, 1);
    t.clock.advance(1_000);
    const body = await expectRestOk(await forceRelease(t, "p", "db", tokens.p));
    expect(body).toEqual({
      lease: {
        resource: "p/db",
        project: "p",
        name: "db",
        holderAgentId: a!.id,
        holderAgentName: "alpha",
        fencingToken: 1,
        acquiredAt: iso(now),
        expiresAt: iso(now + 60_000),
        waiters: [],
      },
      next: {
        resource: "p/db",
        project: "p",
        name: "db",
        holderAgentId: b!.id,
        holderAgentName: "beta",
        fencingToken: 2,
        acquiredAt: iso(now + 1_000),
        expiresAt: iso(now + 31_000),
        waiters: [],
      },
    });
    expect(await expectRestOk(await wait)).toMatchObject({ waitedMs: 1_000, lease: { holderAgentName: "beta", fencingToken: 2 } });
    const err = await expectRestError(await t.rest("/v1/leases/db/renew", { headers: a!.headers, json: { fencingToken: 1 } }), 409, "lease_superseded", {
      extras: ["lease"],
    });
    expect(err.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2 });
  });

  it("keeps the floor without a waiter; refuses a stale fencingToken (409), a lease nobody holds (404) and another project's token (401)", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await expectRestOk(await acquire(t, a!, "db"));
    await expectAuthRefused(await forceRelease(t, "p", "db", tokens.q));
    await expectAuthRefused(await t.rest("/v1/ops/projects/p/leases/db/release", { headers: { "x-kxm-agent-id": a!.id, "x-kxm-agent-key": a!.key }, json: {} }));
    const stale = await expectRestError(await forceRelease(t, "p", "db", tokens.p, { fencingToken: 7 }), 409, "lease_superseded", { extras: ["lease"] });
    expect(stale.lease).toMatchObject({ holderAgentName: "alpha", fencingToken: 1 });
    expect((await expectRestOk(await t.rest("/v1/leases/db", { headers: b!.headers }))).lease).toMatchObject({ holderAgentName: "alpha", fencingToken: 1 });

    const body = await expectRestOk(await forceRelease(t, "p", "db", admin, { fencingToken: 1 }));
    expect(body.lease).toMatchObject({ holderAgentName: "alpha", fencingToken: 1 });
    expect(body).not.toHaveProperty("next");
    await expectRestError(await t.rest("/v1/leases/db/renew", { headers: a!.headers, json: { fencingToken: 1 } }), 404, "lease_not_found");
    await expectRestError(await forceRelease(t, "p", "db", tokens.p), 404, "lease_not_found");
    await expectRestError(await forceRelease(t, "p", "never", tokens.p), 404, "lease_not_found");
    expect((await expectRestOk(await acquire(t, b!, "db"))).lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2 });
  });

  it("takes a percent-encoded name with a slash", async () => {
    await using t = await startTestHub({ config });
    const [a] = await registerAll(t, ["alpha"]);
    await expectRestOk(await acquire(t, a!, "jobs%2Fnightly"));
    const body = await expectRestOk(await forceRelease(t, "p", "jobs%2Fnightly", tokens.p));
    expect(body.lease).toMatchObject({ name: "jobs/nightly", resource: "p/jobs/nightly", fencingToken: 1 });
  });
});

describe.each(streamProtocols)("the operator's hands in streams over $name", (protocol) => {
  const ops = (t: TestHub, token: string) => createClient(OpsService, protocol.make(t.baseUrl, [withHeaders({ authorization: `Bearer ${token}` })]));
  const leases = (t: TestHub, headers: Record<string, string>) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(headers)]));
  const acquire = (t: TestHub, as: AgentCreds, name: string, opts: { ttlMs?: number; waitMs?: number } = {}) =>
    pending(leases(t, as.headers).acquireLease({ name, ttlMs: opts.ttlMs ?? 60_000, ...(opts.waitMs !== undefined && { waitMs: opts.waitMs }) }));
  const watch = (s: StreamScope, t: TestHub) =>
    s.add((signal) => leases(t, { authorization: `Bearer ${tokens.p}` }).watchLeases({ project: "p" }, { signal }));

  async function start(f: Frames<WatchLeasesResponse>) {
    const r = await f.next();
    if (r.event.case !== "snapshot") throw new Error(`expected a snapshot, got ${r.event.case}`);
    return { cursor: r.cursor };
  }
  async function change(f: Frames<WatchLeasesResponse>, pos: { cursor: bigint }): Promise<LeaseEvent> {
    const r = await f.next();
    if (r.event.case !== "change") throw new Error(`expected a change, got ${r.event.case}`);
    expect(r.cursor).toBe(pos.cursor + 1n);
    pos.cursor = r.cursor;
    return r.event.value;
  }
  const summary = (e: LeaseEvent) => [
    LeaseEventKind[e.kind],
    e.lease?.name,
    e.lease?.holderAgentName,
    Number(e.lease?.fencingToken),
    (e.lease?.waiters ?? []).map((w) => w.agentName),
  ];

  it("WatchLeases shows FORCE_RELEASED, then the GRANTED to the first waiter", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await acquire(t, a!, "db");
    await acquire(t, a!, "cache");
    const w = watch(s, t);
    const pos = await start(w);
    const wait = acquire(t, b!, "db", { waitMs: 60_000 });
    expect(summary(await change(w, pos))).toEqual(["QUEUE_CHANGED", "db", "alpha", 1, ["beta"]]);
    await ops(t, tokens.p).forceReleaseLease({ project: "p", name: "db" });
    expect(summary(await change(w, pos))).toEqual(["FORCE_RELEASED", "db", "alpha", 1, []]);
    expect(summary(await change(w, pos))).toEqual(["GRANTED", "db", "beta", 2, []]);
    await ops(t, admin).forceReleaseLease({ project: "p", name: "cache", fencingToken: 1n });
    expect(summary(await change(w, pos))).toEqual(["FORCE_RELEASED", "cache", "alpha", 1, []]);
    expect((await wait).lease?.fencingToken).toBe(2n);
  });

  it("EvictAgent ends the agent's open Subscribe and WatchLeases streams with INVALID_AGENT_IDENTITY; another agent's stream goes on", async () => {
    await using t = await startTestHub({ config: { ...config, streamKeepAliveMs: 15_000 } });
    using s = new StreamScope();
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    const peer = (who: AgentCreds) => createClient(PeerService, protocol.make(t.baseUrl, [withHeaders(who.headers)]));
    const sub = s.add((signal) => peer(a!).subscribe({}, { signal }));
    expect((await sub.next()).event.case).toBe("ready");
    const other = s.add((signal) => peer(b!).subscribe({}, { signal }));
    expect((await other.next()).event.case).toBe("ready");
    const own = s.add((signal) => leases(t, a!.headers).watchLeases({}, { signal }));
    expect((await own.next()).event.case).toBe("snapshot");

    await ops(t, tokens.p).evictAgent({ project: "p", agentId: a!.id });
    expect(refusalOf(await sub.error())).toMatchObject({ code: "unauthenticated", reason: "INVALID_AGENT_IDENTITY" });
    expect(refusalOf(await own.error())).toMatchObject({ code: "unauthenticated", reason: "INVALID_AGENT_IDENTITY" });

    // beta's stream saw alpha go offline, and still gets its messages.
    const seen = await other.next();
    expect(seen.event.case === "presence" && [seen.event.value.id, seen.event.value.online]).toEqual([a!.id, false]);
    const again = await t.register("alpha", "p", tokens.p);
    const sent = await peer(again).sendMessage({ target: "beta", content: "after the eviction" });
    for (;;) {
      const f = await other.next();
      if (f.event.case === "message") {
        expect(f.event.value.id).toBe(sent.message?.id);
        break;
      }
      expect(f.event.case).toBe("presence"); // alpha back online
    }
  });

  it("EvictAgent: the agent's queued acquire leaves the queue (watchers see QUEUE_CHANGED) and is never granted", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const [a, b, c] = await registerAll(t, ["alpha", "beta", "gamma"]);
    await acquire(t, b!, "db");
    const w = watch(s, t);
    const pos = await start(w);
    const evicted = acquire(t, a!, "db", { waitMs: 60_000 });
    expect(summary(await change(w, pos))).toEqual(["QUEUE_CHANGED", "db", "beta", 1, ["alpha"]]);
    const next = acquire(t, c!, "db", { waitMs: 60_000 });
    expect(summary(await change(w, pos))).toEqual(["QUEUE_CHANGED", "db", "beta", 1, ["alpha", "gamma"]]);
    await idle(t.clock, 3);

    await ops(t, tokens.p).evictAgent({ project: "p", agentId: a!.id });
    expect((await leases(t, b!.headers).getLease({ name: "db" })).lease?.waiters.map((x) => x.agentName)).toEqual(["gamma"]);

    // The release comes after the eviction: a watcher must have seen alpha leave the queue first.
    await leases(t, b!.headers).releaseLease({ name: "db", fencingToken: 1n });
    const seen = [summary(await change(w, pos)), summary(await change(w, pos))];
    expect.soft(seen[0], "the eviction's QUEUE_CHANGED").toEqual(["QUEUE_CHANGED", "db", "beta", 1, ["gamma"]]);
    const rest = seen[0]![0] === "QUEUE_CHANGED" ? [seen[1], summary(await change(w, pos))] : seen;
    expect(rest).toEqual([
      ["RELEASED", "db", "beta", 1, []],
      ["GRANTED", "db", "gamma", 2, []],
    ]);
    expect((await next).lease).toMatchObject({ holderAgentName: "gamma", fencingToken: 2n });
    const e = await evicted.then(
      (r) => ({ granted: r.lease }),
      (x: unknown) => refusalOf(x),
    );
    expect(e).not.toHaveProperty("granted");
  });
});

describe.each(protocols)("EvictAgent over $name", (protocol) => {
  const ops = (t: TestHub, token: string) => createClient(OpsService, protocol.make(t.baseUrl, [withHeaders({ authorization: `Bearer ${token}` })]));
  const leases = (t: TestHub, as: AgentCreds) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));
  const presence = (t: TestHub, headers: Record<string, string> = {}) => createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders(headers)]));
  const acquire = (t: TestHub, as: AgentCreds, name: string, opts: { ttlMs?: number; waitMs?: number } = {}) =>
    pending(leases(t, as).acquireLease({ name, ttlMs: opts.ttlMs ?? 60_000, ...(opts.waitMs !== undefined && { waitMs: opts.waitMs }) }));

  it("marks the agent offline, refuses its key, releases its leases (floors kept) and lists them", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await acquire(t, a!, "db");
    await acquire(t, a!, "cache");
    await acquire(t, b!, "queue");
    t.clock.advance(1_000);
    const r = await ops(t, tokens.p).evictAgent({ project: "p", agentId: a!.id });
    expect(r.agent).toMatchObject({ id: a!.id, name: "alpha", online: false, presence: PresenceState.OFFLINE });
    expect(r.releasedLeases.map((l) => [l.name, l.holderAgentName, Number(l.fencingToken)]).sort()).toEqual([
      ["cache", "alpha", 1],
      ["db", "alpha", 1],
    ]);

    for (const call of [
      () => presence(t, a!.headers).heartbeat({ agentId: a!.id }),
      () => leases(t, a!).renewLease({ name: "db", fencingToken: 1n, ttlMs: 60_000 }),
      () => leases(t, a!).acquireLease({ name: "other" }),
    ]) {
      expect(await refused(call())).toMatchObject({ code: "unauthenticated", reason: "INVALID_AGENT_IDENTITY" });
    }
    const all = (await presence(t, b!.headers).listAgents({ includeOffline: true })).agents;
    expect(all.find((x) => x.id === a!.id)).toMatchObject({ online: false, presence: PresenceState.OFFLINE });
    expect((await leases(t, b!).listLeases({})).leases.map((l) => l.name)).toEqual(["queue"]);
    expect((await acquire(t, b!, "db")).lease?.fencingToken).toBe(2n);
    expect((await acquire(t, b!, "cache")).lease?.fencingToken).toBe(2n);
  });

  it("hands each released lease to its first waiter on the next token", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await acquire(t, a!, "db");
    const wait = acquire(t, b!, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    await ops(t, admin).evictAgent({ project: "p", agentId: a!.id });
    const got = await wait;
    expect(got.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
  });

  it("the agent registers again afterwards: resumed, same id, a key that works", async () => {
    await using t = await startTestHub({ config });
    const [a] = await registerAll(t, ["alpha"]);
    await acquire(t, a!, "db");
    await ops(t, tokens.p).evictAgent({ project: "p", agentId: a!.id });
    const again = await presence(t, { authorization: `Bearer ${tokens.p}` }).registerAgent({ name: "alpha", project: "p" });
    expect([again.resumed, again.takenOver, again.agent?.id, again.releasedLeases]).toEqual([true, false, a!.id, []]);
    const headers = { "x-kxm-agent-id": a!.id, "x-kxm-agent-key": again.agentKey, authorization: `Bearer ${tokens.p}` };
    expect((await presence(t, headers).heartbeat({ agentId: a!.id })).agent?.online).toBe(true);
    expect((await createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(headers)])).acquireLease({ name: "db" })).lease?.fencingToken).toBe(2n);
  });

  it("releases what an agent already offline still holds", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await acquire(t, a!, "db", { ttlMs: 600_000 });
    await presence(t, a!.headers).unregisterAgent({ agentId: a!.id });
    expect((await leases(t, b!).getLease({ name: "db" })).lease?.holderAgentName).toBe("alpha");
    const r = await ops(t, tokens.p).evictAgent({ project: "p", agentId: a!.id });
    expect(r.releasedLeases.map((l) => l.name)).toEqual(["db"]);
    expect((await acquire(t, b!, "db")).lease?.fencingToken).toBe(2n);
  });

  it("refuses another project's agent and an unknown id (TARGET_NOT_FOUND), and another project's token (INVALID_AUTH); nothing changes", async () => {
    await using t = await startTestHub({ config });
    const [a] = await registerAll(t, ["alpha"]);
    const [qa] = await registerAll(t, ["alpha"], "q");
    await acquire(t, qa!, "db");
    expect(await refused(ops(t, tokens.p).evictAgent({ project: "p", agentId: qa!.id }))).toMatchObject({ code: "not_found", reason: "TARGET_NOT_FOUND" });
    expect(await refused(ops(t, admin).evictAgent({ project: "p", agentId: qa!.id }))).toMatchObject({ reason: "TARGET_NOT_FOUND" });
    expect(await refused(ops(t, tokens.p).evictAgent({ project: "p", agentId: "agt_00000000000000000000000000000000" }))).toMatchObject({ reason: "TARGET_NOT_FOUND" });
    expect(await refused(ops(t, tokens.q).evictAgent({ project: "p", agentId: a!.id }))).toMatchObject({ code: "unauthenticated", reason: "INVALID_AUTH" });
    expect((await presence(t, qa!.headers).heartbeat({ agentId: qa!.id })).agent?.online).toBe(true);
    expect((await presence(t, a!.headers).heartbeat({ agentId: a!.id })).agent?.online).toBe(true);
    expect((await leases(t, qa!).getLease({ name: "db" })).lease?.holderAgentId).toBe(qa!.id);
  });

  it("regression: the evicted agent's waiting acquire is refused, not granted the lease its resumed instance takes", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await acquire(t, b!, "db", { ttlMs: 5_000 });
    const evicted = acquire(t, a!, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    await ops(t, tokens.p).evictAgent({ project: "p", agentId: a!.id });
    const again = await t.register("alpha", "p", tokens.p); // resumed: same id, a new key
    expect(again.id).toBe(a!.id);
    // beta's lease lapses with nobody woken; the resumed agent takes it over, which wakes the old call.
    t.clock.jump(5_000);
    expect((await acquire(t, again, "db")).lease).toMatchObject({ holderAgentId: a!.id, fencingToken: 2n });
    const outcome = await evicted.then(
      (r) => ({ granted: Number(r.lease?.fencingToken) }),
      (e: unknown) => ({ refused: refusalOf(e).reason }),
    );
    expect(outcome).toEqual({ refused: "INVALID_AGENT_IDENTITY" });
  });

  it("ends the agent's waiting acquire at the eviction, without waiting for the lease to change", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    await acquire(t, b!, "db");
    const evicted = acquire(t, a!, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    await ops(t, tokens.p).evictAgent({ project: "p", agentId: a!.id });
    expect((await leases(t, b!).getLease({ name: "db" })).lease?.waiters).toEqual([]);
    expect(await settles(evicted)).toBe(true);
    expect(refusalOf(await evicted.catch((e: unknown) => e)).reason).toBe("INVALID_AGENT_IDENTITY");
  });
});

describe("EvictAgent over REST", () => {
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
  const evict = (t: TestHub, project: string, id: string, token: string) =>
    t.rest(`/v1/ops/projects/${project}/agents/${id}`, { method: "DELETE", headers: bearer(token) });

  it("answers the agent offline and its released leases; its key is 401 invalid_agent_identity afterwards", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await registerAll(t, ["alpha", "beta"]);
    const now = t.clock.now();
    await expectRestOk(await t.rest("/v1/leases/db/acquire", { headers: a!.headers, json: { ttlMs: 60_000 } }));
    const body = await expectRestOk(await evict(t, "p", a!.id, tokens.p));
    expect(body.agent).toMatchObject({ id: a!.id, name: "alpha", online: false, presence: "offline" });
    expect(body.releasedLeases).toEqual([
      {
        resource: "p/db",
        project: "p",
        name: "db",
        holderAgentId: a!.id,
        holderAgentName: "alpha",
        fencingToken: 1,
        acquiredAt: iso(now),
        expiresAt: iso(now + 60_000),
        waiters: [],
      },
    ]);
    await expectAgentIdentityRefused(await t.rest(`/v1/agents/${a!.id}/heartbeat`, { method: "POST", headers: a!.headers }));
    await expectAgentIdentityRefused(await t.rest("/v1/leases/db/renew", { headers: a!.headers, json: { fencingToken: 1 } }));
    expect((await expectRestOk(await t.rest("/v1/leases/db/acquire", { headers: b!.headers, json: {} }))).lease.fencingToken).toBe(2);
    // Registering again resumes it: same id, a new key.
    const again = await expectRestOk(await t.rest("/v1/agents/register", { headers: bearer(tokens.p), json: { name: "alpha", project: "p" } }));
    expect([again.resumed, again.agent.id]).toEqual([true, a!.id]);
  });

  it("evicting again still answers; refuses another project's agent (404), another project's token and an agent identity (401)", async () => {
    await using t = await startTestHub({ config });
    const [a] = await registerAll(t, ["alpha"]);
    const [qa] = await registerAll(t, ["alpha"], "q");
    await expectRestError(await evict(t, "p", qa!.id, tokens.p), 404, "target_not_found");
    await expectRestError(await evict(t, "p", qa!.id, admin), 404, "target_not_found");
    await expectAuthRefused(await evict(t, "p", a!.id, tokens.q));
    await expectAuthRefused(await t.rest(`/v1/ops/projects/p/agents/${a!.id}`, { method: "DELETE", headers: { "x-kxm-agent-id": a!.id, "x-kxm-agent-key": a!.key } }));
    expect((await expectRestOk(await evict(t, "p", a!.id, admin))).agent.online).toBe(false);
    expect((await expectRestOk(await evict(t, "p", a!.id, tokens.p))).releasedLeases).toEqual([]);
  });
});
