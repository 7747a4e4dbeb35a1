import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { defaultConfig } from "../../src/config.js";
import { errors } from "../../src/errors.js";
import { createBus } from "../../src/events/bus.js";
import { createLeases, leaseChangeOf, type LeaseChange } from "../../src/lease/leases.js";
import { maxWaitersPerLease } from "../../src/lease/rules.js";
import type { LeaseStore } from "../../src/store/lease-store.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { refusalOf } from "../fixtures/rpc.js";
import { idle, settlesWithin } from "../fixtures/streams.js";

/**
 * AcquireLease with waitMs: the call waits in the resource's queue (first come, first served)
 * and is granted as the holder releases or its lease lapses, or ends with LEASE_HELD when its
 * wait runs out. Every waiting call sleeps on the hub clock, so `idle(clock, n)` says that n of
 * them are queued, and moving the clock is what makes a lease lapse or a wait run out.
 */
describe("blocking acquire", () => {
  const client = (t: TestHub, a: AgentCreds) => createClient(LeaseService, protocols[1].make(t.baseUrl, [withHeaders(a.headers)]));
  const acquire = (t: TestHub, a: AgentCreds, name: string, waitMs?: number, signal?: AbortSignal) =>
    client(t, a).acquireLease({ name, ttlMs: 30_000, ...(waitMs !== undefined && { waitMs }) }, { signal });
  const release = (t: TestHub, a: AgentCreds, name: string, token: bigint) => client(t, a).releaseLease({ name, fencingToken: token });
  const waiting = async (t: TestHub) => Number((await t.sql("SELECT count(*) AS n FROM lease_waiters"))[0]!.n);

  it("hands the lease over in arrival order to 5 waiters, each with the next token, with one call each", async () => {
    await using t = await startTestHub();
    const holder = await t.register("holder");
    const waiters = await Promise.all([1, 2, 3, 4, 5].map((i) => t.register(`waiter-${i}`)));
    const first = await acquire(t, holder, "deploy");
    const calls: Promise<{ lease?: { fencingToken: bigint; holderAgentName: string } }>[] = [];
    for (const [i, w] of waiters.entries()) {
      calls.push(acquire(t, w, "deploy", 60_000));
      await idle(t.clock, i + 1); // queued (asleep on the hub clock) before the next one comes
    }
    expect(await waiting(t)).toBe(5);

    let token = first.lease!.fencingToken;
    await release(t, holder, "deploy", token);
    for (const [i, w] of waiters.entries()) {
      const got = await calls[i]!;
      expect(got.lease).toMatchObject({ holderAgentName: w.name, fencingToken: token + 1n });
      token = got.lease!.fencingToken;
      await release(t, w, "deploy", token);
    }
    expect(await waiting(t)).toBe(0);
    // No polling: one AcquireLease per agent reached the hub, and none was refused.
    const acquires = t.events.filter((e) => e.event === "lease_acquired").length;
    expect(acquires).toBe(6);
    expect(t.events.filter((e) => e.event === "lease_denied")).toEqual([]);
  });

  it("grants a waiter the lease its holder let lapse, as a takeover, when the hub clock passes its expiry", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const held = await client(t, a).acquireLease({ name: "db", ttlMs: 5_000 });
    const wait = acquire(t, b, "db", 60_000);
    await idle(t.clock);
    t.clock.advance(4_999);
    expect(await settlesWithin(wait)).toBe(false);
    await idle(t.clock);
    t.clock.advance(1);
    const got = await wait;
    expect(got.lease).toMatchObject({ holderAgentName: "beta", fencingToken: held.lease!.fencingToken + 1n });
  });

  it("ends with LEASE_HELD and the holder's lease when the wait runs out, and leaves the queue", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const c = await t.register("gamma");
    const held = await acquire(t, a, "db");
    const wait = acquire(t, b, "db", 10_000);
    await idle(t.clock);
    t.clock.advance(10_000);
    const e = refusalOf(await wait.catch((x: unknown) => x));
    expect(e).toMatchObject({ reason: "LEASE_HELD", lease: { holderAgentName: "alpha" } });
    expect(await waiting(t)).toBe(0);
    await release(t, a, "db", held.lease!.fencingToken);
    // Nobody was handed the lease: the next caller gets it.
    expect((await acquire(t, c, "db")).lease).toMatchObject({ holderAgentName: "gamma", fencingToken: held.lease!.fencingToken + 1n });
  });

  it("a wait refused because the queue is full is counted and logged as a lease refusal (queue_full), as the others are", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const c = await t.register("gamma");
    await acquire(t, a, "db");
    const ac = new AbortController();
    const waits = Array.from({ length: maxWaitersPerLease }, () => acquire(t, b, "db", 60_000, ac.signal).catch(() => undefined));
    try {
      await idle(t.clock, maxWaitersPerLease);
      const before = t.counters.get("leasesRefused") ?? 0;
      const e = refusalOf(await acquire(t, c, "db", 60_000).catch((x: unknown) => x));
      expect(e.reason).toBe("LEASE_QUEUE_FULL");
      expect(t.counters.get("leasesRefused")).toBe(before + 1);
      expect(t.events.filter((x) => x.event === "lease_denied").map((x) => x.fields)).toEqual([
        { resource: "p/db", project: "p", agentId: c.id, reason: "queue_full", heldBy: "alpha" },
      ]);
    } finally {
      ac.abort();
      await Promise.all(waits);
    }
  });

  it("takes a call whose client goes away out of the queue", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const c = await t.register("gamma");
    const held = await acquire(t, a, "db");
    const ac = new AbortController();
    const wait = acquire(t, b, "db", 60_000, ac.signal);
    await idle(t.clock);
    expect(await waiting(t)).toBe(1);
    ac.abort();
    await wait.catch(() => undefined);
    for (let i = 0; i < 200 && (await waiting(t)) > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(await waiting(t)).toBe(0);
    await release(t, a, "db", held.lease!.fencingToken);
    expect((await acquire(t, c, "db")).lease).toMatchObject({ holderAgentName: "gamma" });
  });

  it("an agent that unregisters while its acquire waits leaves the queue in that decision: the lease goes to the next waiter", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const c = await t.register("gamma");
    const held = await acquire(t, a, "db");
    const wait = acquire(t, b, "db", 60_000);
    wait.catch(() => undefined); // refused before the test looks at it
    await idle(t.clock);
    await createClient(PresenceService, protocols[1].make(t.baseUrl, [withHeaders(b.headers)])).unregisterAgent({ agentId: b.id });
    expect(await waiting(t)).toBe(0);
    expect(await wait.then(() => "granted", (e: unknown) => refusalOf(e).reason)).toBe("INVALID_AGENT_IDENTITY");
    const next = acquire(t, c, "db", 60_000);
    await idle(t.clock);
    await release(t, a, "db", held.lease!.fencingToken);
    expect((await next).lease).toMatchObject({ holderAgentName: "gamma", fencingToken: held.lease!.fencingToken + 1n });
  });

  it("a waiting call whose look is refused (its agent's key changed under it) leaves the queue instead of keeping its place", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const c = await t.register("gamma");
    const held = await acquire(t, a, "db");
    const wait = acquire(t, b, "db", 60_000);
    wait.catch(() => undefined); // refused before the test looks at it
    await idle(t.clock);
    // The key changes without the decisions that drop the agent's waiters (as another hub's
    // write would look to this one); the holder's renewal wakes the waiting call.
    await t.sql(`UPDATE agents SET key_hash = '${"0".repeat(64)}' WHERE id = '${b.id}' RETURNING id`);
    await client(t, a).renewLease({ name: "db", fencingToken: held.lease!.fencingToken, ttlMs: 30_000 });
    expect(await wait.then(() => "granted", (e: unknown) => refusalOf(e).reason)).toBe("INVALID_AGENT_IDENTITY");
    expect(await waiting(t)).toBe(0);
    const next = acquire(t, c, "db", 60_000);
    await idle(t.clock);
    await release(t, a, "db", held.lease!.fencingToken);
    expect((await next).lease).toMatchObject({ holderAgentName: "gamma", fencingToken: held.lease!.fencingToken + 1n });
  });

  it("a waiting call of an instance taken over, refused at its next look, leaves the new instance's lease alone", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const old = await t.register("beta");
    await client(t, a).acquireLease({ name: "db", ttlMs: 5_000 });
    const wait = acquire(t, old, "db", 60_000);
    wait.catch(() => undefined); // refused before the test looks at it
    await idle(t.clock);
    // alpha's lease lapses (nobody woken yet); beta restarts, and its new instance takes the lease.
    t.clock.jump(5_000);
    const res = await t.rest("/v1/agents/register", { json: { name: "beta", project: "p", takeover: true } });
    const body = (await res.json()) as { agent: { id: string }; agentKey: string };
    const fresh = { ...old, key: body.agentKey, headers: { "x-kxm-agent-id": body.agent.id, "x-kxm-agent-key": body.agentKey } };
    const got = await acquire(t, fresh, "db");
    expect(got.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    // The grant woke the old instance's waiting call: its look is refused, and it leaves.
    expect(await wait.then(() => "granted", (e: unknown) => refusalOf(e).reason)).toBe("INVALID_AGENT_IDENTITY");
    const lease = await client(t, fresh).getLease({ name: "db" });
    expect(lease.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
  });

  it("an agent resumed after going stale takes its old instance's waiting calls out of the queues: the lease goes to the next waiter", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const old = await t.register("beta");
    const c = await t.register("gamma");
    const held = await client(t, a).acquireLease({ name: "db", ttlMs: 600_000 });
    const stale = acquire(t, old, "db", 600_000);
    stale.catch(() => undefined); // refused before the test looks at it
    await idle(t.clock, 1);
    const next = acquire(t, c, "db", 600_000);
    await idle(t.clock, 2);
    // beta's old instance goes quiet: the sweep marks it offline, and a new instance resumes it.
    t.clock.jump(30_001);
    await t.hub.sweepNow();
    await t.register("beta");
    expect(await waiting(t)).toBe(1);
    await release(t, a, "db", held.lease!.fencingToken);
    expect((await next).lease).toMatchObject({ holderAgentName: "gamma", fencingToken: 2n });
    expect(await stale.then(() => "granted", (e: unknown) => refusalOf(e).reason)).toBe("INVALID_AGENT_IDENTITY");
  });

  it("keeps a waiting caller's agent online past its presence lease: the wait records its activity, as a stream's keep-alive does", async () => {
    await using t = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 } });
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const held = await client(t, a).acquireLease({ name: "db", ttlMs: 600_000 });
    const asleep = t.clock.sleepers;
    const wait = acquire(t, b, "db", 600_000);
    // 60 s of hub time, one keep-alive interval (15 s) at a time, twice the 30 s presence lease.
    for (let i = 0; i < 4; i++) {
      await idle(t.clock, asleep + 1);
      t.clock.advance(defaultConfig.streamKeepAliveMs);
    }
    await idle(t.clock, asleep + 1);
    await t.hub.sweepNow();
    const presence = createClient(PresenceService, protocols[1].make(t.baseUrl, [withHeaders(a.headers)]));
    const listed = (await presence.listAgents({ includeOffline: true })).agents.find((x) => x.id === b.id);
    expect({ online: listed?.online, stale: t.events.filter((e) => e.event === "agent_stale" && e.fields.agentId === b.id).length }).toEqual({ online: true, stale: 0 });
    await release(t, a, "db", held.lease!.fencingToken);
    expect((await wait).lease).toMatchObject({ holderAgentName: "beta", fencingToken: held.lease!.fencingToken + 1n });
  });

  it("never lets a caller that does not wait take a lease a waiter is first in line for", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const c = await t.register("gamma");
    await client(t, a).acquireLease({ name: "db", ttlMs: 5_000 });
    const wait = acquire(t, b, "db", 60_000);
    await idle(t.clock);
    // The lease lapses; the caller that does not wait comes before the waiter looks again.
    t.clock.jump(5_000);
    const e = refusalOf(await acquire(t, c, "db").catch((x: unknown) => x));
    expect(e).toMatchObject({ reason: "LEASE_HELD", lease: { holderAgentName: "beta" } });
    // The handover woke the waiter: it holds the lease it was handed.
    expect((await wait).lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
  });

  it("a call of the waiter's own agent that does not wait is refused a lapsed lease its waiting call is first in line for", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    await client(t, a).acquireLease({ name: "db", ttlMs: 5_000 });
    const wait = acquire(t, b, "db", 60_000);
    await idle(t.clock);
    // The lease lapses; beta's other call comes before its waiting call looks again.
    t.clock.jump(5_000);
    const e = refusalOf(await acquire(t, b, "db").catch((x: unknown) => x));
    expect(e).toMatchObject({ reason: "LEASE_HELD", lease: { holderAgentName: "beta", fencingToken: 2n } });
    // The lease went to the waiting call, on a token only it was given.
    expect((await wait).lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    expect(await waiting(t)).toBe(0);
  });

  it("two waiting calls of one agent: the one whose wait ran out is not granted the lease handed to the other", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const held = await acquire(t, a, "db");
    const first = acquire(t, b, "db", 10_000);
    first.catch(() => undefined); // refused before the test looks at it
    await idle(t.clock, 1);
    const second = acquire(t, b, "db", 60_000);
    await idle(t.clock, 2);
    // The first call's wait runs out (nobody woken yet); alpha's release hands the lease on.
    t.clock.jump(10_000);
    await release(t, a, "db", held.lease!.fencingToken);
    expect((await second).lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    expect(await first.then((r) => `granted ${r.lease!.fencingToken}`, (x: unknown) => refusalOf(x).reason)).toBe("LEASE_HELD");
  });

  it("a waiting call is granted a lease an older hub handed it, which recorded no hand-over (a rolling upgrade)", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const c = await t.register("gamma");
    const held = await client(t, a).acquireLease({ name: "db", ttlMs: 600_000 });
    const wait = acquire(t, b, "db", 60_000);
    wait.catch(() => undefined); // refused before the test looks at it, if it is
    await idle(t.clock, 1);
    const [w] = await t.sql("SELECT id FROM lease_waiters");
    // alpha releases through a hub of the release before D64: it hands the lease to beta's call
    // with the statements that release ran, which know nothing of handed_to and handed_token.
    const now = t.clock.now();
    const token = Number(held.lease!.fencingToken) + 1;
    await t.sql(`DELETE FROM lease_waiters WHERE id = '${String(w!.id)}' RETURNING id`);
    await t.sql(
      `UPDATE leases SET holder_agent_id = '${b.id}', holder_agent_name = 'beta', fencing_token = ${token}, acquired_at = ${now},
         expires_at = ${now + 30_000} WHERE project = 'p' AND name = 'db' RETURNING name`,
    );
    const next = acquire(t, c, "db", 600_000); // its queueing wakes beta's call
    next.catch(() => undefined);
    expect(await wait.then((r) => `granted ${r.lease!.fencingToken}`, (x: unknown) => refusalOf(x).reason)).toBe(`granted ${token}`);
  });

  it("a waiting call whose wait ran out is not granted the lease its agent's other call took meanwhile", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    await client(t, a).acquireLease({ name: "db", ttlMs: 5_000 });
    const wait = acquire(t, b, "db", 5_000);
    wait.catch(() => undefined); // refused before the test looks at it
    await idle(t.clock);
    t.clock.jump(5_000); // the lease lapses and the wait runs out; nobody is woken yet
    const plain = await acquire(t, b, "db");
    expect(plain.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    expect(await wait.then((r) => `granted ${r.lease!.fencingToken}`, (x: unknown) => refusalOf(x).reason)).toBe("LEASE_HELD");
    expect((await client(t, b).getLease({ name: "db" })).lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
  });

  it("waits through REST with waitMs, and refuses a wait out of range", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const held = await acquire(t, a, "db");
    const wait = t.rest("/v1/leases/db/acquire", { headers: b.headers, json: { ttlMs: 30_000, waitMs: 60_000 } });
    await idle(t.clock);
    await release(t, a, "db", held.lease!.fencingToken);
    const res = await wait;
    expect(res.status).toBe(200);
    expect(((await res.json()) as { lease: { holderAgentName: string; fencingToken: number } }).lease).toMatchObject({
      holderAgentName: "beta",
      fencingToken: 2,
    });
    const bad = await t.rest("/v1/leases/x/acquire", { headers: b.headers, json: { waitMs: 600_001 } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { code: string }).code).toBe("protocol_error");
  });
});

