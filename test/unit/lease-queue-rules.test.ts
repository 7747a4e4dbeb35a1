import { describe, expect, it } from "vitest";
import { decideAcquire, decideDropOrphans, decideDropWaiters, decideForceRelease, decideInstanceEnds, decideLeaving, decideRelease, decideRenew, decideWaiting, heldLease, maxWaitersPerLease, queueOf, type LeaseHolder } from "../../src/lease/rules.js";
import { errorTable } from "../../src/errors.js";
import { A, B, C, D, NAME, TTL, floorRow, lapsedRow, liveRow, row, rowOf, viewOf, waiter, type LeaseRow, type LeaseWaiter } from "./lease-fixtures.js";
import { NOW, named, refusal } from "./support.js";

/**
 * The blocking acquire (spec README §5.5, decision D49) as src/lease/rules.ts decides it, called
 * directly at a fixed hub instant: a caller that waits joins the resource's FIFO queue; a
 * resource that is free when a decision looks at it goes to the first waiter whose wait has not
 * run out, in that decision, on the next token; a caller that does not wait never jumps the queue.
 */

describe("decideAcquire with a queue (blocking acquire)", () => {
  const wait = { id: "w_a", deadlineMs: NOW + 10_000 };
  const me: LeaseWaiter = { id: "w_a", agentId: A.agentId, agentName: A.agentName, ttlMs: TTL, sinceMs: NOW, deadlineMs: NOW + 10_000 };

  it("queues a caller that waits behind a live lease, and tells watchers", () => {
    const current = liveRow(B, 3);
    const d = decideAcquire(current, { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW, wait }, []);
    expect(d.write).toBeUndefined();
    expect(d.queue).toEqual({ add: me });
    expect(d.result).toEqual({ kind: "queued", lease: heldLease(current) });
    expect(d.change).toEqual({ stream: "leases", body: { kind: "queue_changed", lease: { ...heldLease(current), waiters: [viewOf(me)] } } });
  });

  it("joins the end of the queue", () => {
    const first = waiter("w_c", C, NOW + 1_000);
    const d = decideAcquire(liveRow(B, 3), { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW, wait }, [first]);
    expect(d.queue).toEqual({ add: me });
    expect((d.change as { body: { lease: { waiters: unknown[] } } }).body.lease.waiters).toEqual([viewOf(first), viewOf(me)]);
  });

  it("lets the holder re-acquire its live lease past the queue, on the same token, showing the queue", () => {
    const w = waiter("w_c", C, NOW + 1_000);
    const d = decideAcquire(liveRow(A, 3), { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW }, [w, waiter("w_d", D, NOW)]);
    expect(d.result).toEqual({ kind: "renewed", lease: { ...heldLease({ ...liveRow(A, 3), expiresAtMs: NOW + TTL }), waiters: [viewOf(w)] } });
    expect(d.queue).toBeUndefined();
  });

  it("refuses a wait on a lease whose queue is full (lease_queue_full), counting only waits that have not run out", () => {
    const full = Array.from({ length: maxWaitersPerLease }, (_, i) => waiter(`w_${i}`, i % 2 ? C : D, NOW + 1_000));
    const e = refusal(() => decideAcquire(liveRow(B, 3), { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW, wait }, full));
    expect(e.code).toBe("lease_queue_full");
    expect(errorTable[e.code]).toEqual({ connect: "resource_exhausted", rest: 429 });
    expect(e.metadata).toMatchObject({ maxWaiters: String(maxWaitersPerLease), holderAgentId: B.agentId, fencingToken: "3" });
    // One of them has run out: there is room.
    const oneGone = [...full.slice(1), waiter("w_gone", C, NOW)];
    expect(decideAcquire(liveRow(B, 3), { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW, wait }, oneGone).queue).toEqual({ add: me });
  });

  it("refuses a caller that does not wait with lease_held, queue or not", () => {
    const e = refusal(() => decideAcquire(liveRow(B, 3), { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW }, [waiter("w_c", C, NOW + 1_000)]));
    expect(e.code).toBe("lease_held");
  });

  type Case = {
    name: string;
    current: LeaseRow | undefined;
    waiters: LeaseWaiter[];
    waits: boolean;
    expect: { result: "held" | "queued" | "granted"; holder: LeaseHolder; token: number; ttlMs: number; kind: "granted" | "taken_over"; remove: string[] | undefined; handedTo?: string };
  };
  const wc = waiter("w_c", C, NOW + 1_000, 45_000);
  const wcGone = waiter("w_c", C, NOW, 45_000);
  const wd = waiter("w_d", D, NOW + 1, 20_000);
  const wa2 = waiter("w_a2", A, NOW + 1_000, 15_000);
  const cases: Case[] = [
    { name: "a released resource goes to the first waiter, not to a caller that does not wait", current: floorRow(3), waiters: [wc], waits: false, expect: { result: "held", holder: C, token: 4, ttlMs: 45_000, kind: "granted", remove: ["w_c"] , handedTo: "w_c"} },
    { name: "a lapsed lease is taken over by the first waiter on token + 1", current: lapsedRow(B, 3), waiters: [wc], waits: false, expect: { result: "held", holder: C, token: 4, ttlMs: 45_000, kind: "taken_over", remove: ["w_c"] , handedTo: "w_c"} },
    { name: "a never-leased resource goes to the first waiter on token 1", current: undefined, waiters: [wc], waits: false, expect: { result: "held", holder: C, token: 1, ttlMs: 45_000, kind: "granted", remove: ["w_c"] , handedTo: "w_c"} },
    { name: "a waiter whose wait ends at this instant is passed over for the next", current: floorRow(3), waiters: [wcGone, wd], waits: false, expect: { result: "held", holder: D, token: 4, ttlMs: 20_000, kind: "granted", remove: ["w_c", "w_d"] , handedTo: "w_d"} },
    { name: "only run-out waiters: the caller gets the lease and they leave the queue", current: floorRow(3), waiters: [wcGone], waits: false, expect: { result: "granted", holder: A, token: 4, ttlMs: TTL, kind: "granted", remove: ["w_c"] } },
    { name: "a caller that waits on a free resource queues behind the first waiter's new lease", current: floorRow(3), waiters: [wc], waits: true, expect: { result: "queued", holder: C, token: 4, ttlMs: 45_000, kind: "granted", remove: ["w_c"] , handedTo: "w_c"} },
    { name: "no queue at all: no queue change", current: floorRow(3), waiters: [], waits: false, expect: { result: "granted", holder: A, token: 4, ttlMs: TTL, kind: "granted", remove: undefined } },
  ];

  it.each(named(cases))("%s", (_title, { current, waiters, waits, expect: want }) => {
    const before = structuredClone({ current, waiters });
    const d = decideAcquire(current, { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW, ...(waits && { wait }) }, waiters);
    const written = rowOf(want.holder, want.token, NOW, NOW + want.ttlMs);
    expect(d.write).toEqual(want.handedTo ? { ...written, handedTo: want.handedTo } : written);
    expect(d.queue?.remove).toEqual(want.remove);
    expect(d.queue?.add).toEqual(waits ? me : undefined);
    expect(d.result.kind).toBe(want.result);
    expect(d.result.lease).toMatchObject(heldLease(written)!);
    const change = d.change as { stream: string; body: { kind: string; lease: { waiters: unknown[] } } };
    expect(change.stream).toBe("leases");
    expect(change.body.kind).toBe(want.kind);
    expect(change.body.lease.waiters).toEqual(waits ? [viewOf(me)] : []);
    expect({ current, waiters }).toEqual(before);
  });

  // R4 of the lease review (D64): a place in the queue is a call's, not its agent's.
  it("a caller that does not wait, whose own agent's waiting call is first in line, is refused: the lease is handed to that call", () => {
    const ran = waiter("w_d", D, NOW); // its wait ends at this instant
    const d = decideAcquire(lapsedRow(B, 3), { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW }, [ran, wa2, wc]);
    const written = rowOf(A, 4, NOW, NOW + 15_000);
    expect(d.write).toEqual({ ...written, handedTo: "w_a2" });
    expect(d.result).toEqual({ kind: "held", lease: { ...heldLease(written), waiters: [viewOf(wc)] } });
    expect(d.queue).toEqual({ remove: ["w_d", "w_a2"] });
    // The waiting call finds the lease handed to it; another call of its agent would not.
    expect(decideWaiting({ ...written, handedTo: "w_a2" }, { id: "w_a2", holder: A, name: NAME, nowMs: NOW }, [wc]).result.kind).toBe("granted");
    expect(decideWaiting({ ...written, handedTo: "w_a2" }, { id: "w_a", holder: A, name: NAME, nowMs: NOW }, [wc]).result.kind).toBe("gone");
  });

  it("a caller that waits, whose own agent's waiting call is first in line, queues behind the lease handed to that call", () => {
    const d = decideAcquire(floorRow(3), { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW, wait }, [wa2, wc]);
    expect(d.write).toEqual({ ...rowOf(A, 4, NOW, NOW + 15_000), handedTo: "w_a2" });
    expect(d.result.kind).toBe("queued");
    expect(d.queue).toEqual({ remove: ["w_a2"], add: me });
  });
});


