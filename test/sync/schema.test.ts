import { describe, expect, it } from "vitest";
import { checkSyncEvent, runEventTypes } from "../../src/sync/schema.js";
import { actor, effect, evidenceRef, leaseRef, richPayload, sha, syncEvent, typed } from "./fixtures.js";

/** The event with `payload` merged over the base payload. */
const withPayload = (over: Record<string, unknown>) =>
  syncEvent({ payload: { ...(syncEvent().payload as object), ...over } });
const withRedaction = (over: Record<string, unknown>) =>
  syncEvent({ redaction: { version: "v1", fieldsOmitted: [], valuesReplaced: 0, ...over } });
const without = (key: string) => {
  const e = syncEvent();
  delete e[key];
  return e;
};
/**
 * Expects a violation whose message starts with `path`, the dotted path of the offence (shape
 * rules prefix it with `event.`, the conditional rules do not; both are accepted).
 */
const refused = (e: unknown, path: string, why?: RegExp) => {
  const v = checkSyncEvent(e);
  expect(v, JSON.stringify(e).slice(0, 300)).toBeDefined();
  expect(v!.replace(/^event\./, "").startsWith(`${path.replace(/^event\./, "")}:`), v).toBe(true);
  if (why) expect(v).toMatch(why);
};
const ok = (e: unknown) => expect(checkSyncEvent(e)).toBeUndefined();

const topLevel = [
  "schema", "sourceEventId", "projectId", "runId", "homeRuntimeId", "memoryRevision", "eventType", "sequence",
  "occurredAt", "configRevision", "executorPolicyRevision", "toolPolicyRevision", "syncPolicyRevision", "redaction", "payload",
];

describe("required top-level fields and the schema constant", () => {
  it("accepts the base event and the rich payload", () => {
    ok(syncEvent());
    ok(typed("effect.settled", richPayload()));
  });
  it.each(topLevel)("requires %s", (key) => refused(without(key), `event.${key}`, /is required/));
  it("holds exactly the 15 reference fields", () => expect(Object.keys(syncEvent()).sort()).toEqual([...topLevel].sort()));
  it.each(["kxm.sync-event.v2", "KXM.SYNC-EVENT.V1", "", 1, null])("refuses schema %j", (schema) =>
    refused(syncEvent({ schema }), "event.schema"),
  );
  it.each([null, [], "x", 1])("refuses a non-object event %j", (e) => refused(e, "event", /must be an object/));
});

describe("no extra properties", () => {
  it("refuses an unknown top-level key", () => refused(syncEvent({ extra: 1 }), "event.extra", /not allowed/));
  it("refuses a null-valued unknown key (what a face sends for an unrepresentable property)", () =>
    refused(syncEvent({ "#99": null }), "event.#99", /not allowed/));
  it.each([
    ["payload", { nope: true }, "event.payload.nope"],
    ["payload.executor", { executor: { ...(richPayload().executor as object), extra: 1 } }, "event.payload.executor.extra"],
    ["payload.effect.policy", { effect: effect("unknown", { extra: 1 }) }, "event.payload.effect.policy.extra"],
    ["payload.lease", { lease: leaseRef({ extra: 1 }) }, "event.payload.lease.extra"],
    ["payload.evidenceRefs[0]", { evidenceRefs: [evidenceRef({ extra: 1 })] }, "event.payload.evidenceRefs[0].extra"],
  ])("refuses an unknown key in %s", (_, payload, path) => refused(withPayload(payload), path, /not allowed/));
  it("refuses an unknown key in redaction", () => refused(withRedaction({ extra: 1 }), "event.redaction.extra"));
  it.each(["toString", "constructor", "valueOf", "hasOwnProperty"])("refuses %s, a name every object inherits, as any unknown key", (name) => {
    refused({ ...syncEvent(), [name]: null }, `event.${name}`, /not allowed/);
    refused(withPayload({ [name]: 1 }), `event.payload.${name}`, /not allowed/);
  });
  it("refuses a key named __proto__ held as a property, not taken as a prototype", () => {
    refused(JSON.parse(`{"__proto__":null,${JSON.stringify(syncEvent()).slice(1)}`), "event.__proto__", /not allowed/);
  });
});

