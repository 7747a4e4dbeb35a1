import { describe, expect, it } from "vitest";
import { createLeases, leaseTtl, leaseWait, type LeaseChange, type LeasesDeps } from "../../src/lease/leases.js";
import {
  decideAcquire,
  decideFence,
  decideForceRelease,
  decideRelease,
  decideRenew,
  displayResource,
  heldLease,
  isLapsed,
  queueOf,
  type FenceReason,
  type LeaseHolder,
} from "../../src/lease/rules.js";
import { errorTable, type HubCode } from "../../src/errors.js";
import { createBus } from "../../src/events/bus.js";
import type { AgentCaller } from "../../src/caller.js";
import { A, B, C, D, NAME, PROJECT, TTL, floorRow, lapsedRow, liveRow, row, rowOf, viewOf, waiter, type Decided, type LeaseRow, type LeaseWaiter } from "./lease-fixtures.js";
import { NOW, decideOf, dependencyCall, fixedClock, named, passesChecks, quietObserver, refusal, refusalOf, titled, untouchable } from "./support.js";

/**
 * The lease decisions of src/lease/rules.ts, called directly at a fixed hub instant: no hub, no
 * store. Expected answers are reference-hub.md §4 with the spec README §3.7 (decision D43: the
 * fence never restarts). The queue (spec README §5.5, decision D49) is in lease-queue-rules.test.ts,
 * the properties over random histories
 * in lease-properties.test.ts.
 */

describe("lease views", () => {
  it("shows a held row as a lease with its display resource", () => {
    expect(heldLease(liveRow(A, 3))).toEqual({
      resource: `${PROJECT}/${NAME}`,
      project: PROJECT,
      name: NAME,
      holderAgentId: A.agentId,
      holderAgentName: A.agentName,
      fencingToken: 3,
      acquiredAtMs: NOW - 120_000,
      expiresAtMs: NOW + 1,
    });
  });

  it.each(titled([
    { name: "no row", current: undefined },
    { name: "a released floor", current: floorRow(9) },
  ], (c) => `shows ${c.name} as no lease`))("%s", (_title, { current }) => {
    expect(heldLease(current)).toBeUndefined();
  });

  it.each(titled([
    { name: "1 ms before its expiry", expiresAtMs: NOW + 1, lapsed: false },
    { name: "at its exact expiry instant", expiresAtMs: NOW, lapsed: true },
    { name: "after its expiry", expiresAtMs: NOW - 1, lapsed: true },
  ], (c) => `a lease is lapsed ${c.name}: ${c.lapsed}`))("%s", (_title, { expiresAtMs, lapsed }) => {
    expect(isLapsed(heldLease(row(A, 1, expiresAtMs))!, NOW)).toBe(lapsed);
  });

  it("joins project and name for display only", () => {
    expect(displayResource("alpha/repo", "main")).toBe("alpha/repo/main");
    expect(displayResource("alpha", "repo/main")).toBe("alpha/repo/main");
  });

  it("shows the waiters still waiting, first in line first, without their ttl or id", () => {
    const ws = [waiter("w1", B, NOW + 10), waiter("w2", C, NOW), waiter("w3", D, NOW + 1)];
    expect(queueOf(ws, NOW)).toEqual([viewOf(ws[0]!), viewOf(ws[2]!)]);
  });
});