describe("decideWaiting (a queued call looks again)", () => {
  const req = { id: "w_a", holder: A, name: NAME, nowMs: NOW };
  const wa = waiter("w_a", A, NOW + 1_000, 45_000);
  type Case = {
    name: string;
    current: LeaseRow | undefined;
    waiters: LeaseWaiter[];
    expect: { kind: "granted" | "taken_over" | "queued" | "gone"; write?: LeaseRow; remove?: string[]; holder?: LeaseHolder };
  };
  const cases: Case[] = [
    { name: "has the lease the queue handed over (its entry gone, the row naming it)", current: { ...row(A, 4, NOW + 45_000, NOW - 10), handedTo: "w_a" }, waiters: [], expect: { kind: "granted", holder: A } },
    { name: "is gone when its entry left and its agent holds the lease through another call", current: row(A, 4, NOW + 45_000, NOW - 10), waiters: [], expect: { kind: "gone" } },
    { name: "is gone when its entry left and the lease was handed to another call of its agent", current: { ...row(A, 4, NOW + 45_000, NOW - 10), handedTo: "w_a2" }, waiters: [], expect: { kind: "gone" } },
    { name: "is gone when its entry left and another agent holds the lease", current: row(C, 4, NOW + 45_000), waiters: [], expect: { kind: "gone" } },
    { name: "is gone when its entry left and its agent's lease lapsed", current: lapsedRow(A, 4), waiters: [], expect: { kind: "gone" } },
    { name: "is gone when its entry left and the resource is free", current: floorRow(4), waiters: [], expect: { kind: "gone" } },
    { name: "stays queued behind a live lease", current: liveRow(B, 3), waiters: [wa], expect: { kind: "queued", holder: B } },
    { name: "gets a released resource when first in line, on floor + 1", current: floorRow(3), waiters: [wa], expect: { kind: "granted", write: { ...rowOf(A, 4, NOW, NOW + 45_000), handedTo: "w_a" }, remove: ["w_a"], holder: A } },
    { name: "takes over a lease lapsing at this instant when first in line", current: lapsedRow(B, 3), waiters: [wa], expect: { kind: "taken_over", write: { ...rowOf(A, 4, NOW, NOW + 45_000), handedTo: "w_a" }, remove: ["w_a"], holder: A } },
    { name: "stays queued when the free resource goes to the waiter ahead", current: floorRow(3), waiters: [waiter("w_c", C, NOW + 1, 20_000), wa], expect: { kind: "queued", write: { ...rowOf(C, 4, NOW, NOW + 20_000), handedTo: "w_c" }, remove: ["w_c"], holder: C } },
    { name: "is gone when its own wait ran out and nobody else waits", current: floorRow(3), waiters: [waiter("w_a", A, NOW)], expect: { kind: "gone", remove: ["w_a"] } },
  ];

  it.each(named(cases))("%s", (_title, { current, waiters, expect: want }) => {
    const d = decideWaiting(current, req, waiters);
    expect(d.result.kind).toBe(want.kind);
    expect(d.write).toEqual(want.write);
    expect(d.queue?.remove).toEqual(want.remove);
    if (want.holder) expect((d.result as { lease: { holderAgentId: string } }).lease.holderAgentId).toBe(want.holder.agentId);
  });
});