describe("primitive patterns", () => {
  /** A 16-char prefix, `_`, and a tail: pattern-valid up to 145 chars; the schema stops at 144. */
  const opaque = (n: number) => `p${"0".repeat(15)}_${"a".repeat(n - 17)}`;
  it.each(["prj_abcdef", "a1_Z-_____", opaque(144), "p0123456789abcde_xxxxxx"])("accepts opaqueId %s", (projectId) =>
    ok(syncEvent({ projectId })),
  );
  it.each([
    ["too long", opaque(145)],
    ["short tail", "prj_abcde"],
    ["one-letter prefix", "p_abcdef"],
    ["prefix over 16", "p0123456789abcdef_xxxxxx"],
    ["uppercase prefix", "Prj_abcdef"],
    ["tail starts with -", "prj_-abcdef"],
    ["no underscore", "prjabcdefgh"],
    ["a number", 12345678],
  ])("refuses opaqueId (%s)", (_, v) => {
    refused(syncEvent({ runId: v }), "event.runId");
    refused(syncEvent({ sourceEventId: v }), "event.sourceEventId");
  });
  it.each(["a", "wf-build", "a1_b2-c3", "x".repeat(64)])("accepts identifier %s", (workflowId) => ok(withPayload({ workflowId })));
  it.each(["", "A", "1a", "a-", "a--b", "a_-b", "a.b", "x".repeat(65)])("refuses identifier %j", (workflowId) =>
    refused(withPayload({ workflowId }), "event.payload.workflowId"),
  );
  it.each([sha("0"), `sha256:${"0123456789abcdef".repeat(4)}`])("accepts sha256 %s", (configRevision) => ok(syncEvent({ configRevision })));
  it.each([sha("A"), `sha256:${"a".repeat(63)}`, `sha256:${"a".repeat(65)}`, "a".repeat(64), `SHA256:${"a".repeat(64)}`])(
    "refuses sha256 %s",
    (toolPolicyRevision) => refused(syncEvent({ toolPolicyRevision }), "event.toolPolicyRevision"),
  );
  it.each(["2026-01-01T12:00:00Z", "2026-01-01T12:00:00.1Z", "2026-01-01T12:00:00.123456789Z"])("accepts timestamp %s", (occurredAt) =>
    ok(syncEvent({ occurredAt })),
  );
  it.each([
    "2026-01-01T12:00:00.1234567890Z",
    "2026-01-01T12:00:00.Z",
    "2026-01-01T12:00:00+00:00",
    "2026-01-01 12:00:00Z",
    "2026-01-01T12:00:00z",
    "2026-01-01",
  ])("refuses timestamp %s", (occurredAt) => refused(syncEvent({ occurredAt }), "event.occurredAt"));
});

describe("eventType", () => {
  it("knows the 38 reference types", () => expect(new Set(runEventTypes).size).toBe(38));
  it.each(["run.created", "step.entered", "routing.attempt.recorded", "model.resolved"])("accepts %s", (eventType) =>
    ok(syncEvent({ eventType })),
  );
  it.each(["run.deleted", "RUN.CREATED", "run", "", 5])("refuses %j", (eventType) => refused(syncEvent({ eventType }), "event.eventType"));
});

describe("sequence", () => {
  it.each([1, 2 ** 40, Number.MAX_SAFE_INTEGER])("accepts %d", (sequence) => ok(syncEvent({ sequence })));
  it.each([0, -1, 1.5, "1", null])("refuses %j", (sequence) => refused(syncEvent({ sequence }), "event.sequence"));
});

describe("redaction", () => {
  const names = (n: number) => Array.from({ length: n }, (_, i) => `f${i}`);
  it("accepts up to 128 unique names of 1..128 chars and 0..100000 replacements", () => {
    ok(withRedaction({ fieldsOmitted: names(128), valuesReplaced: 100_000 }));
    ok(withRedaction({ fieldsOmitted: ["x".repeat(128)] }));
  });
  it.each([
    ["129 names", { fieldsOmitted: names(129) }, "event.redaction.fieldsOmitted"],
    ["duplicates", { fieldsOmitted: ["a", "a"] }, "event.redaction.fieldsOmitted"],
    ["an empty name", { fieldsOmitted: [""] }, "event.redaction.fieldsOmitted[0]"],
    ["a 129-char name", { fieldsOmitted: ["x".repeat(129)] }, "event.redaction.fieldsOmitted[0]"],
    ["not a list", { fieldsOmitted: "a" }, "event.redaction.fieldsOmitted"],
    ["valuesReplaced over 100000", { valuesReplaced: 100_001 }, "event.redaction.valuesReplaced"],
    ["valuesReplaced negative", { valuesReplaced: -1 }, "event.redaction.valuesReplaced"],
    ["a bad version", { version: "V1" }, "event.redaction.version"],
  ])("refuses %s", (_, over, path) => refused(withRedaction(over), path));
  it.each(["version", "fieldsOmitted", "valuesReplaced"])("requires %s", (key) => {
    const redaction: Record<string, unknown> = { version: "v1", fieldsOmitted: [], valuesReplaced: 0 };
    delete redaction[key];
    refused(syncEvent({ redaction }), `event.redaction.${key}`, /is required/);
  });
});