describe("decideAcquire", () => {
  type Case = {
    name: string;
    current: LeaseRow | undefined;
    who: LeaseHolder;
    ttlMs?: number;
    expect:
      | { kind: "granted" | "renewed" | "taken_over"; holder: LeaseHolder; token: number; acquiredAtMs: number; expiresAtMs: number }
      | { refused: HubCode };
  };
  const cases: Case[] = [
    { name: "grants token 1 on a resource never leased", current: undefined, who: A, expect: { kind: "granted", holder: A, token: 1, acquiredAtMs: NOW, expiresAtMs: NOW + TTL } },
    { name: "grants floor + 1 on a released resource (the fence never restarts)", current: floorRow(7), who: A, expect: { kind: "granted", holder: A, token: 8, acquiredAtMs: NOW, expiresAtMs: NOW + TTL } },
    { name: "grants floor + 1 on a resource released by another agent", current: floorRow(7), who: B, expect: { kind: "granted", holder: B, token: 8, acquiredAtMs: NOW, expiresAtMs: NOW + TTL } },
    { name: "refuses another agent's live lease with lease_held", current: row(B, 3, NOW + 300_000), who: A, expect: { refused: "lease_held" } },
    { name: "refuses another agent's lease 1 ms before its expiry", current: liveRow(B, 3), who: A, expect: { refused: "lease_held" } },
    { name: "extends the holder's own live lease on the same token, keeping acquiredAt", current: liveRow(A, 3), who: A, expect: { kind: "renewed", holder: A, token: 3, acquiredAtMs: NOW - 120_000, expiresAtMs: NOW + TTL } },
    { name: "takes over another agent's lease at its exact expiry instant on token + 1", current: lapsedRow(B, 3), who: A, expect: { kind: "taken_over", holder: A, token: 4, acquiredAtMs: NOW, expiresAtMs: NOW + TTL } },
    { name: "takes over the holder's own lapsed lease on token + 1, not as a renewal", current: lapsedRow(A, 3), who: A, expect: { kind: "taken_over", holder: A, token: 4, acquiredAtMs: NOW, expiresAtMs: NOW + TTL } },
    { name: "takes over a lease lapsed a week ago", current: row(B, 41, NOW - 7 * 86_400_000), who: A, expect: { kind: "taken_over", holder: A, token: 42, acquiredAtMs: NOW, expiresAtMs: NOW + TTL } },
    { name: "grants with the minimum ttl", current: undefined, who: A, ttlMs: leaseTtl.minMs, expect: { kind: "granted", holder: A, token: 1, acquiredAtMs: NOW, expiresAtMs: NOW + 5_000 } },
    { name: "grants with the maximum ttl", current: undefined, who: A, ttlMs: leaseTtl.maxMs, expect: { kind: "granted", holder: A, token: 1, acquiredAtMs: NOW, expiresAtMs: NOW + 600_000 } },
    { name: "grants the token after the largest safe floor below it", current: floorRow(Number.MAX_SAFE_INTEGER - 1), who: A, expect: { kind: "granted", holder: A, token: Number.MAX_SAFE_INTEGER, acquiredAtMs: NOW, expiresAtMs: NOW + TTL } },
  ];

  it.each(named(cases))("%s", (_title, { current, who, ttlMs = TTL, expect: want }) => {
    const before = structuredClone(current);
    const decide = () => decideAcquire(current, { name: NAME, holder: who, ttlMs, nowMs: NOW });
    if ("refused" in want) {
      const e = refusal(decide);
      expect(e.code).toBe(want.refused);
      expect(e.lease).toEqual(heldLease(current));
      expect(current).toEqual(before);
      return;
    }
    const d = decide();
    const written = rowOf(want.holder, want.token, want.acquiredAtMs, want.expiresAtMs);
    expect(d.write).toEqual(written);
    expect(d.result).toEqual({ kind: want.kind, lease: { ...heldLease(written), waiters: [] } });
    expect(d.change).toEqual({ stream: "leases", body: d.result });
    expect(d.queue).toBeUndefined();
    expect(current).toEqual(before);
  });

  it("attaches the holder, token and expiry to lease_held", () => {
    const e = refusal(() => decideAcquire(row(B, 3, NOW + 300_000), { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW }));
    expect(errorTable[e.code]).toEqual({ connect: "aborted", rest: 409 });
    expect(e.metadata).toEqual({
      resource: `${PROJECT}/${NAME}`,
      holderAgentId: B.agentId,
      holderAgentName: B.agentName,
      fencingToken: "3",
      expiresAt: new Date(NOW + 300_000).toISOString(),
    });
  });
});