describe("decideLeaving (a waiting call ends without the lease)", () => {
  const wa = waiter("w_a", A, NOW, 45_000);
  const wc = waiter("w_c", C, NOW + 1_000);
  /** A live lease the queue handed to this call. */
  const handed: LeaseRow = { ...liveRow(A, 4), handedTo: "w_a" };
  type Case = {
    name: string;
    current: LeaseRow | undefined;
    waiters: LeaseWaiter[];
    clientGone: boolean;
    expect: { kind: "left" | "granted"; remove?: string[]; change?: string[]; write?: LeaseRow };
  };
  const cases: Case[] = [
    { name: "leaves the queue of a live lease and tells watchers", current: liveRow(B, 3), waiters: [wa, wc], clientGone: false, expect: { kind: "left", remove: ["w_a"], change: ["queue_changed"] } },
    { name: "leaves the queue of a free resource quietly", current: floorRow(3), waiters: [wa], clientGone: true, expect: { kind: "left", remove: ["w_a"] } },
    { name: "leaves when the lease is another agent's", current: liveRow(C, 4), waiters: [], clientGone: false, expect: { kind: "left" } },
    { name: "leaves when its agent's handed-over lease already lapsed", current: lapsedRow(A, 4), waiters: [], clientGone: true, expect: { kind: "left" } },
    { name: "keeps a lease handed over just as its wait ran out", current: handed, waiters: [], clientGone: false, expect: { kind: "granted" } },
    { name: "gives a handed-over lease back when its client is gone (released, floor kept)", current: handed, waiters: [], clientGone: true, expect: { kind: "left", change: ["released"], write: { ...liveRow(A, 4), holderAgentId: null, holderAgentName: null } } },
    { name: "gives a handed-over lease on to the next in line when its client is gone", current: handed, waiters: [wc], clientGone: true, expect: { kind: "left", remove: ["w_c"], change: ["released", "granted"], write: { ...rowOf(C, 5, NOW, NOW + 30_000), handedTo: "w_c" } } },
    { name: "leaves a lease its agent holds through another call alone, wait run out", current: liveRow(A, 4), waiters: [], clientGone: false, expect: { kind: "left" } },
    { name: "leaves a lease its agent holds through another call alone, client gone", current: liveRow(A, 4), waiters: [wc], clientGone: true, expect: { kind: "left" } },
  ];

  it.each(named(cases))("%s", (_title, { current, waiters, clientGone, expect: want }) => {
    const d = decideLeaving(current, { id: "w_a", holder: A, name: NAME, nowMs: NOW, clientGone }, waiters);
    expect(d.result.kind).toBe(want.kind);
    expect(d.queue?.remove).toEqual(want.remove);
    const kinds = (d.change === undefined ? [] : Array.isArray(d.change) ? d.change : [d.change]).map((c) => (c.body as { kind: string }).kind);
    expect(kinds).toEqual(want.change ?? []);
    expect(d.write).toEqual(want.write);
  });

  it.each([false, true])("a call whose agent's instance ended leaves a lease its agent holds alone (client gone: %s)", (clientGone) => {
    const d = decideLeaving(liveRow(A, 4), { id: "w_a", holder: A, name: NAME, nowMs: NOW, clientGone, instanceEnded: true }, [wc]);
    expect(d).toEqual({ result: { kind: "left" } });
    // Still in the queue, it leaves it as any call does.
    const queued = decideLeaving(liveRow(B, 4), { id: "w_a", holder: A, name: NAME, nowMs: NOW, clientGone, instanceEnded: true }, [wa, wc]);
    expect(queued.queue).toEqual({ remove: ["w_a"] });
    expect(queued.write).toBeUndefined();
  });
});


