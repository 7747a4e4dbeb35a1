import { describe, expect, it } from "vitest";
import { isHubError } from "../../src/errors.js";
import { createBus } from "../../src/events/bus.js";
import { createLeases, type LeaseChange } from "../../src/lease/leases.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import type { Lease } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { hubClients, protocols, withHeaders, type HubClients } from "../fixtures/clients.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub } from "../fixtures/hub.js";
import { ms, refusalOf } from "../fixtures/rpc.js";

/**
 * Model test: seeded random histories of acquire/renew/release/advance by several agents on one
 * resource. Every answer must equal a ten-line reference model's, and, independently of the
 * model, the invariants must hold: granted tokens never decrease, a token value is granted to one
 * holder only, and at most one agent holds a live grant at any hub instant.
 */

/** mulberry32: a small seeded PRNG, so a failing seed replays exactly. */
function prng(seed: number) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  return { next, pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]! };
}

type Answer = { ok: true; token: number; holder: string; expiresAtMs: number; renewed: boolean } | { ok: false; reason: string };

interface LeaseApi {
  acquire(agent: number, ttlMs: number): Promise<Answer>;
  renew(agent: number, token: number | undefined, ttlMs: number): Promise<Answer>;
  release(agent: number, token: number | undefined): Promise<Answer>;
  advance(ms: number): void;
  now(): number;
}

/** The reference model of one resource. */
function model() {
  let holder: number | null = null;
  let token = 0;
  let expiresAtMs = 0;
  const no = (reason: string) => ({ ok: false as const, reason });
  const own = (agent: number, t: number | undefined) =>
    t === undefined ? no("LEASE_TOKEN_REQUIRED") : holder === null ? no("LEASE_NOT_FOUND") : holder !== agent || token !== t ? no("LEASE_SUPERSEDED") : undefined;
  return {
    acquire(agent: number, ttl: number, now: number) {
      if (holder !== null && expiresAtMs > now && holder !== agent) return no("LEASE_HELD");
      const renewed = holder === agent && expiresAtMs > now;
      if (!renewed) token += 1;
      holder = agent;
      expiresAtMs = now + ttl;
      return { ok: true as const, token, renewed };
    },
    renew(agent: number, t: number | undefined, ttl: number, now: number) {
      const refusal = own(agent, t) ?? (expiresAtMs <= now ? no("LEASE_EXPIRED") : undefined);
      if (refusal) return refusal;
      expiresAtMs = now + ttl;
      return { ok: true as const, token, renewed: true };
    },
    release(agent: number, t: number | undefined) {
      const refusal = own(agent, t);
      if (refusal) return refusal;
      holder = null;
      return { ok: true as const, token, renewed: false };
    },
  };
}

/** Replays one history; returns the reasons seen, so a seed is known to reach every branch. */
async function replay(api: LeaseApi, seed: number, steps: number, agents: number): Promise<Set<string>> {
  const seen = new Set<string>();
  const rnd = prng(seed);
  const m = model();
  const lastToken = new Map<number, number>();
  const live = new Map<number, number>(); // agent -> expiresAt of its current grant
  const grantedTo = new Map<number, string>(); // token -> holder name it was granted to
  let highest = 0;
  let lastHolder: number | undefined;
  for (let i = 0; i < steps; i++) {
    const r = rnd.next();
    // often the latest holder, so its own renewals, releases and lapses are exercised too
    const agent = rnd.next() < 0.4 && lastHolder !== undefined ? lastHolder : Math.floor(rnd.next() * agents);
    const ttl = rnd.pick([5_000, 7_000, 12_000]);
    const token = rnd.next() < 0.05 ? undefined : rnd.next() < 0.75 ? (lastToken.get(agent) ?? 1) : 1 + Math.floor(rnd.next() * (highest + 1));
    let got: Answer;
    let want: ReturnType<ReturnType<typeof model>["acquire"]>;
    const now = api.now();
    let op: string;
    if (r < 0.15) {
      api.advance(rnd.pick([1, 1_000, 4_999, 5_000, 6_000]));
      continue;
    } else if (r < 0.55) {
      op = `acquire(${agent}, ${ttl})`;
      [got, want] = [await api.acquire(agent, ttl), m.acquire(agent, ttl, now)];
    } else if (r < 0.8) {
      op = `renew(${agent}, ${token}, ${ttl})`;
      [got, want] = [await api.renew(agent, token, ttl), m.renew(agent, token, ttl, now)];
    } else {
      op = `release(${agent}, ${token})`;
      [got, want] = [await api.release(agent, token), m.release(agent, token)];
    }
    const where = `seed ${seed} step ${i}: ${op}`;
    expect(got.ok ? { ok: true, token: got.token, renewed: got.renewed } : got, where).toEqual(want);
    seen.add(got.ok ? op.split("(")[0]! : got.reason);
    if (!got.ok) continue;
    if (op.startsWith("release")) {
      live.delete(agent);
      continue;
    }
    // invariants, from the answers alone
    expect(got.token, `${where}: token went down`).toBeGreaterThanOrEqual(highest);
    expect(grantedTo.get(got.token) ?? got.holder, `${where}: token ${got.token} granted twice`).toBe(got.holder);
    grantedTo.set(got.token, got.holder);
    highest = got.token;
    lastToken.set(agent, got.token);
    lastHolder = agent;
    live.set(agent, got.expiresAtMs);
    const holders = [...live].filter(([, exp]) => exp > api.now()).map(([a]) => a);
    expect(holders, `${where}: live holders`).toEqual([agent]);
  }
  expect(highest, `seed ${seed} exercised takeovers`).toBeGreaterThan(3);
  return seen;
}