describe("decideRenew", () => {
  type Case = {
    name: string;
    current: LeaseRow | undefined;
    who: LeaseHolder;
    token: number;
    ttlMs?: number;
    expect: { refused: HubCode; withLease: boolean } | { expiresAtMs: number };
  };
  const cases: Case[] = [
    { name: "refuses a resource never leased with lease_not_found", current: undefined, who: A, token: 1, expect: { refused: "lease_not_found", withLease: false } },
    { name: "refuses a released resource with lease_not_found", current: floorRow(5), who: A, token: 5, expect: { refused: "lease_not_found", withLease: false } },
    { name: "refuses another agent's lease with lease_superseded", current: liveRow(B, 3), who: A, token: 3, expect: { refused: "lease_superseded", withLease: true } },
    { name: "refuses an older token with lease_superseded", current: liveRow(A, 3), who: A, token: 2, expect: { refused: "lease_superseded", withLease: true } },
    { name: "refuses a token never issued with lease_superseded", current: liveRow(A, 3), who: A, token: 4, expect: { refused: "lease_superseded", withLease: true } },
    { name: "answers lease_superseded, not lease_expired, for another agent's lapsed lease", current: lapsedRow(B, 3), who: A, token: 3, expect: { refused: "lease_superseded", withLease: true } },
    { name: "refuses the holder's own lease at its exact expiry instant with lease_expired", current: lapsedRow(A, 3), who: A, token: 3, expect: { refused: "lease_expired", withLease: true } },
    { name: "refuses the holder's own lease lapsed long ago with lease_expired", current: row(A, 3, NOW - 86_400_000), who: A, token: 3, expect: { refused: "lease_expired", withLease: true } },
    { name: "renews a live lease 1 ms before its expiry to now + ttl", current: liveRow(A, 3), who: A, token: 3, expect: { expiresAtMs: NOW + TTL } },
    { name: "renews to now + ttl even when that is sooner than the current expiry", current: row(A, 3, NOW + 500_000), who: A, token: 3, ttlMs: leaseTtl.minMs, expect: { expiresAtMs: NOW + 5_000 } },
    { name: "renews with the maximum ttl", current: liveRow(A, 3), who: A, token: 3, ttlMs: leaseTtl.maxMs, expect: { expiresAtMs: NOW + 600_000 } },
  ];

  it.each(named(cases))("%s", (_title, { current, who, token, ttlMs = TTL, expect: want }) => {
    const before = structuredClone(current);
    const decide = () => decideRenew(current, { name: NAME, holder: who, fencingToken: token, ttlMs, nowMs: NOW });
    if ("refused" in want) {
      const e = refusal(decide);
      expect(e.code).toBe(want.refused);
      expect(e.lease).toEqual(want.withLease ? heldLease(current) : undefined);
      if (!want.withLease) expect(e.metadata).toEqual({ name: NAME });
      expect(current).toEqual(before);
      return;
    }
    const d = decideRenew(current, { name: NAME, holder: who, fencingToken: token, ttlMs, nowMs: NOW });
    const written = { ...current!, expiresAtMs: want.expiresAtMs };
    expect(d.write).toEqual(written);
    expect(d.result).toEqual({ kind: "renewed", lease: { ...heldLease(written), waiters: [] } });
    expect(d.change).toEqual({ stream: "leases", body: d.result });
    expect(current).toEqual(before);
  });

  it("shows the queue on the renewed lease", () => {
    const w = waiter("w_b", B, NOW + 1_000);
    const d = decideRenew(liveRow(A, 3), { name: NAME, holder: A, fencingToken: 3, ttlMs: TTL, nowMs: NOW }, [w, waiter("w_c", C, NOW)]);
    expect(d.result.lease.waiters).toEqual([viewOf(w)]);
  });
});