describe("decideDropWaiters (an agent's instance ends)", () => {
  const wa1 = waiter("w_a1", A, NOW + 1_000);
  const wb = waiter("w_b", B, NOW + 1_000);
  const wa2 = waiter("w_a2", A, NOW + 2_000);
  it.each(named([
    { name: "changes nothing when the agent waits for nothing here", current: liveRow(C, 3), waiters: [wb], expect: { remove: undefined, change: false } },
    { name: "drops every waiting call of the agent behind a live lease and tells watchers", current: liveRow(C, 3), waiters: [wa1, wb, wa2], expect: { remove: ["w_a1", "w_a2"], change: true } },
    { name: "drops them quietly when the lease is free", current: floorRow(3), waiters: [wa1, wb], expect: { remove: ["w_a1"], change: false } },
    { name: "drops them quietly when the lease lapsed at this instant", current: lapsedRow(C, 3), waiters: [wa1], expect: { remove: ["w_a1"], change: false } },
  ]))("%s", (_title, { current, waiters, expect: want }) => {
    const d = decideDropWaiters(current, { agentId: A.agentId, nowMs: NOW }, waiters);
    expect(d.write).toBeUndefined();
    expect(d.queue?.remove).toEqual(want.remove);
    if (want.change) {
      expect(d.change).toEqual({ stream: "leases", body: { kind: "queue_changed", lease: { ...heldLease(current), waiters: [viewOf(wb)] } } });
    } else {
      expect(d.change).toBeUndefined();
    }
  });
});

