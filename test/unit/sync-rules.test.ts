import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { createSync, decideIngest, maxSyncBatch, syncChanges, type SyncDeps } from "../../src/sync/sync.js";
import { syncEvent } from "../sync/fixtures.js";
import { NOW, fixedClock, named, passesChecks, quietObserver, refusalOf, titled, untouchable } from "./support.js";

/**
 * Where one pushed run fact stands against what is stored (decideIngest), and the checks a push
 * passes before the store is reached, with a fixed clock and a store that is never used: no hub.
 * Expected answers are reference-hub.md §5.1.
 */

type SyncEventRow = Parameters<typeof decideIngest>[0];
type IngestContext = Parameters<typeof decideIngest>[1];

const HASH = `sha256:${"a".repeat(64)}`;
const OTHER_HASH = `sha256:${"b".repeat(64)}`;
const event = (over: Partial<SyncEventRow> = {}): SyncEventRow => ({
  projectId: "prj_project0001",
  runId: "run_run0000001",
  sequence: 3,
  hubProject: "org/repo",
  homeRuntimeId: "rtm_runtime0001",
  eventType: "run.status_changed",
  contentHash: HASH,
  receivedAtMs: NOW,
  occurredAt: "2026-01-01T12:00:00.000Z",
  record: "{}",
  ...over,
});

describe("decideIngest (§5.1 step 5)", () => {
  type Case = { name: string; ctx: IngestContext; outcome: ReturnType<typeof decideIngest> };
  const cases: Case[] = [
    { name: "accepts a new key with nothing stored about its project or run", ctx: {}, outcome: { outcome: "accepted" } },
    { name: "accepts a new key of a projectId its hub project owns, on the run's home", ctx: { owner: "org/repo", home: "rtm_runtime0001" }, outcome: { outcome: "accepted" } },
    { name: "answers the same content by the same hub project as a duplicate", ctx: { existing: { contentHash: HASH, hubProject: "org/repo" } }, outcome: { outcome: "duplicate" } },
    { name: "refuses other content under a stored key: sequence_reused, with the stored hash", ctx: { existing: { contentHash: OTHER_HASH, hubProject: "org/repo" } }, outcome: { outcome: "conflict", reason: "sequence_reused", existingHash: OTHER_HASH } },
    { name: "refuses the same content pushed by another hub project: sequence_reused, without the other project's hash", ctx: { existing: { contentHash: HASH, hubProject: "org/other" } }, outcome: { outcome: "conflict", reason: "sequence_reused" } },
    { name: "refuses other content under another hub project's key: sequence_reused, without its hash", ctx: { existing: { contentHash: OTHER_HASH, hubProject: "org/other" } }, outcome: { outcome: "conflict", reason: "sequence_reused" } },
    { name: "checks the stored key before the owner and the home", ctx: { existing: { contentHash: HASH, hubProject: "org/repo" }, owner: "org/other", home: "rtm_other000001" }, outcome: { outcome: "duplicate" } },
    { name: "refuses a projectId another hub project owns: project_mismatch", ctx: { owner: "org/other" }, outcome: { outcome: "conflict", reason: "project_mismatch" } },
    { name: "checks the owner before the home", ctx: { owner: "org/other", home: "rtm_other000001" }, outcome: { outcome: "conflict", reason: "project_mismatch" } },
    { name: "refuses a run whose home is another runtime: home_runtime_mismatch", ctx: { owner: "org/repo", home: "rtm_other000001" }, outcome: { outcome: "conflict", reason: "home_runtime_mismatch" } },
  ];
  it.each(named(cases))("%s", (_title, { ctx, outcome }) => {
    expect(decideIngest(event(), ctx)).toEqual(outcome);
  });

  const maybe = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined });
  const project = fc.constantFrom("org/repo", "org/other");
  const runtime = fc.constantFrom("rtm_runtime0001", "rtm_other000001");
  const hash = fc.constantFrom(HASH, OTHER_HASH);
  test.prop([maybe(fc.record({ contentHash: hash, hubProject: project })), maybe(project), maybe(runtime), hash, project, runtime], { numRuns: 300 })(
    "accepts only what nothing stored contradicts; a stored key is never accepted again",
    (existing, owner, home, contentHash, hubProject, homeRuntimeId) => {
      const ctx: IngestContext = { ...(existing && { existing }), ...(owner !== undefined && { owner }), ...(home !== undefined && { home }) };
      const o = decideIngest(event({ contentHash, hubProject, homeRuntimeId }), ctx);
      if (existing) expect(o.outcome).toBe(existing.contentHash === contentHash && existing.hubProject === hubProject ? "duplicate" : "conflict");
      else expect(o.outcome === "accepted").toBe((owner === undefined || owner === hubProject) && (home === undefined || home === homeRuntimeId));
    },
  );
});

describe("sync changes", () => {
  it("records a run as its prefix now describes it for run watchers", () => {
    const run = { projectId: "prj_project0001", runId: "run_run0000001", homeRuntimeId: "rtm_runtime0001", cursor: 2, stored: 3, status: "running" };
    expect(syncChanges.run(run)).toEqual({ stream: "runs", body: { kind: "run", run } });
  });

  it.each(["sequence_reused", "project_mismatch", "home_runtime_mismatch"] as const)("records a %s conflict as a sync_ alert for run watchers", (reason) => {
    expect(syncChanges.conflict(event(), { outcome: "conflict", reason })).toEqual({
      stream: "runs",
      body: { kind: "alert", code: `sync_${reason}`, runtimeId: "rtm_runtime0001", projectId: "prj_project0001", runId: "run_run0000001", sequence: 3 },
    });
  });
});

describe("push checks (§5.1, before the store)", () => {
  const sync = () => createSync({ store: untouchable<SyncDeps["store"]>("store"), clock: fixedClock(), observer: quietObserver });
  const events = (n: number) => Array.from({ length: n }, (_, i) => syncEvent({ sequence: i + 1 }));

  it("holds at most 100 events per push", () => {
    expect(maxSyncBatch).toBe(100);
  });

  it.each(titled([
    { name: "an invalid runtime id", runtimeId: "runtime-1", events: events(1), code: "invalid_runtime_id" },
    { name: "an invalid runtime id before a missing list", runtimeId: "runtime-1", events: undefined, code: "invalid_runtime_id" },
    { name: "a missing event list", runtimeId: "rtm_runtime0001", events: undefined, code: "invalid_sync_batch" },
    { name: "101 events", runtimeId: "rtm_runtime0001", events: events(101), code: "sync_batch_too_large" },
  ], (c) => `refuses ${c.name} with ${c.code}`))("%s", async (_title, { runtimeId, events: list, code }) => {
    const e = await refusalOf(sync().push("org/repo", { runtimeId, events: list }));
    expect(e.code).toBe(code);
    if (code === "sync_batch_too_large") expect(e.metadata).toEqual({ maxEvents: "100" });
  });

  it("refuses a project name no face would accept before anything else", async () => {
    expect((await refusalOf(sync().push(" org/repo", { runtimeId: "bad", events: undefined }))).code).toBe("protocol_error");
  });

  it.each(titled([
    { name: "exactly 100 events", list: events(100) },
    { name: "one event", list: events(1) },
  ], (c) => `takes ${c.name} to the store`))("%s", async (_title, { list }) => {
    expect(await passesChecks(sync().push("org/repo", { runtimeId: "rtm_runtime0001", events: list }))).toBe(true);
  });
});