describe("decideRelease", () => {
  type Case = { name: string; current: LeaseRow | undefined; who: LeaseHolder; token: number; expect: { refused: HubCode } | "released" };
  const cases: Case[] = [
    { name: "refuses a resource never leased with lease_not_found", current: undefined, who: A, token: 1, expect: { refused: "lease_not_found" } },
    { name: "refuses a released resource with lease_not_found", current: floorRow(5), who: A, token: 5, expect: { refused: "lease_not_found" } },
    { name: "refuses another agent's lease with lease_superseded", current: liveRow(B, 3), who: A, token: 3, expect: { refused: "lease_superseded" } },
    { name: "refuses an older token with lease_superseded", current: liveRow(A, 3), who: A, token: 2, expect: { refused: "lease_superseded" } },
    { name: "releases the holder's live lease, keeping its token as the floor", current: liveRow(A, 3), who: A, token: 3, expect: "released" },
    { name: "releases the holder's lease at its exact expiry instant", current: lapsedRow(A, 3), who: A, token: 3, expect: "released" },
    { name: "releases the holder's lease lapsed a week ago", current: row(A, 3, NOW - 7 * 86_400_000), who: A, token: 3, expect: "released" },
  ];

  it.each(named(cases))("%s", (_title, { current, who, token, expect: want }) => {
    const before = structuredClone(current);
    const decide = () => decideRelease(current, { name: NAME, holder: who, fencingToken: token }, [], NOW);
    if (want !== "released") {
      expect(refusal(decide).code).toBe(want.refused);
      expect(current).toEqual(before);
      return;
    }
    const d = decide();
    expect(d.write).toEqual({ ...current!, holderAgentId: null, holderAgentName: null });
    expect(d.result).toEqual({ kind: "released", lease: { ...heldLease(current), waiters: [] } });
    expect(d.change).toEqual({ stream: "leases", body: d.result });
    expect(d.queue).toBeUndefined();
    expect(current).toEqual(before);
  });

  it("hands a released lease to the first waiter on the next token, recording both changes in order", () => {
    const w = waiter("w_b", B, NOW + 1_000, 45_000);
    const d = decideRelease(liveRow(A, 3), { name: NAME, holder: A, fencingToken: 3 }, [waiter("w_c", C, NOW), w], NOW);
    expect(d.write).toEqual({ ...rowOf(B, 4, NOW, NOW + 45_000), handedTo: "w_b" });
    expect(d.queue).toEqual({ remove: ["w_c", "w_b"] });
    expect(d.result.kind).toBe("released");
    expect(d.change).toEqual([
      { stream: "leases", body: { kind: "released", lease: { ...heldLease(liveRow(A, 3)), waiters: [] } } },
      { stream: "leases", body: { kind: "granted", lease: { ...heldLease(rowOf(B, 4, NOW, NOW + 45_000)), waiters: [] } } },
    ]);
  });

  it("drops run-out waiters when nobody is left to take the lease", () => {
    const d = decideRelease(liveRow(A, 3), { name: NAME, holder: A, fencingToken: 3 }, [waiter("w_c", C, NOW)], NOW);
    expect(d.write?.holderAgentId).toBeNull();
    expect(d.queue).toEqual({ remove: ["w_c"] });
  });

  it("never restarts the fence: acquire, release, acquire grants token + 1", () => {
    const first = decideAcquire(undefined, { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW });
    const released = decideRelease(first.write, { name: NAME, holder: A, fencingToken: first.result.lease.fencingToken }, [], NOW);
    const again = decideAcquire(released.write, { name: NAME, holder: B, ttlMs: TTL, nowMs: NOW });
    expect([first.result.lease.fencingToken, released.write!.fencingToken, again.result.lease.fencingToken]).toEqual([1, 1, 2]);
  });
});