describe("payload", () => {
  it("needs at least one property", () => refused(syncEvent({ payload: {} }), "event.payload", /at least one/));
  it("accepts one property", () => ok(syncEvent({ payload: { degraded: true } })));
  it.each([null, [], "x"])("must be an object, not %j", (payload) => refused(syncEvent({ payload }), "event.payload"));
});

describe("payload sub-objects: required fields, enums, bounds", () => {
  const rich = richPayload();
  const sub = (key: string, over: Record<string, unknown>) => withPayload({ [key]: { ...(rich[key] as object), ...over } });
  const drop = (key: string, field: string) => {
    const value = { ...(rich[key] as Record<string, unknown>) };
    delete value[field];
    return withPayload({ [key]: value });
  };
  it.each([
    ["executor", ["id", "kind", "executorVersion", "harness", "harnessVersion"]],
    ["model", ["provider", "model"]],
    ["timing", ["durationMs"]],
    ["error", ["class", "component", "retryable"]],
    ["candidate", ["id", "type", "summary", "confidence", "status"]],
    ["lease", ["id", "fencingToken", "acquiredAt", "expiresAt"]],
    ["actor", ["kind", "id"]],
    ["effect", ["id", "policy"]],
  ] as const)("%s requires %j", (key, fields) => {
    ok(withPayload({ [key]: rich[key] }));
    for (const f of fields) refused(drop(key, f), `event.payload.${key}.${f}`, /is required/);
  });
  it.each([
    ["executor.kind", sub("executor", { kind: "docker" }), "event.payload.executor.kind"],
    ["executor.executorVersion length", sub("executor", { executorVersion: "x".repeat(129) }), "event.payload.executor.executorVersion"],
    ["usage.costKind", sub("usage", { costKind: "guessed" }), "event.payload.usage.costKind"],
    ["usage.currency", sub("usage", { currency: "usd" }), "event.payload.usage.currency"],
    ["usage.cost negative", sub("usage", { cost: -0.01 }), "event.payload.usage.cost"],
    ["usage tokens negative", sub("usage", { inputTokens: -1 }), "event.payload.usage.inputTokens"],
    ["timing over a year", sub("timing", { durationMs: 31_536_000_001 }), "event.payload.timing.durationMs"],
    ["model.tags not unique", sub("model", { tags: ["a", "a"] }), "event.payload.model.tags"],
    ["error.retryable not a bool", sub("error", { retryable: "yes" }), "event.payload.error.retryable"],
    ["candidate.confidence over 1", sub("candidate", { confidence: 1.01 }), "event.payload.candidate.confidence"],
    ["lease.fencingToken a number", sub("lease", { fencingToken: 42 }), "event.payload.lease.fencingToken"],
    ["lease.fencingToken empty", sub("lease", { fencingToken: "" }), "event.payload.lease.fencingToken"],
    ["lease.fencingToken over 256", sub("lease", { fencingToken: "9".repeat(257) }), "event.payload.lease.fencingToken"],
    ["actor.kind", sub("actor", { kind: "robot" }), "event.payload.actor.kind"],
    ["resolvedBy.id empty", sub("resolvedBy", { id: "" }), "event.payload.resolvedBy.id"],
    ["effect.policy.class", withPayload({ effect: effect("sometimes") }), "event.payload.effect.policy.class"],
  ])("refuses %s", (_, e, path) => refused(e, path));
  it("accepts the enum values and bounds of artifacts and environment entries", () => {
    for (const availability of ["local", "online-runtime", "hub", "external"])
      for (const classification of ["public", "project", "sensitive", "secret"])
        ok(withPayload({ artifacts: [{ id: "art_artifact0001", kind: "k", hash: sha("1"), size: 2 ** 40, availability, classification }] }));
    for (const status of ["resolved", "missing", "denied", "not-required"])
      for (const source of ["default", "host", "project", "repository", "secret-ref", "runtime"])
        ok(withPayload({ environment: [{ name: "_A1", scope: "s", status, source }] }));
  });
  const artifact = { id: "art_artifact0001", kind: "k", hash: sha("1"), size: 1, availability: "hub" };
  const env = { name: "HOME", scope: "s", status: "resolved", source: "host" };
  it.each([
    ["artifact size over 2^40", { artifacts: [{ ...artifact, size: 2 ** 40 + 1 }] }, "event.payload.artifacts[0].size"],
    ["artifact size negative", { artifacts: [{ ...artifact, size: -1 }] }, "event.payload.artifacts[0].size"],
    ["artifact availability", { artifacts: [{ ...artifact, availability: "cloud" }] }, "event.payload.artifacts[0].availability"],
    ["artifact classification", { artifacts: [{ ...artifact, classification: "internal" }] }, "event.payload.artifacts[0].classification"],
    ["artifact without hash", { artifacts: [{ ...artifact, hash: undefined }] }, "event.payload.artifacts[0].hash"],
    ["environment name", { environment: [{ ...env, name: "home" }] }, "event.payload.environment[0].name"],
    ["environment status", { environment: [{ ...env, status: "ok" }] }, "event.payload.environment[0].status"],
    ["environment source", { environment: [{ ...env, source: "vault" }] }, "event.payload.environment[0].source"],
    ["environment scope over 160", { environment: [{ ...env, scope: "s".repeat(161) }] }, "event.payload.environment[0].scope"],
    ["resolutionAction", { resolutionAction: "retry" }, "event.payload.resolutionAction"],
    ["status", { status: "done" }, "event.payload.status"],
    ["instanceNo 65", { instanceNo: 65 }, "event.payload.instanceNo"],
    ["stepAttempt 0", { stepAttempt: 0 }, "event.payload.stepAttempt"],
    ["displayTitle over 200", { displayTitle: "x".repeat(201) }, "event.payload.displayTitle"],
    ["displayTitle with a NUL", { displayTitle: "a\u0000b" }, "event.payload.displayTitle"],
    ["summary with a NUL", { summary: "\u0000" }, "event.payload.summary"],
    ["summary empty", { summary: "" }, "event.payload.summary"],
    ["degraded not a bool", { degraded: 1 }, "event.payload.degraded"],
  ])("refuses %s", (_, over, path) => {
    // JSON form: an undefined value is an absent key
    refused(JSON.parse(JSON.stringify(withPayload(over))), path);
  });
  it("bounds the counts map: 32 identifier keys with integers >= 0", () => {
    const counts = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`c${i}`, i]));
    ok(withPayload({ counts: counts(32) }));
    refused(withPayload({ counts: counts(33) }), "event.payload.counts");
    refused(withPayload({ counts: { Bad: 1 } }), "event.payload.counts.Bad", /identifier/);
    refused(withPayload({ counts: { a: -1 } }), "event.payload.counts.a");
    refused(withPayload({ counts: { a: 1.5 } }), "event.payload.counts.a");
    refused(withPayload({ counts: [] }), "event.payload.counts");
  });
  it.each([
    ["fileChanges", 64, () => ({ repositoryId: "r" })],
    ["evidenceRefs", 64, () => evidenceRef()],
    ["suppliedRefs", 64, () => evidenceRef()],
    ["artifacts", 64, () => artifact],
    ["receipts", 64, () => ({ provider: "p", kind: "k", id: "1" })],
    ["environment", 256, () => env],
  ] as [string, number, () => unknown][])("%s holds at most %d items", (key, max, item) => {
    ok(withPayload({ [key]: Array.from({ length: max }, item) }));
    refused(withPayload({ [key]: Array.from({ length: max + 1 }, item) }), `event.payload.${key}`, /at most/);
  });
  it("bounds fileChanges paths to 1000 per list", () => {
    const paths = (n: number) => Array.from({ length: n }, (_, i) => `src/f${i}.ts`);
    ok(withPayload({ fileChanges: [{ repositoryId: "r", added: paths(1000) }] }));
    refused(withPayload({ fileChanges: [{ repositoryId: "r", deleted: paths(1001) }] }), "event.payload.fileChanges[0].deleted");
  });
  it("bounds model.tags to 32", () => {
    const tags = (n: number) => Array.from({ length: n }, (_, i) => `t${i}`);
    ok(withPayload({ model: { provider: "p", model: "m", tags: tags(32) } }));
    refused(withPayload({ model: { provider: "p", model: "m", tags: tags(33) } }), "event.payload.model.tags");
  });
});

