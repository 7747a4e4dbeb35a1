import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseEventKind, LeaseService, type Lease, type LeaseEvent, type WatchLeasesResponse } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import type { HubConfig } from "../../src/config.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectRestOk, iso } from "../fixtures/rest.js";
import { ms, refusalOf } from "../fixtures/rpc.js";
import { Frames, idle, StreamScope, streamProtocols } from "../fixtures/streams.js";

/**
 * A lease's queue as callers see it: how long a waiting acquire waited (waitedMs), the waiters
 * GetLease, ListLeases and WatchLeases show (first in line first, without the ones whose wait
 * ran out), and the QUEUE_CHANGED changes a watcher sees as calls join and leave the queue.
 * Every waiting call sleeps on the hub clock: `idle(clock, n)` says n sleepers are there.
 */

const tokens = { p: "tok-p" };
const config: Partial<HubConfig> = { projectTokens: tokens, cleanupIntervalMs: 3_600_000 };

/** A waiter as a test compares it: name and hub-clock times. */
const waiterOf = (w: { agentName: string; since?: Parameters<typeof ms>[0]; waitUntil?: Parameters<typeof ms>[0] }) => ({
  name: w.agentName,
  since: ms(w.since),
  until: ms(w.waitUntil),
});
const waitersOf = (l: Lease | undefined) => (l?.waiters ?? []).map(waiterOf);

/** A call left pending while the test goes on: a test that fails early must not leave it unhandled. */
function pending<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

/** Agents of project p: the holder and the waiters, registered over REST. */
async function agents(t: TestHub, ...names: string[]): Promise<AgentCreds[]> {
  const out: AgentCreds[] = [];
  for (const n of names) out.push(await t.register(n, "p", tokens.p));
  return out;
}

