import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseEventKind, LeaseService, type LeaseEvent, type WatchLeasesResponse } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PeerService, type SubscribeResponse } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService, PresenceState } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { HubConfig } from "../../src/config.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectAgentIdentityRefused, expectRestError, expectRestOk, AGENT_KEY } from "../fixtures/rest.js";
import { refusalOf, refused } from "../fixtures/rpc.js";
import { Frames, idle, StreamScope, streamProtocols } from "../fixtures/streams.js";

/**
 * RegisterAgent with `takeover`: a restarted instance replaces one still marked online at once
 * (same agent id). The old instance's key, streams, leases and queued acquires end in the
 * registration's transaction, and its fencing tokens are never handed out again.
 */

const tokens = { p: "tok-p" };
const keepAliveMs = 15_000;
const config: Partial<HubConfig> = { projectTokens: tokens, cleanupIntervalMs: 3_600_000, streamKeepAliveMs: keepAliveMs };
const bearer = { authorization: `Bearer ${tokens.p}` };

/** A call left pending while the test goes on: a test that fails early must not leave it unhandled. */
function pending<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

/** The credentials an instance calls with. */
const credsOf = (r: { agent?: { id: string; name: string }; agentKey: string }): AgentCreds => ({
  id: r.agent!.id,
  key: r.agentKey,
  name: r.agent!.name,
  project: "p",
  token: tokens.p,
  headers: { "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey, ...bearer },
});

describe.each(protocols)("RegisterAgent with takeover over $name", (protocol) => {
  const presence = (t: TestHub, headers: Record<string, string> = bearer) => createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders(headers)]));
  const leases = (t: TestHub, as: AgentCreds) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));
  const register = async (t: TestHub, name: string, takeover?: boolean) => {
    const r = await presence(t).registerAgent({ name, project: "p", ...(takeover !== undefined && { takeover }) });
    return { r, as: credsOf(r) };
  };
  const acquire = (t: TestHub, as: AgentCreds, name: string, opts: { ttlMs?: number; waitMs?: number } = {}) =>
    pending(leases(t, as).acquireLease({ name, ttlMs: opts.ttlMs ?? 60_000, ...(opts.waitMs !== undefined && { waitMs: opts.waitMs }) }));

  it("replaces an instance still online at once: same id, takenOver, its leases released by name, the old key refused", async () => {
    await using t = await startTestHub({ config });
    const { as: old } = await register(t, "alpha");
    await acquire(t, old, "db");
    await acquire(t, old, "cache");
    t.clock.advance(1_000);

    const { r, as: fresh } = await register(t, "ALPHA", true);
    expect(r).toMatchObject({ resumed: true, takenOver: true, releasedLeases: ["cache", "db"] });
    expect(r.agent).toMatchObject({ id: old.id, name: "ALPHA", online: true, presence: PresenceState.ONLINE });
    expect(r.agentKey).toMatch(AGENT_KEY);
    expect(r.agentKey).not.toBe(old.key);

    for (const call of [
      () => presence(t, old.headers).heartbeat({ agentId: old.id }),
      () => leases(t, old).renewLease({ name: "db", fencingToken: 1n, ttlMs: 60_000 }),
      () => leases(t, old).listLeases({}),
    ]) {
      expect(await refused(call())).toMatchObject({ code: "unauthenticated", reason: "INVALID_AGENT_IDENTITY" });
    }
    expect((await presence(t, fresh.headers).heartbeat({ agentId: fresh.id })).agent).toMatchObject({ id: old.id, online: true });
    expect((await leases(t, fresh).listLeases({})).leases).toEqual([]);
  });

  it("without takeover an online name is DUPLICATE_AGENT_NAME and nothing changes; with takeover: false too", async () => {
    await using t = await startTestHub({ config });
    const { as: old } = await register(t, "alpha");
    await acquire(t, old, "db");
    for (const takeover of [undefined, false]) {
      expect(await refused(presence(t).registerAgent({ name: "alpha", project: "p", ...(takeover !== undefined && { takeover }) }))).toMatchObject({
        code: "already_exists",
        reason: "DUPLICATE_AGENT_NAME",
      });
    }
    expect((await presence(t, old.headers).heartbeat({ agentId: old.id })).agent?.online).toBe(true);
    expect((await leases(t, old).renewLease({ name: "db", fencingToken: 1n, ttlMs: 60_000 })).lease?.holderAgentName).toBe("alpha");
  });

  it("never hands the old instance's token out again: the new instance's renew of it fails, its next acquire is higher", async () => {
    await using t = await startTestHub({ config });
    const { as: old } = await register(t, "alpha");
    const { as: beta } = await register(t, "beta");
    const held = (await acquire(t, old, "db")).lease!;
    const { as: fresh } = await register(t, "alpha", true);

    // The old token names no holder any more, not even the same agent id.
    expect(await refused(leases(t, fresh).renewLease({ name: "db", fencingToken: held.fencingToken, ttlMs: 60_000 }))).toMatchObject({ reason: "LEASE_NOT_FOUND" });
    expect(await refused(leases(t, beta).getLease({ name: "db" }))).toMatchObject({ reason: "LEASE_NOT_FOUND" });
    const again = (await acquire(t, fresh, "db")).lease!;
    expect(again.fencingToken).toBe(held.fencingToken + 1n);
    expect(again.holderAgentId).toBe(old.id);
    const e = await refused(leases(t, fresh).renewLease({ name: "db", fencingToken: held.fencingToken, ttlMs: 60_000 }));
    expect(e).toMatchObject({ code: "aborted", reason: "LEASE_SUPERSEDED" });
    expect(e.lease?.fencingToken).toBe(again.fencingToken);
    expect(await refused(leases(t, old).renewLease({ name: "db", fencingToken: held.fencingToken, ttlMs: 60_000 }))).toMatchObject({
      reason: "INVALID_AGENT_IDENTITY",
    });
    expect(await refused(leases(t, old).releaseLease({ name: "db", fencingToken: again.fencingToken }))).toMatchObject({ reason: "INVALID_AGENT_IDENTITY" });
  });

  it("hands a lease the old instance held to its first waiter on the next token", async () => {
    await using t = await startTestHub({ config });
    const { as: old } = await register(t, "alpha");
    const { as: beta } = await register(t, "beta");
    await acquire(t, old, "db");
    const wait = acquire(t, beta, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    const { r } = await register(t, "alpha", true);
    expect(r.releasedLeases).toEqual(["db"]);
    expect((await wait).lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
  });

  it("ends the old instance's waiting inbox read: it reads nothing sent after the takeover, the new instance does", async () => {
    await using t = await startTestHub({ config });
    const { as: old } = await register(t, "alpha");
    const { as: beta } = await register(t, "beta");
    const peer = (as: AgentCreds) => createClient(PeerService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));
    const oldRead = pending(peer(old).readInbox({ waitMs: 30_000 }));
    await idle(t.clock, 1);
    const { as: fresh } = await register(t, "alpha", true);
    await peer(beta).sendMessage({ target: "alpha", content: "for the new instance" });
    expect(await refused(oldRead)).toMatchObject({ code: "unauthenticated", reason: "INVALID_AGENT_IDENTITY" });
    expect((await peer(fresh).readInbox({})).events.map((e) => (e.event.case === "message" ? e.event.value.content : e.event.case))).toEqual([
      "for the new instance",
    ]);
  });

  it("drops the old instance's queued acquire: it is not granted the lease the new instance is handed", async () => {
    await using t = await startTestHub({ config });
    const { as: old } = await register(t, "alpha");
    const { as: beta } = await register(t, "beta");
    await acquire(t, beta, "db");
    const oldWait = acquire(t, old, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    expect((await leases(t, beta).getLease({ name: "db" })).lease?.waiters.map((w) => w.agentId)).toEqual([old.id]);

    const { as: fresh } = await register(t, "alpha", true);
    expect((await leases(t, beta).getLease({ name: "db" })).lease?.waiters).toEqual([]);
    const newWait = acquire(t, fresh, "db", { waitMs: 60_000 });
    // The new instance (same agent id) joins the queue; the old one does not come back into it.
    let queue: string[] = [];
    for (let i = 0; i < 500 && queue.length === 0; i++) {
      queue = (await leases(t, beta).getLease({ name: "db" })).lease!.waiters.map((w) => w.agentId);
    }
    expect(queue).toEqual([old.id]);

    await leases(t, beta).releaseLease({ name: "db", fencingToken: 1n });
    const handed = await newWait;
    expect(handed.lease).toMatchObject({ holderAgentId: old.id, fencingToken: 2n });
    // The replaced instance must not come away believing it holds token 2 as well.
    const oldOutcome = await oldWait.then(
      (r) => ({ granted: Number(r.lease?.fencingToken) }),
      (e: unknown) => ({ refused: refusalOf(e).reason }),
    );
    expect(oldOutcome).not.toHaveProperty("granted");
  });

  it("regression: the old instance's waiting acquire, woken by the new instance's grant, is refused, not granted the same token", async () => {
    await using t = await startTestHub({ config });
    const { as: old } = await register(t, "alpha");
    const { as: beta } = await register(t, "beta");
    await acquire(t, beta, "db", { ttlMs: 5_000 });
    const oldWait = acquire(t, old, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    const { as: fresh } = await register(t, "alpha", true);
    // beta's lease lapses with nobody woken yet; the new instance takes it over, and that change
    // wakes the old instance's call while the lease names the agent id both instances share.
    t.clock.jump(5_000);
    const taken = await acquire(t, fresh, "db");
    expect(taken.lease).toMatchObject({ holderAgentId: old.id, fencingToken: 2n });
    const oldOutcome = await oldWait.then(
      (r) => ({ granted: Number(r.lease?.fencingToken) }),
      (e: unknown) => ({ refused: refusalOf(e).reason }),
    );
    expect(oldOutcome).toEqual({ refused: "INVALID_AGENT_IDENTITY" });
  });

  it("a lease the old instance holds while its own second call waits for it goes to another agent's waiter, not back to the agent", async () => {
    await using t = await startTestHub({ config });
    const { as: old } = await register(t, "alpha");
    const { as: beta } = await register(t, "beta");
    const { as: gamma } = await register(t, "gamma");
    await acquire(t, beta, "db");
    const first = acquire(t, old, "db", { waitMs: 60_000 });
    const second = acquire(t, old, "db", { waitMs: 60_000 });
    await idle(t.clock, 2);
    await leases(t, beta).releaseLease({ name: "db", fencingToken: 1n });
    expect((await first).lease).toMatchObject({ holderAgentName: "alpha", fencingToken: 2n });
    const gammaWait = acquire(t, gamma, "db", { waitMs: 60_000 });
    await idle(t.clock, 2);
    expect((await leases(t, beta).getLease({ name: "db" })).lease?.waiters.map((w) => w.agentName)).toEqual(["alpha", "gamma"]);

    const { r, as: fresh } = await register(t, "alpha", true);
    expect(r.releasedLeases).toEqual(["db"]);
    expect((await gammaWait).lease).toMatchObject({ holderAgentName: "gamma", fencingToken: 3n });
    expect((await leases(t, beta).getLease({ name: "db" })).lease).toMatchObject({ holderAgentName: "gamma", fencingToken: 3n, waiters: [] });
    expect(await second.then(() => "granted", (e: unknown) => refusalOf(e).reason)).toBe("INVALID_AGENT_IDENTITY");
    // The new instance did not inherit a grant it never asked for: its acquire waits behind gamma.
    expect(await acquire(t, fresh, "db").then(() => "granted", (e: unknown) => refusalOf(e).reason)).toBe("LEASE_HELD");
  });

  it("takeover of a name nobody holds registers it; of an offline agent resumes it; neither is a takeover", async () => {
    await using t = await startTestHub({ config });
    const { r: first } = await register(t, "alpha", true);
    expect(first).toMatchObject({ resumed: false, takenOver: false, releasedLeases: [] });
    await presence(t, credsOf(first).headers).unregisterAgent({ agentId: first.agent!.id });
    const { r: second } = await register(t, "alpha", true);
    expect(second).toMatchObject({ resumed: true, takenOver: false, releasedLeases: [] });
    expect(second.agent?.id).toBe(first.agent?.id);
  });
});

describe("RegisterAgent with takeover over REST", () => {
  const registerRaw = (t: TestHub, body: unknown) => t.rest("/v1/agents/register", { json: body, headers: bearer });

  it("answers takenOver and releasedLeases; without takeover 409 duplicate_agent_name", async () => {
    await using t = await startTestHub({ config });
    const first = await expectRestOk(await registerRaw(t, { name: "alpha", project: "p" }), 201);
    expect([first.takenOver, first.releasedLeases]).toEqual([false, []]);
    const old = credsOf(first as never);
    await expectRestOk(await t.rest("/v1/leases/db/acquire", { headers: old.headers, json: {} }));
    await expectRestError(await registerRaw(t, { name: "alpha", project: "p" }), 409, "duplicate_agent_name");
    await expectRestError(await registerRaw(t, { name: "alpha", project: "p", takeover: false }), 409, "duplicate_agent_name");

    const res = await registerRaw(t, { name: "alpha", project: "p", takeover: true });
    const body = await expectRestOk(res, 200);
    expect(body).toMatchObject({ resumed: true, takenOver: true, releasedLeases: ["db"], agent: { id: old.id, online: true, presence: "online" } });
    await expectAgentIdentityRefused(await t.rest(`/v1/agents/${old.id}/heartbeat`, { method: "POST", headers: old.headers }));
    const fresh = credsOf(body as never);
    expect((await expectRestOk(await t.rest("/v1/leases/db/acquire", { headers: fresh.headers, json: {} }))).lease.fencingToken).toBe(2);
  });
});

describe.each(streamProtocols)("takeover and open streams over $name", (protocol) => {
  const presence = (t: TestHub, headers: Record<string, string> = bearer) => createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders(headers)]));
  const peer = (t: TestHub, as: AgentCreds) => createClient(PeerService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));
  const leases = (t: TestHub, as: AgentCreds) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));
  const register = async (t: TestHub, name: string, takeover?: boolean) => credsOf(await presence(t).registerAgent({ name, project: "p", ...(takeover && { takeover }) }));

  /**
   * The error a stream ends with. Frames the hub sent before it noticed the key change may come
   * first (the watch ends once the presence change reaches it); the end must follow at once.
   */
  async function endOf<T>(f: Frames<T>, maxFrames = 5): Promise<unknown> {
    for (let i = 0; i < maxFrames; i++) {
      try {
        await f.next();
      } catch (e) {
        return e;
      }
    }
    throw new Error(`the stream did not end within ${maxFrames} frames`);
  }

  async function ready(f: Frames<SubscribeResponse>, who: AgentCreds) {
    const r = await f.next();
    if (r.event.case !== "ready") throw new Error(`expected ready, got ${r.event.case}`);
    expect(r.event.value.agent?.id).toBe(who.id);
  }

  /** The next frame that is not a peer's presence change. */
  async function nextOwn(f: Frames<SubscribeResponse>) {
    for (;;) {
      const r = await f.next();
      if (r.event.case !== "presence") return r;
    }
  }

  it("ends the old instance's Subscribe with INVALID_AGENT_IDENTITY; the new instance's stream gets messages and keep-alives", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const old = await register(t, "alpha");
    const beta = await register(t, "beta");
    const oldSub = s.add((signal) => peer(t, old).subscribe({}, { signal }));
    await ready(oldSub, old);

    const fresh = await register(t, "alpha", true);
    expect(refusalOf(await oldSub.error())).toMatchObject({ code: "unauthenticated", reason: "INVALID_AGENT_IDENTITY" });
    // The old stream cannot be opened again with the old key either.
    const reopened = s.add((signal) => peer(t, old).subscribe({}, { signal }));
    expect(refusalOf(await reopened.error())).toMatchObject({ reason: "INVALID_AGENT_IDENTITY" });

    const newSub = s.add((signal) => peer(t, fresh).subscribe({}, { signal }));
    await ready(newSub, fresh);
    const sent = await peer(t, beta).sendMessage({ target: "alpha", content: "to the new instance" });
    const got = await nextOwn(newSub);
    expect(got.event.case === "message" && [got.event.value.id, got.event.value.content]).toEqual([sent.message!.id, "to the new instance"]);

    // Its own presence changing (a heartbeat of the instance) does not end it: the key is still its own.
    await presence(t, fresh.headers).heartbeat({ agentId: fresh.id });
    await idle(t.clock, 1);
    t.clock.advance(keepAliveMs);
    expect((await nextOwn(newSub)).event.case).toBe("keepAlive");
    const agents = (await presence(t, beta.headers).listAgents({})).agents;
    expect(agents.find((a) => a.id === fresh.id)).toMatchObject({ online: true, presence: PresenceState.ONLINE });
  });

  it("ends the old instance's WatchLeases; watchers see the old lease FORCE_RELEASED", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const old = await register(t, "alpha");
    const beta = await register(t, "beta");
    await leases(t, old).acquireLease({ name: "db", ttlMs: 60_000 });
    const own = s.add((signal) => leases(t, old).watchLeases({}, { signal }));
    const other: Frames<WatchLeasesResponse> = s.add((signal) => leases(t, beta).watchLeases({}, { signal }));
    expect((await own.next()).event.case).toBe("snapshot");
    const snap = await other.next();

    const fresh = await register(t, "alpha", true);
    expect(refusalOf(await endOf(own))).toMatchObject({ reason: "INVALID_AGENT_IDENTITY" });
    const change = await other.next();
    expect(change.cursor).toBe(snap.cursor + 1n);
    const e = change.event.value as LeaseEvent;
    expect([change.event.case, LeaseEventKind[e.kind], e.lease?.name, e.lease?.holderAgentId, Number(e.lease?.fencingToken)]).toEqual([
      "change",
      "FORCE_RELEASED",
      "db",
      old.id,
      1,
    ]);
    // The new instance's watch opens and follows.
    const mine = s.add((signal) => leases(t, fresh).watchLeases({}, { signal }));
    expect((await mine.next()).event.case).toBe("snapshot");
    await leases(t, fresh).acquireLease({ name: "db", ttlMs: 60_000 });
    const granted = await mine.next();
    const g = granted.event.value as LeaseEvent;
    expect([LeaseEventKind[g.kind], Number(g.lease?.fencingToken)]).toEqual(["GRANTED", 2]);
  });
});