describe("a waiter whose hub is gone (orphaned, D79)", () => {
  const dead = { ...waiter("w_b", B, NOW + 60_000), orphaned: true as const };
  const wc = waiter("w_c", C, NOW + 1_000);

  it("is passed over and dropped when the lease is released: the next live waiter gets it on the next token", () => {
    const d = decideRelease(liveRow(A, 3), { name: NAME, holder: A, fencingToken: 3 }, [dead, wc], NOW);
    expect(d.queue?.remove).toEqual(["w_b", "w_c"]);
    expect(d.write).toMatchObject({ holderAgentId: C.agentId, fencingToken: 4, handedTo: "w_c" });
  });

  it("with nobody else waiting, is dropped and the lease is left free, its token the floor", () => {
    const d = decideForceRelease(liveRow(A, 3), { name: NAME, nowMs: NOW }, [dead]);
    expect(d.queue?.remove).toEqual(["w_b"]);
    expect(d.write).toMatchObject({ holderAgentId: null, fencingToken: 3 });
    expect(d.result.next).toBeUndefined();
  });

  it("does not hold back a caller that does not wait from a lapsed lease", () => {
    const d = decideAcquire(lapsedRow(A, 3), { name: NAME, holder: C, ttlMs: TTL, nowMs: NOW }, [dead]);
    expect(d.result).toMatchObject({ kind: "taken_over", lease: { holderAgentId: C.agentId, fencingToken: 4, waiters: [] } });
    expect(d.queue?.remove).toEqual(["w_b"]);
  });

  it("is not shown, and takes no room in a full queue", () => {
    expect(queueOf([dead, wc], NOW)).toEqual([viewOf(wc)]);
    const full = [...Array.from({ length: maxWaitersPerLease - 1 }, (_, i) => waiter(`w_${i}`, C, NOW + 1_000)), dead];
    expect(decideAcquire(liveRow(B, 3), { name: NAME, holder: D, ttlMs: TTL, nowMs: NOW, wait: { id: "w_d", deadlineMs: NOW + 1_000 } }, full).queue?.add?.id).toBe("w_d");
  });

  it.each(named([
    { name: "decideDropOrphans drops them behind a live lease and tells watchers", current: liveRow(A, 3), expect: { change: true } },
    { name: "decideDropOrphans drops them quietly when the lease is free, handing it to nobody", current: floorRow(3), expect: { change: false } },
  ]))("%s", (_title, { current, expect: want }) => {
    const d = decideDropOrphans(current, { nowMs: NOW }, [dead, wc]);
    expect(d.write).toBeUndefined();
    expect(d.queue).toEqual({ remove: ["w_b"] });
    if (want.change) expect(d.change).toEqual({ stream: "leases", body: { kind: "queue_changed", lease: { ...heldLease(current), waiters: [viewOf(wc)] } } });
    else expect(d.change).toBeUndefined();
  });

  it("decideDropOrphans changes nothing when every waiter's hub lives", () => {
    expect(decideDropOrphans(liveRow(A, 3), { nowMs: NOW }, [wc])).toEqual({ result: undefined });
  });
});