describe("conditional requirements", () => {
  const lease = leaseRef();
  it.each(runEventTypes.filter((t) => t.startsWith("effect.") && t !== "effect.uncertainty_resolved"))("%s needs effect", (t) => {
    refused(typed(t, { status: "settled" }), "event.payload.effect", /is required for/);
    ok(typed(t, { effect: effect("read-only") }));
  });
  it.each(["effect.intent_recorded", "effect.dispatched"])("%s of a shared-mutable effect needs lease", (t) => {
    const shared = effect("external-non-idempotent", { sharedMutable: true });
    refused(typed(t, { effect: shared }), "event.payload.lease", /is required for/);
    ok(typed(t, { effect: shared, lease }));
    ok(typed("effect.observed", { effect: shared })); // other effect types do not
  });
  it("effect.uncertainty_resolved needs effect, resolvedBy, resolutionAction, reason, suppliedRefs", () => {
    const full = { effect: effect("unknown"), resolvedBy: actor(), resolutionAction: "cancel", reason: "r", suppliedRefs: [evidenceRef()] };
    ok(typed("effect.uncertainty_resolved", full));
    for (const key of Object.keys(full)) {
      const p: Record<string, unknown> = { ...full };
      delete p[key];
      refused(typed("effect.uncertainty_resolved", p), `event.payload.${key}`, /is required for effect.uncertainty_resolved/);
    }
  });
  it.each(["lease.acquired", "lease.released", "lease.lost"])("%s needs lease", (t) => {
    refused(typed(t, { status: "active" }), "event.payload.lease", /is required for/);
    ok(typed(t, { lease }));
  });
  it("approval.recorded needs actor, outcome, suppliedRefs", () => {
    const full = { actor: actor(), outcome: "approved", suppliedRefs: [evidenceRef()] };
    ok(typed("approval.recorded", full));
    for (const key of Object.keys(full)) {
      const p: Record<string, unknown> = { ...full };
      delete p[key];
      refused(typed("approval.recorded", p), `event.payload.${key}`, /is required for approval.recorded/);
    }
  });
  const settled = (e: unknown) => typed("effect.settled", { effect: e });
  it("external-idempotent needs idempotencyKey and receiptQuery in the policy and idempotencyKeyHash", () => {
    ok(settled(effect("external-idempotent")));
    const full = effect("external-idempotent") as { policy: Record<string, unknown> } & Record<string, unknown>;
    for (const k of ["idempotencyKey", "receiptQuery"]) {
      const policy = { ...full.policy };
      delete policy[k];
      refused(settled({ ...full, policy }), `event.payload.effect.policy.${k}`, /external-idempotent/);
    }
    refused(settled({ id: full.id, policy: full.policy }), "event.payload.effect.idempotencyKeyHash", /external-idempotent/);
  });
  it("receipt-queryable needs receiptQuery", () => {
    ok(settled(effect("receipt-queryable")));
    refused(settled(effect("unknown", { class: "receipt-queryable" })), "event.payload.effect.policy.receiptQuery");
  });
  it.each(["read-only", "workspace-mutation"])("%s forces sharedMutable false", (cls) => {
    ok(settled(effect(cls)));
    refused(settled(effect(cls, { sharedMutable: true })), "event.payload.effect.policy.sharedMutable", /must be false/);
    ok(settled(effect(cls, { idempotencyKey: "run", receiptQuery: "q" })));
  });
  it.each(["external-non-idempotent", "unknown"])("%s forbids idempotencyKey and receiptQuery", (cls) => {
    ok(settled(effect(cls, { sharedMutable: true })));
    refused(settled(effect(cls, { idempotencyKey: "run" })), "event.payload.effect.policy.idempotencyKey", /not allowed/);
    refused(settled(effect(cls, { receiptQuery: "q" })), "event.payload.effect.policy.receiptQuery", /not allowed/);
    ok(settled(effect(cls, {}, { idempotencyKeyHash: sha("9") })));
  });
  it("an effect on a non-effect event still follows the policy rules", () =>
    refused(typed("run.status_changed", { effect: effect("read-only", { sharedMutable: true }) }), "event.payload.effect.policy.sharedMutable"));
});