describe.each(protocols)("waitedMs and waiters over $name", (protocol) => {
  const leases = (t: TestHub, as: AgentCreds) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));
  const acquire = (t: TestHub, as: AgentCreds, name: string, opts: { ttlMs?: number; waitMs?: number; signal?: AbortSignal } = {}) =>
    pending(leases(t, as).acquireLease({ name, ttlMs: opts.ttlMs ?? 120_000, ...(opts.waitMs !== undefined && { waitMs: opts.waitMs }) }, { signal: opts.signal }));

  it("waitedMs is 0 for an acquire that did not wait: without waitMs, on a free resource with waitMs, and for the holder's own lease", async () => {
    await using t = await startTestHub({ config });
    const [a] = await agents(t, "alpha");
    const plain = await acquire(t, a!, "one");
    expect([plain.renewed, plain.waitedMs]).toEqual([false, 0]);
    const free = await acquire(t, a!, "two", { waitMs: 30_000 });
    expect([free.renewed, free.waitedMs, Number(free.lease?.fencingToken)]).toEqual([false, 0, 1]);
    t.clock.advance(5_000);
    const own = await acquire(t, a!, "two", { waitMs: 30_000 });
    expect([own.renewed, own.waitedMs]).toEqual([true, 0]);
  });

  it("waitedMs is the hub time the call spent in the queue: 12000 when the holder releases at +12 s", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await agents(t, "alpha", "beta");
    const held = (await acquire(t, a!, "db", { ttlMs: 60_000 })).lease!;
    const wait = acquire(t, b!, "db", { waitMs: 30_000, ttlMs: 20_000 });
    await idle(t.clock);
    t.clock.advance(12_000);
    await leases(t, a!).releaseLease({ name: "db", fencingToken: held.fencingToken });
    const got = await wait;
    expect(got.waitedMs).toBe(12_000);
    expect(got.renewed).toBe(false);
    expect(got.lease).toMatchObject({ holderAgentName: "beta", fencingToken: held.fencingToken + 1n });
    // The grant is as old as the wait: acquiredAt is the release's time, its TTL counts from there.
    expect(ms(got.lease?.acquiredAt)).toBe(ms(held.acquiredAt) + 12_000);
    expect(ms(got.lease?.expiresAt)).toBe(t.clock.now() + 20_000);
  });

  it("waitedMs counts up to the lapse when the waiter takes over a lease its holder let lapse", async () => {
    await using t = await startTestHub({ config });
    const [a, b] = await agents(t, "alpha", "beta");
    await acquire(t, a!, "db", { ttlMs: 5_000 });
    t.clock.advance(1_000);
    const wait = acquire(t, b!, "db", { waitMs: 30_000 });
    await idle(t.clock);
    t.clock.advance(4_000);
    const got = await wait;
    expect(got.waitedMs).toBe(4_000);
    expect(got.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
  });

  it("GetLease and ListLeases show the waiters first in line first, with since and waitUntil; a waiter whose wait ran out is not shown", async () => {
    await using t = await startTestHub({ config });
    const [a, b, c] = await agents(t, "alpha", "beta", "gamma");
    const t0 = t.clock.now();
    await acquire(t, a!, "db");
    await acquire(t, a!, "other");
    const first = acquire(t, b!, "db", { waitMs: 30_000 });
    await idle(t.clock, 1);
    t.clock.advance(1_000);
    const second = acquire(t, c!, "db", { waitMs: 60_000 });
    await idle(t.clock, 2);

    const queue = [
      { name: "beta", since: t0, until: t0 + 30_000 },
      { name: "gamma", since: t0 + 1_000, until: t0 + 61_000 },
    ];
    const got = await leases(t, a!).getLease({ name: "db" });
    expect(got.lease?.holderAgentName).toBe("alpha");
    expect(waitersOf(got.lease)).toEqual(queue);
    expect(got.lease?.waiters.map((w) => w.agentId)).toEqual([b!.id, c!.id]);
    // A waiter reads the queue it stands in too.
    expect(waitersOf((await leases(t, c!).getLease({ name: "db" })).lease)).toEqual(queue);
    const list = await leases(t, a!).listLeases({});
    expect(list.leases.map((l) => [l.name, waitersOf(l)])).toEqual([
      ["db", queue],
      ["other", []],
    ]);

    // beta's wait has run out (the hub has not woken it yet): it is no longer shown.
    t.clock.jump(29_000);
    expect(waitersOf((await leases(t, a!).getLease({ name: "db" })).lease)).toEqual([queue[1]]);
    expect(waitersOf((await leases(t, a!).listLeases({})).leases[0])).toEqual([queue[1]]);
    t.clock.advance(0); // wakes it: it ends with LEASE_HELD
    expect(refusalOf(await first.catch((e: unknown) => e))).toMatchObject({ reason: "LEASE_HELD" });
    expect(waitersOf((await leases(t, a!).getLease({ name: "db" })).lease)).toEqual([queue[1]]);

    await leases(t, a!).releaseLease({ name: "db", fencingToken: 1n });
    const handed = await second;
    expect(handed.lease).toMatchObject({ holderAgentName: "gamma", fencingToken: 2n });
    expect(handed.waitedMs).toBe(29_000); // gamma joined at +1 s, the release came at +30 s
    expect(waitersOf((await leases(t, a!).getLease({ name: "db" })).lease)).toEqual([]);
  });

  it("the answers of AcquireLease and RenewLease carry the queue as it stands after the call; ReleaseLease's answer and a refusal's lease do not", async () => {
    await using t = await startTestHub({ config });
    const [a, b, c, d, e] = await agents(t, "alpha", "beta", "gamma", "delta", "epsilon");
    await acquire(t, a!, "db", { ttlMs: 5_000 });
    const first = acquire(t, b!, "db", { waitMs: 60_000 });
    await idle(t.clock, 1);
    const second = acquire(t, c!, "db", { waitMs: 60_000 });
    await idle(t.clock, 2);
    const third = acquire(t, d!, "db", { waitMs: 60_000 });
    await idle(t.clock, 3);
    const names = (l: Lease | undefined) => (l?.waiters ?? []).map((w) => w.agentName);
    expect(names((await leases(t, a!).getLease({ name: "db" })).lease)).toEqual(["beta", "gamma", "delta"]);

    const renewed = await leases(t, a!).renewLease({ name: "db", fencingToken: 1n, ttlMs: 5_000 });
    expect.soft(names(renewed.lease), "RenewLease").toEqual(["beta", "gamma", "delta"]);
    const extended = await acquire(t, a!, "db", { ttlMs: 5_000 });
    expect(extended.renewed).toBe(true);
    expect.soft(names(extended.lease), "AcquireLease of the holder's own lease").toEqual(["beta", "gamma", "delta"]);
    const held = refusalOf(await acquire(t, e!, "db").catch((x: unknown) => x));
    expect(held.reason).toBe("LEASE_HELD");
    expect.soft(names(held.lease), "LEASE_HELD detail").toEqual([]);

    // The lease lapses: the first in line takes it over, and sees who waits behind it.
    await idle(t.clock, 3);
    t.clock.advance(5_000);
    const got = await first;
    expect(got.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    expect.soft(names(got.lease), "AcquireLease taken over out of the queue").toEqual(["gamma", "delta"]);
    const released = await leases(t, b!).releaseLease({ name: "db", fencingToken: 2n });
    expect.soft(names(released.lease), "ReleaseLease").toEqual([]);
    // Handed over at the release: the grant's answer shows the rest of the queue too.
    const handed = await second;
    expect(handed.lease).toMatchObject({ holderAgentName: "gamma", fencingToken: 3n });
    expect.soft(names(handed.lease), "AcquireLease handed over at a release").toEqual(["delta"]);
    await leases(t, c!).releaseLease({ name: "db", fencingToken: 3n });
    expect.soft(names((await third).lease), "AcquireLease handed over, nobody behind").toEqual([]);
  });
});