describe("decideInstanceEnds (eviction, takeover)", () => {
  const wa1 = waiter("w_a1", A, NOW + 1_000);
  const wb = waiter("w_b", B, NOW + 1_000);
  const wa2 = waiter("w_a2", A, NOW + 2_000);
  const wc = waiter("w_c", C, NOW + 3_000);
  it.each(named([
    { name: "a lease another agent holds: the agent's waiting calls leave, nothing is released", current: liveRow(C, 3), waiters: [wa1, wb, wa2], expect: { remove: ["w_a1", "w_a2"], holder: C.agentId, token: 3, released: false } },
    { name: "its own lease with nobody else waiting: released, its own second call leaves too", current: liveRow(A, 3), waiters: [wa2], expect: { remove: ["w_a2"], holder: null, token: 3, released: true } },
    { name: "its own lease: released to the first waiter of another agent, never to its own call first in line", current: liveRow(A, 3), waiters: [wa1, wb, wa2, wc], expect: { remove: ["w_a1", "w_a2", "w_b"], holder: B.agentId, token: 4, released: true } },
    { name: "its own lapsed lease: released the same way", current: lapsedRow(A, 3), waiters: [wa1, wc], expect: { remove: ["w_a1", "w_c"], holder: C.agentId, token: 4, released: true } },
  ]))("%s", (_title, { current, waiters, expect: want }) => {
    const d = decideInstanceEnds(current, { agentId: A.agentId, nowMs: NOW }, waiters);
    expect(d.queue?.remove).toEqual(want.remove);
    const after = d.write ?? current;
    expect(after.holderAgentId).toBe(want.holder);
    expect(after.fencingToken).toBe(want.token);
    expect(d.result.released !== undefined).toBe(want.released);
  });
});


describe("what a lease's row records of its hand-over (D64)", () => {
  const handed: LeaseRow = { ...liveRow(A, 4), handedTo: "w_a" };
  const unknown: LeaseRow = { ...liveRow(A, 4), handOverUnknown: true };

  it.each([
    ["names the call it was handed to", handed],
    ["records nothing, its holder written by an older release", unknown],
    ["records that a call took it itself", liveRow(A, 4)],
  ])("a renewal keeps what a row %s, by RenewLease and by a re-acquire", (_title, current) => {
    const renewed = decideRenew(current, { name: NAME, holder: A, fencingToken: 4, ttlMs: TTL, nowMs: NOW });
    const again = decideAcquire(current, { name: NAME, holder: A, ttlMs: TTL, nowMs: NOW });
    for (const d of [renewed, again]) {
      expect(d.write).toEqual({ ...current, expiresAtMs: NOW + TTL });
    }
  });

  it("a holder an older release wrote is taken by any waiting call of its agent that is out of the queue, as before D64", () => {
    expect(decideWaiting(unknown, { id: "w_x", holder: A, name: NAME, nowMs: NOW }, []).result.kind).toBe("granted");
    expect(decideLeaving(unknown, { id: "w_x", holder: A, name: NAME, nowMs: NOW, clientGone: false }, []).result.kind).toBe("granted");
    expect(decideWaiting(unknown, { id: "w_x", holder: B, name: NAME, nowMs: NOW }, []).result.kind).toBe("gone");
  });
});
