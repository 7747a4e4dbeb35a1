import { expect } from "vitest";

/**
 * Lease scenarios as data, run by every face against a fresh hub (lease.rpc.test.ts over each
 * RPC protocol; a REST runner can reuse them through its own driver). Two agents, A and B, are
 * registered in one project under `agentNames`; the clock only moves on `advance`.
 * Expected refusals name the reason (ErrorInfo, UPPER_SNAKE) and the Connect code of errors.md.
 */

export type Who = "A" | "B";
export const agentNames: Record<Who, string> = { A: "agent-a", B: "agent-b" };

export type ConnectCodeName = "aborted" | "failed_precondition" | "invalid_argument" | "not_found";

/** A lease as the driver read it (from a response or a refusal detail). */
export interface SeenLease {
  name: string;
  holderAgentName: string;
  fencingToken: number;
  acquiredAtMs: number;
  expiresAtMs: number;
}

export type Outcome =
  | { ok: true; lease?: SeenLease; renewed?: boolean; released?: boolean; expired?: boolean; names?: string[] }
  | { ok: false; reason: string; code?: ConnectCodeName; lease?: SeenLease; metadata: Record<string, string> };

/** One face's way of calling the hub; `token` undefined means the field is not sent. */
export interface LeaseDriver {
  acquire(as: Who, req: { name: string; ttlMs?: number }): Promise<Outcome>;
  renew(as: Who, req: { name: string; fencingToken?: number; ttlMs?: number }): Promise<Outcome>;
  release(as: Who, req: { name: string; fencingToken?: number }): Promise<Outcome>;
  get(as: Who, req: { name: string }): Promise<Outcome>;
  list(as: Who, req: { includeExpired: boolean }): Promise<Outcome>;
  advance(ms: number): void;
  nowMs(): number;
}

/** What a step must answer. */
export type Expect =
  | {
      token: number;
      renewed?: boolean;
      released?: boolean;
      expired?: boolean;
      holder?: Who;
      /** expiresAt = hub now + this. */
      expiresInMs?: number;
      /** acquiredAt = hub now - this (0: granted by this step). */
      acquiredAgoMs?: number;
    }
  | { names: string[] }
  | { reason: string; code: ConnectCodeName; lease?: { token: number; holder: Who } };

export type Step =
  | { op: "acquire"; as: Who; name: string; ttlMs?: number; expect: Expect }
  | { op: "renew"; as: Who; name: string; token?: number; ttlMs?: number; expect: Expect }
  | { op: "release"; as: Who; name: string; token?: number; expect: Expect }
  | { op: "get"; as: Who; name: string; expect: Expect }
  | { op: "list"; as: Who; includeExpired?: boolean; expect: Expect }
  | { op: "advance"; ms: number };

export interface LeaseCase {
  name: string;
  steps: Step[];
}

const TTL = 5_000;
const held = (token: number, holder: Who) => ({ token, holder });