describe("waiters over REST", () => {
  it("acquire answers waitedMs, and GET /v1/leases/{name} and /v1/leases show the queue with ISO times", async () => {
    await using t = await startTestHub({ config });
    const [a, b, c] = await agents(t, "alpha", "beta", "gamma");
    const t0 = t.clock.now();
    const held = await expectRestOk(await t.rest("/v1/leases/db/acquire", { headers: a!.headers, json: { ttlMs: 120_000 } }));
    expect(held.waitedMs).toBe(0);
    const wait = pending(t.rest("/v1/leases/db/acquire", { headers: b!.headers, json: { ttlMs: 30_000, waitMs: 30_000 } }));
    await idle(t.clock, 1);
    t.clock.advance(2_000);
    const wait2 = pending(t.rest("/v1/leases/db/acquire", { headers: c!.headers, json: { waitMs: 60_000 } }));
    await idle(t.clock, 2);

    const queue = [
      { agentId: b!.id, agentName: "beta", since: iso(t0), waitUntil: iso(t0 + 30_000) },
      { agentId: c!.id, agentName: "gamma", since: iso(t0 + 2_000), waitUntil: iso(t0 + 62_000) },
    ];
    const one = await expectRestOk(await t.rest("/v1/leases/db", { headers: a!.headers }));
    expect(one.lease.waiters).toEqual(queue);
    const all = await expectRestOk(await t.rest("/v1/leases", { headers: a!.headers }));
    expect(all.leases.map((l: { name: string; waiters: unknown }) => [l.name, l.waiters])).toEqual([["db", queue]]);

    t.clock.advance(10_000);
    await expectRestOk(await t.rest("/v1/leases/db/release", { headers: a!.headers, json: { fencingToken: 1 } }));
    const got = await expectRestOk(await wait);
    expect(got).toMatchObject({ renewed: false, waitedMs: 12_000, lease: { holderAgentName: "beta", fencingToken: 2 } });
    await expectRestOk(await t.rest("/v1/leases/db/release", { headers: b!.headers, json: { fencingToken: 2 } }));
    expect(await expectRestOk(await wait2)).toMatchObject({ waitedMs: 10_000, lease: { holderAgentName: "gamma", fencingToken: 3, waiters: [] } });
  });
});

