import { fc, test } from "@fast-check/vitest";
import { describe, expect } from "vitest";
import { leaseTtl } from "../../src/lease/leases.js";
import {
  decideAcquire,
  decideDropWaiters,
  decideFence,
  decideForceRelease,
  decideInstanceEnds,
  decideLeaving,
  decideRelease,
  decideRenew,
  decideWaiting,
} from "../../src/lease/rules.js";
import { isHubError, type HubCode } from "../../src/errors.js";
import { A, B, C, NAME, PROJECT, row, type Decided, type LeaseRow, type LeaseWaiter } from "./lease-fixtures.js";
import { NOW } from "./support.js";

/**
 * Random histories on one resource: acquires (waiting or not), renewals and releases with right
 * and wrong tokens, operator releases, waits that look again or end, evictions and takeovers (an
 * instance that ends), and time moving.
 * Every decision is applied the way the store applies it.
 */
describe("lease properties", () => {
  const agents = [A, B, C];
  type Op =
    | { op: "acquire"; who: number; ttlMs: number; waitMs: number }
    | { op: "renew"; who: number; delta: number; ttlMs: number }
    | { op: "release"; who: number; delta: number }
    | { op: "force"; withToken: boolean; delta: number }
    | { op: "look"; who: number }
    | { op: "leave"; who: number; clientGone: boolean }
    | { op: "drop"; who: number }
    | { op: "end"; who: number }
    | { op: "advance"; ms: number };
  const who = fc.integer({ min: 0, max: agents.length - 1 });
  const ttl = fc.integer({ min: leaseTtl.minMs, max: leaseTtl.maxMs });
  const delta = fc.constantFrom(0, 0, 0, -1, 1);
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({ op: fc.constant("acquire" as const), who, ttlMs: ttl, waitMs: fc.constantFrom(0, 0, 1_000, 60_000) }),
    fc.record({ op: fc.constant("renew" as const), who, delta, ttlMs: ttl }),
    fc.record({ op: fc.constant("release" as const), who, delta }),
    fc.record({ op: fc.constant("force" as const), withToken: fc.boolean(), delta }),
    fc.record({ op: fc.constant("look" as const), who }),
    fc.record({ op: fc.constant("leave" as const), who, clientGone: fc.boolean() }),
    fc.record({ op: fc.constant("drop" as const), who }),
    fc.record({ op: fc.constant("end" as const), who }),
    fc.record({ op: fc.constant("advance" as const), ms: fc.oneof(fc.integer({ min: 0, max: 10_000 }), fc.integer({ min: 0, max: 700_000 })) }),
  );
  /** The codes each operation may refuse with; anything else is a bug. */
  const mayRefuse: Record<Op["op"], HubCode[]> = {
    acquire: ["lease_held"],
    renew: ["lease_not_found", "lease_superseded", "lease_expired"],
    release: ["lease_not_found", "lease_superseded"],
    force: ["lease_not_found", "lease_superseded"],
    look: [],
    leave: [],
    drop: [],
    end: [],
    advance: [],
  };

  test.prop([fc.array(op, { minLength: 1, maxLength: 60 })], { numRuns: 300 })(
    "fencing tokens strictly increase, one holder per token, and a refusal changes nothing",
    (ops) => {
      let nowMs = NOW;
      let current: LeaseRow | undefined;
      let waiters: LeaseWaiter[] = [];
      let lastIssued = 0;
      let waitSeq = 0;
      const holderOfToken = new Map<number, string>();
      const known = new Map<string, number>(); // the token each agent last got

      const apply = (d: Decided) => {
        const w = d.write;
        if (w) {
          expect([w.project, w.name]).toEqual([PROJECT, NAME]);
          expect(w.fencingToken).toBeGreaterThanOrEqual(current?.fencingToken ?? 0);
          const isNewGrant = w.holderAgentId !== null && (current === undefined || w.fencingToken !== current.fencingToken);
          if (isNewGrant) {
            expect(w.fencingToken).toBeGreaterThan(lastIssued);
            lastIssued = w.fencingToken;
            holderOfToken.set(w.fencingToken, w.holderAgentId!);
            known.set(w.holderAgentId!, w.fencingToken);
          } else if (w.holderAgentId !== null) {
            // Same token: only ever the same holder (a renewal).
            expect(holderOfToken.get(w.fencingToken)).toBe(w.holderAgentId);
          }
          current = w;
        }
        if (d.queue) {
          waiters = waiters.filter((x) => !d.queue!.remove?.includes(x.id));
          if (d.queue.add) waiters = [...waiters, d.queue.add];
        }
      };

      for (const o of ops) {
        if (o.op === "advance") {
          nowMs += o.ms;
          continue;
        }
        const h = "who" in o ? agents[o.who]! : A;
        const myWait = waiters.find((w) => w.agentId === h.agentId)?.id ?? "w_none";
        const tokenFor = (d: number) => Math.max(1, (known.get(h.agentId) ?? current?.fencingToken ?? 1) + d);
        const inputs = structuredClone({ current, waiters });
        const run = (): Decided => {
          switch (o.op) {
            case "acquire":
              return decideAcquire(current, { name: NAME, holder: h, ttlMs: o.ttlMs, nowMs, ...(o.waitMs > 0 && { wait: { id: `w${++waitSeq}`, deadlineMs: nowMs + o.waitMs } }) }, waiters);
            case "renew":
              return decideRenew(current, { name: NAME, holder: h, fencingToken: tokenFor(o.delta), ttlMs: o.ttlMs, nowMs }, waiters);
            case "release":
              return decideRelease(current, { name: NAME, holder: h, fencingToken: tokenFor(o.delta) }, waiters, nowMs);
            case "force":
              return decideForceRelease(current, { name: NAME, nowMs, ...(o.withToken && { fencingToken: Math.max(1, (current?.fencingToken ?? 1) + o.delta) }) }, waiters);
            case "look":
              return decideWaiting(current, { id: myWait, holder: h, name: NAME, nowMs }, waiters);
            case "leave":
              return decideLeaving(current, { id: myWait, holder: h, name: NAME, nowMs, clientGone: o.clientGone }, waiters);
            case "drop":
              return decideDropWaiters(current, { agentId: h.agentId, nowMs }, waiters);
            case "end":
              return decideInstanceEnds(current, { agentId: h.agentId, nowMs }, waiters);
          }
        };
        let d: Decided;
        try {
          d = run();
        } catch (e) {
          if (!isHubError(e)) throw e;
          expect(mayRefuse[o.op]).toContain(e.code);
          // A refusal writes nothing and leaves what it was shown as it was.
          expect({ current, waiters }).toEqual(inputs);
          continue;
        }
        // Decisions are pure: what they were shown is left untouched.
        expect({ current, waiters }).toEqual(inputs);
        apply(d);
        // An instance that ends neither keeps nor gets the lease, and none of its calls waits on.
        if (o.op === "end") {
          expect(current?.holderAgentId ?? null).not.toBe(h.agentId);
          expect(waiters.filter((w) => w.agentId === h.agentId)).toEqual([]);
        }
        // At most one token is current at any instant: the row's own, while it is held and live.
        if (current) {
          for (let t = Math.max(1, current.fencingToken - 2); t <= current.fencingToken + 1; t++) {
            const live = current.holderAgentId !== null && current.expiresAtMs > nowMs;
            expect(decideFence(current, t, nowMs).valid).toBe(live && t === current.fencingToken);
          }
        }
      }
    },
  );

  const anyRow = fc.record({
    held: fc.boolean(),
    token: fc.integer({ min: 1, max: 1_000_000 }),
    expiresInMs: fc.integer({ min: -10_000, max: 10_000 }),
  });
  test.prop([anyRow, fc.integer({ min: 1, max: 1_000_002 })], { numRuns: 500 })(
    "a fence check accepts exactly the live holder's current token",
    ({ held, token, expiresInMs }, presented) => {
      const current = row(held ? A : null, token, NOW + expiresInMs);
      const v = decideFence(current, presented, NOW);
      expect(v.valid).toBe(held && presented === token && expiresInMs > 0);
      expect(v.reason === "unknown").toBe(presented > token);
      expect(v.reason === "superseded").toBe(presented < token);
    },
  );

  test.prop([fc.option(anyRow, { nil: undefined }), who, ttl], { numRuns: 300 })(
    "an acquire that is granted is on floor + 1, or on the same token when it renews its own live lease",
    (r, i, ttlMs) => {
      const current = r && row(r.held ? agents[(i + 1) % agents.length]! : null, r.token, NOW + r.expiresInMs);
      try {
        const d = decideAcquire(current, { name: NAME, holder: agents[i]!, ttlMs, nowMs: NOW });
        const prev = current?.fencingToken ?? 0;
        expect(d.write!.fencingToken).toBe(d.result.kind === "renewed" ? prev : prev + 1);
        expect(d.write!.expiresAtMs).toBe(NOW + ttlMs);
      } catch (e) {
        if (!isHubError(e)) throw e;
        expect(e.code).toBe("lease_held");
        expect(r && r.held && r.expiresInMs > 0).toBe(true);
      }
    },
  );
});