export const leaseCases: LeaseCase[] = [
  {
    name: "first grant gets token 1 with the requested ttl",
    steps: [{ op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1, renewed: false, holder: "A", expiresInMs: TTL, acquiredAgoMs: 0 } }],
  },
  {
    name: "ttl defaults to 300000 ms",
    steps: [{ op: "acquire", as: "A", name: "db", expect: { token: 1, expiresInMs: 300_000 } }],
  },
  {
    name: "holder re-acquiring its live lease keeps the token and reports renewed",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1, renewed: false } },
      { op: "advance", ms: 1_000 },
      { op: "acquire", as: "A", name: "db", ttlMs: 10_000, expect: { token: 1, renewed: true, holder: "A", expiresInMs: 10_000, acquiredAgoMs: 1_000 } },
    ],
  },
  {
    name: "another agent is refused LEASE_HELD with the current lease",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "advance", ms: TTL - 1 },
      { op: "acquire", as: "B", name: "db", ttlMs: TTL, expect: { reason: "LEASE_HELD", code: "aborted", lease: held(1, "A") } },
      { op: "renew", as: "B", name: "db", token: 1, expect: { reason: "LEASE_SUPERSEDED", code: "aborted", lease: held(1, "A") } },
      { op: "release", as: "B", name: "db", token: 1, expect: { reason: "LEASE_SUPERSEDED", code: "aborted", lease: held(1, "A") } },
    ],
  },
  {
    name: "a lapsed lease is taken over with token + 1",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "advance", ms: TTL },
      { op: "acquire", as: "B", name: "db", ttlMs: TTL, expect: { token: 2, renewed: false, holder: "B", acquiredAgoMs: 0 } },
      { op: "get", as: "A", name: "db", expect: { token: 2, holder: "B", expired: false } },
    ],
  },
  {
    name: "the old holder is refused LEASE_SUPERSEDED after a takeover",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "advance", ms: TTL + 1 },
      { op: "acquire", as: "B", name: "db", ttlMs: TTL, expect: { token: 2 } },
      { op: "renew", as: "A", name: "db", token: 1, expect: { reason: "LEASE_SUPERSEDED", code: "aborted", lease: held(2, "B") } },
      { op: "release", as: "A", name: "db", token: 1, expect: { reason: "LEASE_SUPERSEDED", code: "aborted", lease: held(2, "B") } },
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { reason: "LEASE_HELD", code: "aborted", lease: held(2, "B") } },
    ],
  },
  {
    name: "renewing with a wrong token of one's own lease is LEASE_SUPERSEDED",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "renew", as: "A", name: "db", token: 2, expect: { reason: "LEASE_SUPERSEDED", code: "aborted", lease: held(1, "A") } },
    ],
  },
  {
    name: "renew extends a live lease and keeps token and acquiredAt",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "advance", ms: TTL - 1 },
      { op: "renew", as: "A", name: "db", token: 1, ttlMs: 20_000, expect: { token: 1, renewed: true, expiresInMs: 20_000, acquiredAgoMs: TTL - 1 } },
      { op: "advance", ms: 10_000 },
      { op: "acquire", as: "B", name: "db", expect: { reason: "LEASE_HELD", code: "aborted", lease: held(1, "A") } },
    ],
  },
  {
    name: "renewing one's own lapsed lease is LEASE_EXPIRED; releasing it still works",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "advance", ms: TTL },
      { op: "get", as: "B", name: "db", expect: { token: 1, holder: "A", expired: true } },
      { op: "renew", as: "A", name: "db", token: 1, expect: { reason: "LEASE_EXPIRED", code: "failed_precondition", lease: held(1, "A") } },
      { op: "release", as: "A", name: "db", token: 1, expect: { token: 1, released: true, holder: "A" } },
    ],
  },
  {
    name: "the holder re-acquiring its own lapsed lease is a takeover (token + 1)",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "advance", ms: TTL },
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 2, renewed: false, acquiredAgoMs: 0 } },
    ],
  },
  {
    name: "renew and release without a fencing token are LEASE_TOKEN_REQUIRED",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "renew", as: "A", name: "db", expect: { reason: "LEASE_TOKEN_REQUIRED", code: "invalid_argument" } },
      { op: "release", as: "A", name: "db", expect: { reason: "LEASE_TOKEN_REQUIRED", code: "invalid_argument" } },
      { op: "renew", as: "A", name: "nothing-here", expect: { reason: "LEASE_TOKEN_REQUIRED", code: "invalid_argument" } },
    ],
  },
  {
    name: "an unknown resource is LEASE_NOT_FOUND for renew, release and get",
    steps: [
      { op: "renew", as: "A", name: "ghost", token: 1, expect: { reason: "LEASE_NOT_FOUND", code: "not_found" } },
      { op: "release", as: "A", name: "ghost", token: 1, expect: { reason: "LEASE_NOT_FOUND", code: "not_found" } },
      { op: "get", as: "A", name: "ghost", expect: { reason: "LEASE_NOT_FOUND", code: "not_found" } },
    ],
  },
  {
    name: "the fence never restarts: after a release the next grant is the released token + 1",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "release", as: "A", name: "db", token: 1, expect: { token: 1, released: true } },
      { op: "get", as: "A", name: "db", expect: { reason: "LEASE_NOT_FOUND", code: "not_found" } },
      { op: "renew", as: "A", name: "db", token: 1, expect: { reason: "LEASE_NOT_FOUND", code: "not_found" } },
      { op: "release", as: "A", name: "db", token: 1, expect: { reason: "LEASE_NOT_FOUND", code: "not_found" } },
      { op: "acquire", as: "B", name: "db", ttlMs: TTL, expect: { token: 2, renewed: false, holder: "B" } },
      { op: "release", as: "B", name: "db", token: 2, expect: { token: 2, released: true } },
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 3, holder: "A" } },
      { op: "renew", as: "A", name: "db", token: 1, expect: { reason: "LEASE_SUPERSEDED", code: "aborted", lease: held(3, "A") } },
    ],
  },
  {
    name: "resources are independent; each starts at token 1",
    steps: [
      { op: "acquire", as: "A", name: "one", ttlMs: TTL, expect: { token: 1 } },
      { op: "acquire", as: "B", name: "two", ttlMs: TTL, expect: { token: 1, holder: "B" } },
      { op: "release", as: "A", name: "one", token: 1, expect: { token: 1, released: true } },
      { op: "acquire", as: "B", name: "one", ttlMs: TTL, expect: { token: 2 } },
      { op: "acquire", as: "A", name: "three", ttlMs: TTL, expect: { token: 1 } },
    ],
  },
  {
    name: "list shows held leases by name; lapsed only with includeExpired; released never",
    steps: [
      { op: "acquire", as: "A", name: "b-lock", ttlMs: TTL, expect: { token: 1 } },
      { op: "acquire", as: "B", name: "a-lock", ttlMs: 10_000, expect: { token: 1 } },
      { op: "acquire", as: "A", name: "c-lock", ttlMs: TTL, expect: { token: 1 } },
      { op: "release", as: "A", name: "c-lock", token: 1, expect: { token: 1, released: true } },
      { op: "list", as: "A", expect: { names: ["a-lock", "b-lock"] } },
      { op: "advance", ms: TTL },
      { op: "list", as: "B", expect: { names: ["a-lock"] } },
      { op: "list", as: "B", includeExpired: true, expect: { names: ["a-lock", "b-lock"] } },
    ],
  },
  {
    name: "ttl outside 5000..600000 ms is PROTOCOL_ERROR; the bounds themselves are granted",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: 4_999, expect: { reason: "PROTOCOL_ERROR", code: "invalid_argument" } },
      { op: "acquire", as: "A", name: "db", ttlMs: 600_001, expect: { reason: "PROTOCOL_ERROR", code: "invalid_argument" } },
      { op: "acquire", as: "A", name: "db", ttlMs: 0, expect: { reason: "PROTOCOL_ERROR", code: "invalid_argument" } },
      { op: "acquire", as: "A", name: "db", ttlMs: 5_000, expect: { token: 1, expiresInMs: 5_000 } },
      { op: "renew", as: "A", name: "db", token: 1, ttlMs: 4_999, expect: { reason: "PROTOCOL_ERROR", code: "invalid_argument" } },
      { op: "renew", as: "A", name: "db", token: 1, ttlMs: 600_000, expect: { token: 1, expiresInMs: 600_000 } },
    ],
  },
  {
    name: "a fencing token below 1 or a bad name is PROTOCOL_ERROR",
    steps: [
      { op: "acquire", as: "A", name: "db", ttlMs: TTL, expect: { token: 1 } },
      { op: "renew", as: "A", name: "db", token: 0, expect: { reason: "PROTOCOL_ERROR", code: "invalid_argument" } },
      { op: "release", as: "A", name: "db", token: -1, expect: { reason: "PROTOCOL_ERROR", code: "invalid_argument" } },
      { op: "acquire", as: "A", name: "   ", expect: { reason: "PROTOCOL_ERROR", code: "invalid_argument" } },
      { op: "acquire", as: "A", name: "x".repeat(201), expect: { reason: "PROTOCOL_ERROR", code: "invalid_argument" } },
      { op: "acquire", as: "A", name: "x".repeat(200), expect: { token: 1 } },
    ],
  },
];