describe("decideForceRelease", () => {
  type Case = { name: string; current: LeaseRow | undefined; token?: number; expect: { refused: HubCode } | "released" };
  const cases: Case[] = [
    { name: "refuses a resource never leased with lease_not_found", current: undefined, expect: { refused: "lease_not_found" } },
    { name: "refuses a released resource with lease_not_found", current: floorRow(5), expect: { refused: "lease_not_found" } },
    { name: "refuses a token that is no longer current with lease_superseded", current: liveRow(B, 3), token: 2, expect: { refused: "lease_superseded" } },
    { name: "releases whoever holds the lease without a token", current: liveRow(B, 3), expect: "released" },
    { name: "releases with the current token", current: liveRow(B, 3), token: 3, expect: "released" },
    { name: "releases a lapsed lease that still names its holder", current: lapsedRow(B, 3), expect: "released" },
  ];

  it.each(named(cases))("%s", (_title, { current, token, expect: want }) => {
    const decide = () => decideForceRelease(current, { name: NAME, nowMs: NOW, ...(token !== undefined && { fencingToken: token }) }, []);
    if (want !== "released") {
      expect(refusal(decide).code).toBe(want.refused);
      return;
    }
    const d = decide();
    expect(d.write).toEqual({ ...current!, holderAgentId: null, holderAgentName: null });
    expect(d.result).toEqual({ released: { ...heldLease(current), waiters: [] } });
    expect(d.change).toEqual({ stream: "leases", body: { kind: "force_released", lease: { ...heldLease(current), waiters: [] } } });
  });

  it("gives the lease to the first waiter on the next token", () => {
    const d = decideForceRelease(liveRow(B, 3), { name: NAME, nowMs: NOW }, [waiter("w_c", C, NOW + 1, 45_000)]);
    expect(d.result.next).toMatchObject(heldLease(rowOf(C, 4, NOW, NOW + 45_000))!);
    expect(d.write).toEqual({ ...rowOf(C, 4, NOW, NOW + 45_000), handedTo: "w_c" });
    expect(d.queue).toEqual({ remove: ["w_c"] });
  });
});


describe("decideFence", () => {
  type Case = { name: string; current: LeaseRow | undefined; token: number; reason: FenceReason; withLease: boolean };
  const cases: Case[] = [
    { name: "no row: the token was never issued", current: undefined, token: 1, reason: "unknown", withLease: false },
    { name: "a token above the row's was never issued", current: liveRow(A, 3), token: 4, reason: "unknown", withLease: false },
    { name: "a token below the held row's was superseded (with the lease)", current: liveRow(B, 3), token: 2, reason: "superseded", withLease: true },
    { name: "a token below a released floor was superseded (no lease)", current: floorRow(3), token: 1, reason: "superseded", withLease: false },
    { name: "the floor's own token was released", current: floorRow(3), token: 3, reason: "released", withLease: false },
    { name: "the holder's token lapsed at its exact expiry instant", current: lapsedRow(A, 3), token: 3, reason: "expired", withLease: true },
    { name: "the holder's token 1 ms before its expiry is current", current: liveRow(A, 3), token: 3, reason: "current", withLease: true },
  ];
  it.each(titled(cases, (c) => `${c.name}: ${c.reason}`))("%s", (_title, { current, token, reason, withLease }) => {
    const v = decideFence(current, token, NOW);
    expect(v).toEqual({ valid: reason === "current", reason, ...(withLease && { lease: heldLease(current) }) });
  });
});