const everyBranch = ["acquire", "renew", "release", "LEASE_HELD", "LEASE_SUPERSEDED", "LEASE_EXPIRED", "LEASE_NOT_FOUND", "LEASE_TOKEN_REQUIRED"];

describe("lease model", () => {
  it.each([1, 2, 3, 42, 1337, 9001])("domain + SQLite store follow the model (seed %i, 1000 steps)", async (seed) => {
    const clock = new FakeClock();
    // The store makes each decision at its clock's time: the same fake clock as the domain's.
    const store = new SqliteStore({ path: ":memory:", synchronous: "full", clock });
    const leases = createLeases({ store, clock, observer: { log() {}, count() {} }, bus: createBus<LeaseChange>((c) => c.project) });
    const caller = (a: number) => ({ kind: "agent" as const, agentId: `agt_${a}`, agentName: `agent-${a}`, project: "p" });
    // An acquire decides only for an agent the store knows (leases.ts, asCaller): register them.
    for (let a = 0; a < 8; a++) {
      const row = { id: `agt_${a}`, project: "p", name: `agent-${a}`, purpose: "model", keyHash: "0".repeat(64), connectedAtMs: 0, lastSeenAtMs: 0, online: true };
      await store.agents.decideAgentLeases({ project: "p", nameKey: row.name }, () => ({ write: row, result: undefined }));
    }
    const answer = async (run: () => Promise<{ lease: { fencingToken: number; holderAgentName: string; expiresAtMs: number }; renewed?: boolean }>): Promise<Answer> => {
      try {
        const r = await run();
        return { ok: true, token: r.lease.fencingToken, holder: r.lease.holderAgentName, expiresAtMs: r.lease.expiresAtMs, renewed: r.renewed ?? false };
      } catch (e) {
        if (!isHubError(e)) throw e;
        return { ok: false, reason: e.code.toUpperCase() };
      }
    };
    const seen = await replay(
      {
        acquire: (a, ttlMs) => answer(() => leases.acquire(caller(a), { name: "res", ttlMs })),
        renew: (a, fencingToken, ttlMs) => answer(() => leases.renew(caller(a), { name: "res", fencingToken, ttlMs })),
        release: (a, fencingToken) => answer(() => leases.release(caller(a), { name: "res", fencingToken })),
        advance: (by) => clock.advance(by),
        now: () => clock.now(),
      },
      seed,
      1000,
      4,
    );
    expect([...seen].sort()).toEqual([...everyBranch].sort());
    await store.close();
  });

  it("the served hub follows the model over mixed protocols (seed 7, 200 steps)", async () => {
    await using t = await startTestHub();
    const clients: HubClients[] = [];
    for (let a = 0; a < 4; a++) {
      const creds = await t.register(`agent-${a}`);
      clients.push(hubClients(protocols[a % protocols.length]!.make(t.baseUrl, [withHeaders(creds.headers)])));
    }
    const answer = async (run: () => Promise<{ lease?: Lease; renewed?: boolean }>): Promise<Answer> => {
      try {
        const r = await run();
        const l = r.lease!;
        return { ok: true, token: Number(l.fencingToken), holder: l.holderAgentName, expiresAtMs: ms(l.expiresAt), renewed: r.renewed ?? false };
      } catch (e) {
        return { ok: false, reason: refusalOf(e).reason };
      }
    };
    const big = (n: number | undefined) => (n === undefined ? undefined : BigInt(n));
    await replay(
      {
        acquire: (a, ttlMs) => answer(() => clients[a]!.leases.acquireLease({ name: "res", ttlMs })),
        renew: (a, tok, ttlMs) => answer(() => clients[a]!.leases.renewLease({ name: "res", fencingToken: big(tok), ttlMs })),
        release: (a, tok) => answer(() => clients[a]!.leases.releaseLease({ name: "res", fencingToken: big(tok) })),
        advance: (by) => t.clock.advance(by),
        now: () => t.clock.now(),
      },
      7,
      200,
      4,
    );
  });
});
