import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { createPresence, type PresenceDeps } from "../../src/presence/presence.js";
import type { AgentCaller } from "../../src/caller.js";
import { NOW, decideOf, dependencyCall, fixedClock, passesChecks, quietObserver, refusal, refusalOf, titled, untouchable } from "./support.js";

/**
 * Presence as src/presence/presence.ts computes it on the hub clock, and the checks a
 * registration or runtime heartbeat passes before the store is reached, with a fixed clock and
 * a store that is never used: no hub. Expected answers are reference-hub.md §2.1, §2.2 and §2.4.
 */

const STALE_AFTER_MS = 30_000;
const presence = (nowMs = NOW) =>
  createPresence({ store: untouchable<PresenceDeps["store"]>("store"), clock: fixedClock(nowMs), observer: quietObserver, staleAfterMs: STALE_AFTER_MS });

type AgentRow = Parameters<ReturnType<typeof createPresence>["view"]>[0];
type RuntimeRow = Parameters<ReturnType<typeof createPresence>["runtimeViews"]>[0][number];

const agentRow = (over: Partial<AgentRow> = {}): AgentRow => ({
  id: "agt_a",
  project: "proj",
  name: "agent-a",
  purpose: "testing",
  keyHash: "f".repeat(64),
  connectedAtMs: NOW - 100_000,
  lastSeenAtMs: NOW - 10_000,
  online: true,
  ...over,
});

describe("agent presence (§2.1)", () => {
  type Case = { name: string; online: boolean; lastSeenAtMs: number; presence: "online" | "stale" | "offline" };
  const cases: Case[] = [
    { name: "seen just now", online: true, lastSeenAtMs: NOW, presence: "online" },
    { name: "1 ms before its presence lease ends", online: true, lastSeenAtMs: NOW - STALE_AFTER_MS + 1, presence: "online" },
    { name: "at the exact end of its presence lease", online: true, lastSeenAtMs: NOW - STALE_AFTER_MS, presence: "stale" },
    { name: "long after its lease, not yet swept", online: true, lastSeenAtMs: NOW - 3_600_000, presence: "stale" },
    { name: "stored offline though seen just now", online: false, lastSeenAtMs: NOW, presence: "offline" },
    { name: "stored offline and long gone", online: false, lastSeenAtMs: NOW - 3_600_000, presence: "offline" },
  ];
  it.each(titled(cases, (c) => `an agent ${c.name} is ${c.presence}`))("%s", (_title, { online, lastSeenAtMs, presence: want }) => {
    const v = presence().view(agentRow({ online, lastSeenAtMs }), NOW);
    expect(v.presence).toBe(want);
    expect(v.leaseExpiresAtMs).toBe(lastSeenAtMs + STALE_AFTER_MS);
  });

  it("never shows the key hash", () => {
    const v = presence().view(agentRow(), NOW);
    expect(v).not.toHaveProperty("keyHash");
    expect(JSON.stringify(v)).not.toContain("f".repeat(64));
  });

  test.prop([fc.boolean(), fc.integer({ min: -100_000, max: 100_000 }), fc.integer({ min: 100, max: 120_000 })], { numRuns: 300 })(
    "offline when stored offline, else online while now < lastSeen + staleAfter, else stale",
    (online, seenAgoMs, staleAfterMs) => {
      const p = createPresence({ store: untouchable<PresenceDeps["store"]>("store"), clock: fixedClock(), observer: quietObserver, staleAfterMs });
      const v = p.view(agentRow({ online, lastSeenAtMs: NOW - seenAgoMs }), NOW);
      expect(v.presence).toBe(!online ? "offline" : NOW < NOW - seenAgoMs + staleAfterMs ? "online" : "stale");
    },
  );
});

describe("runtime presence (§2.4)", () => {
  const runtime = (heartbeatAtMs: number, host?: string): RuntimeRow => ({
    project: "proj",
    runtimeId: "rtm_74573b9df67705d8f6596518",
    ...(host !== undefined && { host }),
    registeredAtMs: NOW - 600_000,
    heartbeatAtMs,
  });
  it.each(titled([
    { name: "a heartbeat just now", heartbeatAtMs: NOW, presence: "online" },
    { name: "1 ms before its lease ends", heartbeatAtMs: NOW - STALE_AFTER_MS + 1, presence: "online" },
    { name: "at the exact end of its lease", heartbeatAtMs: NOW - STALE_AFTER_MS, presence: "expired" },
    { name: "long after", heartbeatAtMs: NOW - 3_600_000, presence: "expired" },
  ], (c) => `a runtime with ${c.name} is ${c.presence} on the hub clock`))("%s", (_title, { heartbeatAtMs, presence: want }) => {
    const [v] = presence().runtimeViews([runtime(heartbeatAtMs, "build-1")]);
    expect(v).toEqual({
      runtimeId: "rtm_74573b9df67705d8f6596518",
      host: "build-1",
      registeredAtMs: NOW - 600_000,
      heartbeatAtMs,
      leaseExpiresAtMs: heartbeatAtMs + STALE_AFTER_MS,
      presence: want,
    });
  });
});

/** What RegisterAgent hands its store: the agent holding the name, the leases naming it, the time. */
type Registration = (existing: AgentRow | undefined, held: never[], nowMs: number) => { write?: AgentRow };