describe("lease request bounds (checked before any store decision)", () => {
  const caller: AgentCaller = { kind: "agent", agentId: A.agentId, agentName: A.agentName, project: PROJECT };
  /** A lease domain whose store is never reached by a request its checks refuse. */
  const leases = () =>
    createLeases({
      store: untouchable<LeasesDeps["store"]>("store"),
      clock: fixedClock(),
      observer: quietObserver,
      bus: createBus<LeaseChange>((c) => c.project),
    });

  it("has the reference's ttl bounds and default", () => {
    expect(leaseTtl).toEqual({ minMs: 5_000, maxMs: 600_000, defaultMs: 300_000 });
    expect(leaseWait.maxMs).toBe(600_000);
  });

  it.each(titled([
    { name: "ttl 1 ms below the minimum", input: { name: NAME, ttlMs: 4_999 }, field: "ttlMs" },
    { name: "ttl 1 ms above the maximum", input: { name: NAME, ttlMs: 600_001 }, field: "ttlMs" },
    { name: "a fractional ttl", input: { name: NAME, ttlMs: 5_000.5 }, field: "ttlMs" },
    { name: "a wait above the maximum", input: { name: NAME, waitMs: 600_001 }, field: "waitMs" },
    { name: "a negative wait", input: { name: NAME, waitMs: -1 }, field: "waitMs" },
    { name: "an empty resource name", input: { name: "   " }, field: "resource" },
    { name: "a resource name over 200 characters", input: { name: "x".repeat(201) }, field: "resource" },
  ], (c) => `acquire refuses ${c.name} with protocol_error`))("%s", async (_title, { input, field }) => {
    const e = await refusalOf(leases().acquire(caller, input));
    expect(e.code).toBe("protocol_error");
    expect(e.metadata.field).toBe(field);
  });

  it.each(titled([
    { name: "the minimum ttl", input: { name: NAME, ttlMs: 5_000 } },
    { name: "the maximum ttl", input: { name: NAME, ttlMs: 600_000 } },
    { name: "no ttl (the default)", input: { name: NAME } },
    { name: "the longest wait", input: { name: NAME, waitMs: 600_000 } },
    { name: "a resource name of exactly 200 characters", input: { name: "x".repeat(200) } },
  ], (c) => `acquire takes ${c.name} to the store`))("%s", async (_title, { input }) => {
    expect(await passesChecks(leases().acquire(caller, input))).toBe(true);
  });

  it("hands the rule the default ttl when none is given", async () => {
    const call = await dependencyCall(leases().acquire(caller, { name: ` ${NAME} ` }));
    const agent = { id: A.agentId, project: PROJECT, name: A.agentName, purpose: "", keyHash: "k", connectedAtMs: NOW, lastSeenAtMs: NOW, online: true };
    const decide = decideOf<(cur: LeaseRow | undefined, nowMs: number, waiters: LeaseWaiter[], holder: typeof agent) => Decided>(call);
    expect(decide(undefined, NOW, [], agent).write).toEqual(rowOf(A, 1, NOW, NOW + leaseTtl.defaultMs));
  });

  it.each(titled([
    { name: "without a fencing token", token: undefined, code: "lease_token_required" },
    { name: "with token 0", token: 0, code: "protocol_error" },
    { name: "with a negative token", token: -1, code: "protocol_error" },
    { name: "with a token above 2^53 - 1", token: 2n ** 53n, code: "protocol_error" },
  ] as const, (c) => `renew and release refuse a call ${c.name} with ${c.code}`))("%s", async (_title, { token, code }) => {
    const input = { name: NAME, ...(token !== undefined && { fencingToken: token }) };
    expect((await refusalOf(leases().renew(caller, input))).code).toBe(code);
    expect((await refusalOf(leases().release(caller, input))).code).toBe(code);
  });

  it.each(titled([
    { name: "token 1", token: 1 },
    { name: "the largest token, 2^53 - 1", token: 2n ** 53n - 1n },
  ], (c) => `renew and release take ${c.name} to the store`))("%s", async (_title, { token }) => {
    expect(await passesChecks(leases().renew(caller, { name: NAME, fencingToken: token }))).toBe(true);
    expect(await passesChecks(leases().release(caller, { name: NAME, fencingToken: token }))).toBe(true);
  });
});
