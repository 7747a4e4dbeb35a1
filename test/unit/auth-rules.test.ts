import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { createRateLimiter, rateKey, type RateVerdict } from "../../src/auth/rate-limit.js";
import { authRules, neededScope, type AuthRule } from "../../src/auth/rules.js";
import { scopeAllows } from "../../src/auth/tokens.js";
import { NOW, named, titled } from "./support.js";

type TokenScope = Parameters<typeof scopeAllows>[0];

/**
 * The authentication table of src/auth/rules.ts and the request budget of src/auth/rate-limit.ts,
 * called directly with fixed instants: no hub. Expected answers are reference-hub.md §1.5-1.6 with
 * the spec README §3.3 (decision D40: keys are authenticated identities) and the token scopes of
 * the project README (decision D15).
 */

describe("neededScope", () => {
  type Case = { name: string; rule: AuthRule; scope: TokenScope };
  const cases: Case[] = [
    { name: "an agent call needs agent", rule: { kind: "agent" }, scope: "agent" },
    { name: "a project call needs agent", rule: { kind: "project", projectField: "project" }, scope: "agent" },
    { name: "an agent-or-project watch needs read", rule: { kind: "agentOrProject", projectField: "project" }, scope: "read" },
    { name: "an agent-or-operator read needs read", rule: { kind: "agentOrOperator", projectField: "project" }, scope: "read" },
    { name: "an operator action needs agent", rule: { kind: "operator", projectField: "project" }, scope: "agent" },
    { name: "an admin call needs agent", rule: { kind: "adminConfigured" }, scope: "agent" },
    { name: "a public call needs agent (a token never widens it)", rule: { kind: "public" }, scope: "agent" },
    { name: "a rule's own scope wins over its kind's", rule: { kind: "agentOrOperator", projectField: "project", scope: "check" }, scope: "check" },
    { name: "an operator read with its own scope", rule: { kind: "operator", projectField: "project", scope: "read" }, scope: "read" },
  ];
  it.each(named(cases))("%s", (_title, { rule, scope }) => {
    expect(neededScope(rule)).toBe(scope);
  });
});

describe("authRules", () => {
  const method = (key: string) => key.split("/")[1]!;
  type Case = { method: string; kind: AuthRule["kind"]; scope: TokenScope };
  const cases: Case[] = [
    { method: "kxm.hub.v1.PresenceService/RegisterAgent", kind: "project", scope: "agent" },
    { method: "kxm.hub.v1.PresenceService/Heartbeat", kind: "agent", scope: "agent" },
    { method: "kxm.hub.v1.PresenceService/ListAgents", kind: "agentOrOperator", scope: "read" },
    { method: "kxm.hub.v1.PresenceService/WatchPresence", kind: "agentOrProject", scope: "read" },
    { method: "kxm.hub.v1.LeaseService/AcquireLease", kind: "agent", scope: "agent" },
    { method: "kxm.hub.v1.LeaseService/CheckFence", kind: "agentOrOperator", scope: "check" },
    { method: "kxm.hub.v1.LeaseService/GetLease", kind: "agentOrOperator", scope: "read" },
    { method: "kxm.hub.v1.PeerService/SendMessage", kind: "agent", scope: "agent" },
    { method: "kxm.hub.v1.SyncService/PushEvents", kind: "project", scope: "agent" },
    { method: "kxm.hub.v1.OpsService/WatchRuns", kind: "operator", scope: "read" },
    { method: "kxm.hub.v1.OpsService/ForceReleaseLease", kind: "operator", scope: "agent" },
    { method: "kxm.hub.v1.OpsService/CreateProjectToken", kind: "adminConfigured", scope: "agent" },
    { method: "kxm.hub.v1.OpsService/RevokeProjectToken", kind: "adminConfigured", scope: "agent" },
    { method: "grpc.reflection.v1.ServerReflection/ServerReflectionInfo", kind: "public", scope: "agent" },
  ];
  it.each(titled(cases, (c) => `${c.method}: ${c.kind}, needs ${c.scope}`))("%s", (_title, { method: m, kind, scope }) => {
    expect(authRules[m]?.kind).toBe(kind);
    expect(neededScope(authRules[m]!)).toBe(scope);
  });

  it("lets a check token make CheckFence and nothing else", () => {
    const allowed = Object.entries(authRules).filter(([, r]) => r.kind !== "public" && scopeAllows("check", neededScope(r)));
    expect(allowed.map(([k]) => k)).toEqual(["kxm.hub.v1.LeaseService/CheckFence"]);
  });

  it("lets a read token make only reads and watches, never a call that changes state", () => {
    const allowed = Object.entries(authRules).filter(([, r]) => r.kind !== "public" && scopeAllows("read", neededScope(r)));
    expect(allowed.length).toBeGreaterThan(1);
    for (const [k] of allowed) expect(method(k)).toMatch(/^(Get|List|Watch|Check)/);
  });

  it("keeps token management and the hub-wide views admin-only", () => {
    const admin = Object.entries(authRules).filter(([, r]) => r.kind === "adminConfigured").map(([k]) => method(k));
    expect(admin.sort()).toEqual(["CreateProjectToken", "GetSnapshot", "ListAuditEvents", "ListProjectTokens", "ListProjects", "RevokeProjectToken", "WatchProjects"]);
  });

  it("names an existing request field for every project-scoped rule", () => {
    for (const r of Object.values(authRules)) if ("projectField" in r) expect(r.projectField).toBe("project");
  });
});