describe("registration checks (§2.2, before the store)", () => {
  const register = (over: Record<string, string | undefined> = {}) => presence().register({ name: "agent-a", project: "proj", ...over });

  it.each(titled([
    { name: "an empty name", input: { name: "  " }, field: "name" },
    { name: "a name over 64 characters", input: { name: "n".repeat(65) }, field: "name" },
    { name: "a purpose over 256 characters", input: { purpose: "p".repeat(257) }, field: "purpose" },
    { name: "an empty project", input: { project: "" }, field: "project" },
    { name: "a project over 128 characters", input: { project: "p".repeat(129) }, field: "project" },
    { name: "a project with outer whitespace", input: { project: " proj" }, field: "project" },
    { name: "a project with a control character", input: { project: "pro\u0000j" }, field: "project" },
    { name: "a model over 128 characters", input: { model: "m".repeat(129) }, field: "model" },
    { name: "a host over 64 characters", input: { host: "h".repeat(65) }, field: "host" },
  ], (c) => `refuses ${c.name} with protocol_error`))("%s", async (_title, { input, field }) => {
    const e = await refusalOf(register(input));
    expect([e.code, e.metadata.field]).toEqual(["protocol_error", field]);
  });

  it.each(titled([
    { name: "a name of exactly 64 characters", input: { name: "n".repeat(64) } },
    { name: "a project of exactly 128 characters, slashes and Unicode included", input: { project: `org/répo/${"p".repeat(119)}` } },
    { name: "a purpose of exactly 256 characters", input: { purpose: "p".repeat(256) } },
  ], (c) => `takes ${c.name} to the store`))("%s", async (_title, { input }) => {
    expect(await passesChecks(register(input))).toBe(true);
  });

  it("registers under the trimmed name, case-folded for the lookup, online now", async () => {
    const call = await dependencyCall(register({ name: " Agent-A ", model: " tui ", host: "" }));
    expect(call?.args[0]).toEqual({ project: "proj", nameKey: "agent-a" });
    const decide = decideOf<Registration>(call);
    const row = decide(undefined, [], NOW).write!;
    expect(row).toMatchObject({ project: "proj", name: "Agent-A", model: "tui", connectedAtMs: NOW, lastSeenAtMs: NOW, online: true });
    expect(row).not.toHaveProperty("host");
  });

  it("refuses a name another online agent holds with duplicate_agent_name; resumes an offline one under its id", async () => {
    const decide = decideOf<Registration>(await dependencyCall(register()));
    const online = agentRow({ online: true, lastSeenAtMs: NOW - 3_600_000 });
    expect(refusal(() => decide(online, [], NOW)).code).toBe("duplicate_agent_name");
    const resumed = decide(agentRow({ online: false, model: "old" }), [], NOW).write!;
    expect(resumed).toMatchObject({ id: "agt_a", online: true, connectedAtMs: NOW });
    expect(resumed).not.toHaveProperty("model");
    expect(resumed.keyHash).not.toBe("f".repeat(64));
  });

  // Decision D51: the default purpose names no product.
  it("defaults the purpose to \"General-purpose agent\"", async () => {
    const decide = decideOf<Registration>(await dependencyCall(register()));
    expect(decide(undefined, [], NOW).write!.purpose).toBe("General-purpose agent");
  });
});

describe("runtime heartbeat checks (§2.4, before the store)", () => {
  const report = (runtimeId: string) => presence().reportRuntime({ project: "proj", runtimeId });
  const suffix = (n: number) => "A".padEnd(n, "b");
  it.each(titled([
    { name: "the reference's example", id: "rtm_74573b9df67705d8f6596518", ok: true },
    { name: "the shortest form (2 + 6 characters)", id: `rt_${suffix(6)}`, ok: true },
    { name: "the longest form within 144 characters", id: `r${"t".repeat(14)}_${suffix(128)}`, ok: true },
    { name: "a pattern match of 145 characters", id: `r${"t".repeat(15)}_${suffix(128)}`, ok: false },
    { name: "a one-character prefix", id: `r_${suffix(6)}`, ok: false },
    { name: "a 17-character prefix", id: `r${"t".repeat(16)}_${suffix(6)}`, ok: false },
    { name: "a 5-character suffix", id: `rt_${suffix(5)}`, ok: false },
    { name: "a suffix starting with _", id: `rt__${suffix(6)}`, ok: false },
    { name: "an upper-case prefix", id: `Rt_${suffix(6)}`, ok: false },
    { name: "a prefix starting with a digit", id: `1t_${suffix(6)}`, ok: false },
    { name: "no underscore", id: `rt${suffix(8)}`, ok: false },
    { name: "an empty id", id: "", ok: false },
  ], (c) => `${c.name}: accepted ${c.ok}`))("%s", async (_title, { id, ok }) => {
    if (ok) expect(await passesChecks(report(id))).toBe(true);
    else expect((await refusalOf(report(id))).code).toBe("invalid_runtime_id");
  });

  it("trims the runtime id before checking it", async () => {
    expect(await passesChecks(report("  rtm_74573b9df67705d8f6596518 "))).toBe(true);
  });
});

describe("agent calls on an unknown agent", () => {
  it("refuses a heartbeat of an agent the store does not hold with invalid_agent_identity", async () => {
    const caller: AgentCaller = { kind: "agent", agentId: "agt_gone", agentName: "gone", project: "proj" };
    const decide = decideOf<(cur: AgentRow | undefined, nowMs: number) => unknown>(await dependencyCall(presence().heartbeat(caller)));
    expect(refusal(() => decide(undefined, NOW)).code).toBe("invalid_agent_identity");
  });
});
