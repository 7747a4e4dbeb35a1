/** `sha256:` + 64 copies of one hex character. */
export const sha = (c: string) => `sha256:${c.repeat(64)}`;

/** A valid `kxm.sync-event.v1` event; `over` replaces top-level fields. */
export function syncEvent(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    schema: "kxm.sync-event.v1",
    sourceEventId: "evt_source0001",
    projectId: "prj_project0001",
    runId: "run_run0000001",
    homeRuntimeId: "rtm_runtime0001",
    memoryRevision: "mem_memory0001",
    eventType: "run.status_changed",
    sequence: 1,
    occurredAt: "2026-01-01T12:00:00.123Z",
    configRevision: sha("a"),
    executorPolicyRevision: sha("b"),
    toolPolicyRevision: sha("c"),
    syncPolicyRevision: sha("d"),
    redaction: { version: "v1", fieldsOmitted: [], valuesReplaced: 0 },
    payload: { status: "running", workflowId: "wf-build", displayTitle: "Build it" },
    ...over,
  };
}

/** A valid lease reference (payload.lease). */
export const leaseRef = (over: Record<string, unknown> = {}) => ({
  id: "lse_lease000001",
  fencingToken: "42",
  acquiredAt: "2026-01-01T11:59:00Z",
  expiresAt: "2026-01-01T12:04:00.123456789Z",
  ...over,
});

/** A valid evidence reference (evidenceRefs / suppliedRefs items). */
export const evidenceRef = (over: Record<string, unknown> = {}) => ({ id: "evd_evidence0001", kind: "test-report", ...over });

/** A valid actor (payload.actor, payload.resolvedBy). */
export const actor = (over: Record<string, unknown> = {}) => ({ kind: "human", id: "alice@example.com", ...over });

/** A valid effect whose policy follows `cls`'s conditional rules; `policy` and `effect` extend it. */
export function effect(cls: string, policy: Record<string, unknown> = {}, over: Record<string, unknown> = {}) {
  const base: Record<string, unknown> = { class: cls, sharedMutable: false };
  if (cls === "external-idempotent") Object.assign(base, { idempotencyKey: "step", receiptQuery: "GET /receipts?key=x" });
  if (cls === "receipt-queryable") base.receiptQuery = "GET /receipts?key=x";
  return {
    id: "eff_effect000001",
    policy: { ...base, ...policy },
    ...(cls === "external-idempotent" && { idempotencyKeyHash: sha("e") }),
    ...over,
  };
}

/** A valid event of `eventType` with `payload` (every other field from syncEvent). */
export const typed = (eventType: string, payload: Record<string, unknown>, over: Record<string, unknown> = {}) =>
  syncEvent({ eventType, payload, ...over });

/**
 * A payload that touches most of the schema: nested messages, repeated references, the counts
 * map, int64 values (an artifact of 2^40 bytes), doubles (cost 0.25, confidence 0.5) and the
 * `class` json names of error and effect policy. Valid for `effect.settled`.
 */
export function richPayload(): Record<string, unknown> {
  return {
    workflowId: "wf-release",
    displayTitle: "Release 1.2 ✓ — «ünïcode»",
    promptHash: sha("f"),
    status: "settled",
    previousStatus: "observed",
    outcome: "ok",
    summary: "published the package",
    stepId: "publish",
    fromStepId: "build",
    toStepId: "publish",
    agentId: "release-bot",
    stepAttempt: 2,
    assignmentId: "asg_assignment01",
    attemptId: "att_attempt00001",
    instanceNo: 3,
    scopeEpoch: 7,
    executor: { id: "local-1", kind: "ssh", executorVersion: "1.2.3", harness: "codex", harnessVersion: "0.9", helperGeneration: "g2" },
    model: { provider: "openai", model: "gpt-5", profile: "deep", tags: ["fast", "cheap"], thinking: "high" },
    timing: { durationMs: 31_536_000_000, startedAt: "2026-01-01T11:00:00Z", finishedAt: "2026-01-01T11:59:59.999999999Z", queueMs: 0, agentMs: 1234 },
    usage: { inputTokens: 1000, outputTokens: 250, cacheReadTokens: 0, cacheWriteTokens: 5, cost: 0.25, currency: "USD", costKind: "reported" },
    fileChanges: [{ repositoryId: "main-repo", added: ["src/a.ts"], modified: ["README.md", "docs/x.md"], deleted: [], redactedPathCount: 1 }],
    evidenceRefs: [evidenceRef(), evidenceRef({ id: "evd_evidence0002", hash: sha("1"), status: "passed", producerId: "ci" })],
    suppliedRefs: [evidenceRef({ id: "evd_supplied0001", kind: "approval" })],
    artifacts: [
      { id: "art_artifact0001", kind: "tarball", hash: sha("2"), size: 2 ** 40, availability: "online-runtime", classification: "project" },
      { id: "art_artifact0002", kind: "log", hash: sha("3"), size: 0, availability: "hub" },
    ],
    receipts: [{ provider: "npm", kind: "publish", id: "pkg@1.2.0", hash: sha("4"), observedAt: "2026-01-01T12:00:00Z" }],
    environment: [{ name: "NPM_TOKEN", scope: "publish", status: "resolved", source: "secret-ref", version: "3" }],
    error: { class: "network-timeout", component: "npm client", retryable: true },
    effect: effect("external-idempotent"),
    lease: leaseRef({ operation: "publish" }),
    actor: actor(),
    resolvedBy: actor({ kind: "runtime", id: "rtm_runtime0001" }),
    resolutionAction: "mark-completed",
    reason: "receipt found",
    candidate: { id: "cnd_candidate001", type: "patch", summary: "the fix", confidence: 0.5, status: "created" },
    counts: { retries: 2, "files-changed": 3, zero: 0 },
    degraded: false,
  };
}