/** WatchLeases shows the queue: QUEUE_CHANGED as calls join and leave it, then the grant to the first in line. */
describe.each(streamProtocols)("WatchLeases queue changes over $name", (protocol) => {
  const leases = (t: TestHub, as: AgentCreds) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));
  const acquire = (t: TestHub, as: AgentCreds, name: string, opts: { ttlMs?: number; waitMs?: number; signal?: AbortSignal } = {}) =>
    pending(leases(t, as).acquireLease({ name, ttlMs: opts.ttlMs ?? 120_000, ...(opts.waitMs !== undefined && { waitMs: opts.waitMs }) }, { signal: opts.signal }));

  async function snapshot(f: Frames<WatchLeasesResponse>) {
    const r = await f.next();
    if (r.event.case !== "snapshot") throw new Error(`expected a snapshot, got ${r.event.case}`);
    return { cursor: r.cursor, leases: r.event.value.leases };
  }

  /** The next change, its cursor one above the last. */
  async function change(f: Frames<WatchLeasesResponse>, pos: { cursor: bigint }): Promise<LeaseEvent> {
    const r = await f.next();
    if (r.event.case !== "change") throw new Error(`expected a change, got ${r.event.case}`);
    expect(r.cursor).toBe(pos.cursor + 1n);
    pos.cursor = r.cursor;
    return r.event.value;
  }

  const summary = (e: LeaseEvent) => ({
    kind: LeaseEventKind[e.kind],
    holder: e.lease?.holderAgentName,
    token: Number(e.lease?.fencingToken),
    waiters: (e.lease?.waiters ?? []).map((w) => w.agentName),
  });

  it("QUEUE_CHANGED as waiters join, as one's client goes away and as one's wait runs out; then RELEASED and the GRANTED to the first in line", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const [a, b, c, d] = await agents(t, "alpha", "beta", "gamma", "delta");
    const t0 = t.clock.now();
    await acquire(t, a!, "db");
    const w = s.add((signal) => leases(t, a!).watchLeases({}, { signal }));
    const snap = await snapshot(w);
    expect(snap.leases.map((l) => [l.name, l.holderAgentName, waitersOf(l)])).toEqual([["db", "alpha", []]]);
    const pos = { cursor: snap.cursor };

    const first = acquire(t, b!, "db", { waitMs: 60_000 });
    const joined = await change(w, pos);
    expect(summary(joined)).toEqual({ kind: "QUEUE_CHANGED", holder: "alpha", token: 1, waiters: ["beta"] });
    expect(waitersOf(joined.lease)).toEqual([{ name: "beta", since: t0, until: t0 + 60_000 }]);
    expect(ms(joined.lease?.expiresAt)).toBe(t0 + 120_000);

    const gone = new AbortController();
    const second = acquire(t, c!, "db", { waitMs: 60_000, signal: gone.signal });
    expect(summary(await change(w, pos))).toEqual({ kind: "QUEUE_CHANGED", holder: "alpha", token: 1, waiters: ["beta", "gamma"] });
    const third = acquire(t, d!, "db", { waitMs: 10_000 });
    expect(summary(await change(w, pos))).toEqual({ kind: "QUEUE_CHANGED", holder: "alpha", token: 1, waiters: ["beta", "gamma", "delta"] });

    // A late watcher's snapshot shows the queue as it stands.
    const late = s.add((signal) => leases(t, d!).watchLeases({}, { signal }));
    expect((await snapshot(late)).leases.map((l) => l.waiters.map((x) => x.agentName))).toEqual([["beta", "gamma", "delta"]]);
    late.close();

    gone.abort();
    await second.catch(() => undefined);
    expect(summary(await change(w, pos))).toEqual({ kind: "QUEUE_CHANGED", holder: "alpha", token: 1, waiters: ["beta", "delta"] });

    await idle(t.clock, 3); // the watcher and the two waiters
    t.clock.advance(10_000);
    expect(refusalOf(await third.catch((e: unknown) => e))).toMatchObject({ reason: "LEASE_HELD" });
    expect(summary(await change(w, pos))).toEqual({ kind: "QUEUE_CHANGED", holder: "alpha", token: 1, waiters: ["beta"] });

    await leases(t, a!).releaseLease({ name: "db", fencingToken: 1n });
    expect(summary(await change(w, pos))).toEqual({ kind: "RELEASED", holder: "alpha", token: 1, waiters: [] });
    expect(summary(await change(w, pos))).toEqual({ kind: "GRANTED", holder: "beta", token: 2, waiters: [] });
    const got = await first;
    expect(got.lease).toMatchObject({ holderAgentName: "beta", fencingToken: 2n });
    expect(got.waitedMs).toBe(10_000);
  });

  it("a grant out of a queue of two carries the rest of the queue; the lapse of a holder hands over as TAKEN_OVER", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const [a, b, c] = await agents(t, "alpha", "beta", "gamma");
    await acquire(t, a!, "db", { ttlMs: 5_000 });
    const w = s.add((signal) => leases(t, a!).watchLeases({}, { signal }));
    const pos = { cursor: (await snapshot(w)).cursor };
    const first = acquire(t, b!, "db", { waitMs: 60_000 });
    expect(summary(await change(w, pos)).waiters).toEqual(["beta"]);
    const second = acquire(t, c!, "db", { waitMs: 60_000 });
    expect(summary(await change(w, pos)).waiters).toEqual(["beta", "gamma"]);
    await idle(t.clock, 3);
    t.clock.advance(5_000);
    expect(summary(await change(w, pos))).toEqual({ kind: "TAKEN_OVER", holder: "beta", token: 2, waiters: ["gamma"] });
    expect((await first).waitedMs).toBe(5_000);
    await leases(t, b!).releaseLease({ name: "db", fencingToken: 2n });
    expect(summary(await change(w, pos))).toEqual({ kind: "RELEASED", holder: "beta", token: 2, waiters: [] });
    expect(summary(await change(w, pos))).toEqual({ kind: "GRANTED", holder: "gamma", token: 3, waiters: [] });
    expect((await second).waitedMs).toBe(5_000);
  });
});