describe("rateKey", () => {
  it.each(named([
    { name: "an authenticated agent is keyed by its id", identity: { agentId: "agt_1", token: "t" }, key: "agent:agt_1" },
    { name: "a token caller is keyed by its token", identity: { token: "t" }, key: "token:t" },
    { name: "an empty agent id falls back to the token", identity: { agentId: "", token: "t" }, key: "token:t" },
    { name: "an unauthenticated caller is keyed by its address", identity: undefined, key: "addr:10.0.0.1" },
    { name: "a caller with no identity at all is keyed by its address", identity: {}, key: "addr:10.0.0.1" },
  ]))("%s", (_title, { identity, key }) => {
    expect(rateKey(identity, "10.0.0.1")).toBe(key);
  });
});

describe("createRateLimiter", () => {
  const windowMs = 60_000;
  const maxRequests = 3;
  /** A limiter that has counted `n` requests of "k" at NOW. */
  function counted(n: number) {
    const l = createRateLimiter({ windowMs, maxRequests });
    for (let i = 0; i < n; i++) l.take("k", NOW);
    return l;
  }

  it("counts nothing when rate limiting is off", () => {
    const l = createRateLimiter(false);
    expect(l.enabled).toBe(false);
    expect(l.take("k", NOW)).toBeUndefined();
  });

  type Case = { name: string; before: number; atMs: number; verdict: RateVerdict };
  const cases: Case[] = [
    { name: "the first request leaves max - 1", before: 0, atMs: NOW, verdict: { limit: 3, remaining: 2 } },
    { name: "the max-th request passes with 0 left", before: 2, atMs: NOW, verdict: { limit: 3, remaining: 0 } },
    { name: "one over is refused until the window ends", before: 3, atMs: NOW, verdict: { limit: 3, remaining: 0, retryAfterMs: 60_000 } },
    { name: "a refusal rounds the wait up to whole seconds", before: 3, atMs: NOW + 58_500, verdict: { limit: 3, remaining: 0, retryAfterMs: 2_000 } },
    { name: "a refusal waits at least one second", before: 3, atMs: NOW + 59_999, verdict: { limit: 3, remaining: 0, retryAfterMs: 1_000 } },
    { name: "a refused request counts too", before: 10, atMs: NOW + 1, verdict: { limit: 3, remaining: 0, retryAfterMs: 60_000 } },
    { name: "the window restarts exactly windowMs after it began", before: 10, atMs: NOW + 60_000, verdict: { limit: 3, remaining: 2 } },
  ];
  it.each(named(cases))("%s", (_title, { before, atMs, verdict }) => {
    expect(counted(before).take("k", atMs)).toEqual(verdict);
  });

  it("keeps one budget per key", () => {
    const l = counted(3);
    expect(l.take("k", NOW)?.retryAfterMs).toBe(60_000);
    expect(l.take("other", NOW)).toEqual({ limit: 3, remaining: 2 });
  });

  it("prunes a window that ended without changing the next verdict", () => {
    const l = counted(5);
    l.prune(NOW + windowMs + 1);
    expect(l.take("k", NOW + windowMs + 1)).toEqual({ limit: 3, remaining: 2 });
  });

  const history = fc.array(fc.record({ key: fc.constantFrom("a", "b"), stepMs: fc.integer({ min: 0, max: 30_000 }) }), { minLength: 1, maxLength: 80 });
  test.prop([history, fc.integer({ min: 100, max: 60_000 }), fc.integer({ min: 1, max: 10 })], { numRuns: 300 })(
    "answers as the reference's fixed window does for any history",
    (steps, win, max) => {
      const l = createRateLimiter({ windowMs: win, maxRequests: max });
      const model = new Map<string, { startedAt: number; count: number }>();
      let now = NOW;
      for (const s of steps) {
        now += s.stepMs;
        const kept = model.get(s.key);
        const b = kept && now - kept.startedAt < win ? kept : { startedAt: now, count: 0 };
        model.set(s.key, b);
        b.count += 1;
        const v = l.take(s.key, now)!;
        expect(v.limit).toBe(max);
        expect(v.remaining).toBe(Math.max(0, max - b.count));
        // reference-hub.md §1.6: retry-after = max(1, ceil((startedAt + windowMs - now) / 1000)) s.
        expect(v.retryAfterMs).toBe(b.count > max ? Math.max(1, Math.ceil((b.startedAt + win - now) / 1000)) * 1000 : undefined);
      }
    },
  );
});