describe("an old instance's UnregisterAgent after a takeover", () => {
  it("is refused, and the instance that took over stays online with its key", async () => {
    await using t = await startTestHub();
    const old = await t.register("alpha");
    // The old instance's unregister is authenticated (its row read), then held there while a
    // restarted client takes the name over.
    const agents = t.hub.store.agents as { peekCaller: (id: string) => Promise<unknown> };
    const peek = agents.peekCaller.bind(agents);
    let hold: Promise<void> | undefined;
    let release!: () => void;
    let reached!: () => void;
    const atPeek = new Promise<void>((r) => (reached = r));
    agents.peekCaller = async (id: string) => {
      const found = await peek(id);
      if (hold) {
        const h = hold;
        hold = undefined;
        reached();
        await h;
      }
      return found;
    };
    hold = new Promise<void>((r) => (release = r));
    const unregistered = t.rest(`/v1/agents/${old.id}`, { method: "DELETE", headers: old.headers });
    await atPeek;
    const reg = await t.rest("/v1/agents/register", { json: { name: "alpha", project: "p", takeover: true } });
    const body = (await reg.json()) as { agent: { id: string }; agentKey: string; takenOver: boolean };
    expect(body.takenOver).toBe(true);
    release();
    const unreg = await unregistered;
    const heartbeat = await t.rest(`/v1/agents/${body.agent.id}/heartbeat`, {
      method: "POST",
      headers: { "x-kxm-agent-id": body.agent.id, "x-kxm-agent-key": body.agentKey, "content-type": "application/json" },
      body: "{}",
    });
    expect({ unregister: unreg.status, newHeartbeat: heartbeat.status }).toEqual({ unregister: 401, newHeartbeat: 200 });
  });
});