/** Runs one case through a driver, asserting every step. */
export async function runLeaseCase(driver: LeaseDriver, c: LeaseCase): Promise<void> {
  for (const [i, step] of c.steps.entries()) {
    if (step.op === "advance") {
      driver.advance(step.ms);
      continue;
    }
    const got = await call(driver, step);
    const where = `step ${i} (${step.op} as ${step.as})`;
    const want = step.expect;
    if ("reason" in want) {
      expect(got.ok, `${where}: expected ${want.reason}, got ${JSON.stringify(got)}`).toBe(false);
      if (got.ok) return;
      expect(got.reason, where).toBe(want.reason);
      if (got.code !== undefined) expect(got.code, where).toBe(want.code);
      if (want.lease) {
        expect(got.lease, `${where}: lease detail`).toBeDefined();
        expect(got.lease?.fencingToken, where).toBe(want.lease.token);
        expect(got.lease?.holderAgentName, where).toBe(agentNames[want.lease.holder]);
        expect(got.metadata.holderAgentName, where).toBe(agentNames[want.lease.holder]);
        expect(got.metadata.fencingToken, where).toBe(String(want.lease.token));
        expect(got.metadata.expiresAt, where).toBe(new Date(got.lease!.expiresAtMs).toISOString());
      }
      continue;
    }
    expect(got.ok, `${where}: expected success, got ${JSON.stringify(got)}`).toBe(true);
    if (!got.ok) return;
    if ("names" in want) {
      expect(got.names, where).toEqual(want.names);
      continue;
    }
    const lease = got.lease!;
    expect(lease, where).toBeDefined();
    expect(lease.fencingToken, where).toBe(want.token);
    if (want.renewed !== undefined) expect(got.renewed, where).toBe(want.renewed);
    if (want.released !== undefined) expect(got.released, where).toBe(want.released);
    if (want.expired !== undefined) expect(got.expired, where).toBe(want.expired);
    if (want.holder) expect(lease.holderAgentName, where).toBe(agentNames[want.holder]);
    if (want.expiresInMs !== undefined) expect(lease.expiresAtMs, where).toBe(driver.nowMs() + want.expiresInMs);
    if (want.acquiredAgoMs !== undefined) expect(lease.acquiredAtMs, where).toBe(driver.nowMs() - want.acquiredAgoMs);
  }
}

function call(driver: LeaseDriver, step: Exclude<Step, { op: "advance" }>): Promise<Outcome> {
  switch (step.op) {
    case "acquire":
      return driver.acquire(step.as, { name: step.name, ttlMs: step.ttlMs });
    case "renew":
      return driver.renew(step.as, { name: step.name, fencingToken: step.token, ttlMs: step.ttlMs });
    case "release":
      return driver.release(step.as, { name: step.name, fencingToken: step.token });
    case "get":
      return driver.get(step.as, { name: step.name });
    case "list":
      return driver.list(step.as, { includeExpired: step.includeExpired ?? false });
  }
}