describe("blocking acquire, a client gone during its last look", () => {
  /**
   * Leases on an in-memory store, agents a, b and c registered in project p; once armed, b's next
   * decision (its look after a release) runs `onLook` with its answer before b's call sees it.
   */
  async function lastLook(onLook: (answer: unknown) => Promise<void> | void, onDecided?: (holderId: string | undefined) => void) {
    const clock = new FakeClock();
    const store = new SqliteStore({ path: ":memory:", synchronous: "full", clock });
    const bus = createBus<LeaseChange>((c) => c.project);
    store.changes.tailChanges((c) => {
      if (c.stream === "leases") bus.publish(leaseChangeOf(c));
    });
    let armed = false;
    const leaseStore: LeaseStore = Object.create(store.leases);
    leaseStore.decideLease = (key, decide, holderId) => {
      const decided = store.leases.decideLease(
        key,
        (...args) => {
          const d = decide(...args);
          onDecided?.(holderId);
          return d;
        },
        holderId,
      );
      if (!armed || holderId !== "agt_b") return decided;
      armed = false;
      return decided.then(async (answer) => {
        await onLook(answer);
        return answer;
      });
    };
    const events: { event: string; fields: Record<string, unknown> }[] = [];
    const counters = new Map<string, number>();
    const observer = {
      log: (event: string, fields: Record<string, unknown>) => void events.push({ event, fields }),
      count: (name: string, by = 1) => void counters.set(name, (counters.get(name) ?? 0) + by),
    };
    const leases = createLeases({ store: { leases: leaseStore, changes: store.changes }, clock, observer, bus });
    for (const name of ["a", "b", "c"]) {
      const row = { id: `agt_${name}`, project: "p", name, purpose: "test", keyHash: "0".repeat(64), connectedAtMs: 0, lastSeenAtMs: 0, online: true };
      await store.agents.decideAgentLeases({ project: "p", nameKey: name }, () => ({ write: row, result: undefined }));
    }
    const caller = (name: string) => ({ kind: "agent" as const, agentId: `agt_${name}`, agentName: name, project: "p" });
    const outcome = <T>(p: Promise<T>, value: (t: T) => string) => p.then(value, (e: { code?: string }) => e.code);
    /** a holds db; b waits for it, then c; resolves once both are queued. */
    async function queued(betaSignal: AbortSignal) {
      const held = await leases.acquire(caller("a"), { name: "db", ttlMs: 60_000 });
      const beta = outcome(leases.acquire(caller("b"), { name: "db", ttlMs: 60_000, waitMs: 30_000 }, betaSignal), () => "granted");
      await idle(clock, 1);
      const gamma = leases.acquire(caller("c"), { name: "db", ttlMs: 60_000, waitMs: 30_000 });
      await idle(clock, 2);
      return { held, beta, gamma };
    }
    return { store, leases, caller, queued, clock, events, counters, arm: () => (armed = true) };
  }

  it("a call whose client goes away while the look that hands it the lease runs gives the lease on to the next in line", async () => {
    const betaClient = new AbortController();
    const t = await lastLook(() => betaClient.abort());
    try {
      const { held, beta, gamma } = await t.queued(betaClient.signal);
      t.arm();
      await t.leases.release(t.caller("a"), { name: "db", fencingToken: held.lease.fencingToken });
      expect(await beta).toBe("lease_held");
      expect((await gamma).lease).toMatchObject({ holderAgentName: "c", fencingToken: held.lease.fencingToken + 2 });
      expect((await t.leases.get({ project: "p" }, { name: "db" })).lease).toMatchObject({ holderAgentName: "c", waiters: [] });
    } finally {
      await t.store.close();
    }
  });

  it("the lease such a call gives on is counted and logged as granted to it and released by it, as every other grant and release is", async () => {
    const betaClient = new AbortController();
    const t = await lastLook(() => betaClient.abort());
    try {
      const { held, beta, gamma } = await t.queued(betaClient.signal);
      t.arm();
      await t.leases.release(t.caller("a"), { name: "db", fencingToken: held.lease.fencingToken });
      expect(await beta).toBe("lease_held");
      await gamma;
      const handed = held.lease.fencingToken + 1;
      const lines = t.events
        .filter((e) => e.event === "lease_acquired" || e.event === "lease_released")
        .map((e) => `${e.event} ${String(e.fields.agentId)} ${String(e.fields.fencingToken)}`);
      expect(lines).toEqual([
        `lease_acquired agt_a ${handed - 1}`,
        `lease_released agt_a ${handed - 1}`,
        `lease_acquired agt_b ${handed}`,
        `lease_released agt_b ${handed}`,
        `lease_acquired agt_c ${handed + 1}`,
      ]);
      expect(t.events.find((e) => e.event === "lease_released" && e.fields.agentId === "agt_b")?.fields).toMatchObject({ resource: "p/db", project: "p" });
      expect(Object.fromEntries(t.counters)).toMatchObject({ leasesGranted: 3, leasesReleased: 2 });
    } finally {
      await t.store.close();
    }
  });

  it("a call whose wait ran out as the lease was handed to it, and whose client goes away while it leaves, gives the lease on", async () => {
    const betaClient = new AbortController();
    let handing = false;
    // The release hands beta the lease in beta's last millisecond; the clock then passes beta's
    // deadline, so beta leaves the queue keeping the lease, and its client goes away meanwhile.
    const t = await lastLook(
      () => betaClient.abort(),
      (holderId) => {
        if (handing && holderId === undefined) {
          handing = false;
          t.clock.jump(1);
        }
      },
    );
    try {
      const held = await t.leases.acquire(t.caller("a"), { name: "db", ttlMs: 60_000 });
      const beta = t.leases.acquire(t.caller("b"), { name: "db", ttlMs: 60_000, waitMs: 30_000 }, betaClient.signal).then(
        () => "granted",
        (e: { code?: string }) => e.code,
      );
      await idle(t.clock, 1);
      const gamma = t.leases.acquire(t.caller("c"), { name: "db", ttlMs: 60_000, waitMs: 60_000 });
      await idle(t.clock, 2);
      t.clock.jump(29_999);
      handing = true;
      t.arm();
      await t.leases.release(t.caller("a"), { name: "db", fencingToken: held.lease.fencingToken });
      expect(await beta).toBe("lease_held");
      expect((await gamma).lease).toMatchObject({ holderAgentName: "c", fencingToken: held.lease.fencingToken + 2 });
    } finally {
      await t.store.close();
    }
  });

  /**
   * A call made with a managed token ends with invalid_auth once the token ends: its signal aborts
   * with that hub error as its reason (token-guard.ts). Its first look may run after that (the
   * store slow, the wait not yet begun): that look must not queue it, nor hand it a lease free by then.
   */
  it("a waiting call whose token ended before its first look ran is refused with that, neither queued nor granted", async () => {
    const t = await lastLook(() => {});
    try {
      const tokenEnded = new AbortController();
      tokenEnded.abort(errors.invalidAuth());
      const refused = (name: string) =>
        t.leases.acquire(t.caller("b"), { name, ttlMs: 60_000, waitMs: 30_000 }, tokenEnded.signal).then(
          () => "granted",
          (e: { code?: string }) => e.code,
        );
      expect(await refused("free")).toBe("invalid_auth");
      const held = await t.leases.acquire(t.caller("a"), { name: "db", ttlMs: 60_000 });
      expect(await refused("db")).toBe("invalid_auth");
      expect(await t.leases.get({ project: "p" }, { name: "free" }).then(() => "held", (e: { code?: string }) => e.code)).toBe("lease_not_found");
      expect((await t.leases.get({ project: "p" }, { name: "db" })).lease).toMatchObject({ holderAgentName: "a", fencingToken: held.lease.fencingToken, waiters: [] });
      expect(t.events.filter((e) => e.event === "lease_acquired").map((e) => e.fields.agentId)).toEqual(["agt_a"]);
    } finally {
      await t.store.close();
    }
  });
});
