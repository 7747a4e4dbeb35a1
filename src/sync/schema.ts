/**
 * The `kxm.sync-event.v1` schema (reference-hub.md §5.3), as checks over the event's JSON form.
 * `checkSyncEvent` answers the first violation ("payload.lease: required for lease.acquired"),
 * or undefined for a valid event. Objects are closed: a property the schema does not name is a
 * violation. Pure; no I/O.
 */
import { hasNul, maxOpaqueIdChars, opaqueIdPattern } from "../validate.js";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };
/** A check of one value at `path`; throws Invalid. */
type Check = (value: Json, path: string) => void;

class Invalid extends Error {}
const fail = (path: string, why: string): never => {
  throw new Invalid(`${path}: ${why}`);
};
const isObj = (v: Json): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

const pattern =
  (re: RegExp, what: string, max = Infinity): Check =>
  (v, p) => {
    if (typeof v !== "string" || v.length > max || !re.test(v)) fail(p, `must be ${what}`);
  };
/**
 * A string of min..max characters, without NUL (U+0000): PostgreSQL's text cannot hold one (the
 * hub keeps a run's title and workflow as columns), and the hub refuses it in every string it
 * validates, on both stores alike (validate.ts).
 */
const text =
  (min: number, max: number): Check =>
  (v, p) => {
    if (typeof v !== "string" || v.length < min || v.length > max) fail(p, `must be a string of ${min}..${max} characters`);
    if (hasNul(v as string)) fail(p, "must not contain a NUL character (U+0000)");
  };
const oneOf =
  (...values: string[]): Check =>
  (v, p) => {
    if (typeof v !== "string" || !values.includes(v)) fail(p, `must be one of ${values.join(", ")}`);
  };
const int =
  (min: number, max = Number.MAX_SAFE_INTEGER): Check =>
  (v, p) => {
    if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) fail(p, `must be an integer in ${min}..${max}`);
  };
const num =
  (min: number, max = Infinity): Check =>
  (v, p) => {
    if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max) fail(p, `must be a number in ${min}..${max}`);
  };
const bool: Check = (v, p) => {
  if (typeof v !== "boolean") fail(p, "must be a boolean");
};
const constant =
  (c: string): Check =>
  (v, p) => {
    if (v !== c) fail(p, `must be ${c}`);
  };
const list =
  (item: Check, max: number, unique = false): Check =>
  (v, p) => {
    if (!Array.isArray(v) || v.length > max) return fail(p, `must be a list of at most ${max}`);
    v.forEach((x, i) => item(x, `${p}[${i}]`));
    if (unique && new Set(v.map((x) => JSON.stringify(x))).size !== v.length) fail(p, "must hold unique items");
  };
/** A closed object: `required` and `optional` name every allowed property. */
const object =
  (required: Record<string, Check>, optional: Record<string, Check> = {}, atLeastOne = false): Check =>
  (v, p) => {
    if (!isObj(v)) return fail(p, "must be an object");
    // Own properties only: `in` would also find what every object inherits (toString,
    // constructor), and let a property by such a name through as allowed.
    for (const key of Object.keys(v)) {
      if (!Object.hasOwn(required, key) && !Object.hasOwn(optional, key)) fail(`${p}.${key}`, "is not allowed");
    }
    for (const [key, check] of Object.entries(required)) {
      if (!Object.hasOwn(v, key)) fail(`${p}.${key}`, "is required");
      check(v[key]!, `${p}.${key}`);
    }
    for (const [key, check] of Object.entries(optional)) if (Object.hasOwn(v, key)) check(v[key]!, `${p}.${key}`);
    if (atLeastOne && Object.keys(v).length === 0) fail(p, "must have at least one property");
  };
const map =
  (keyRe: RegExp, keyMax: number, value: Check, max: number): Check =>
  (v, p) => {
    if (!isObj(v) || Object.keys(v).length > max) return fail(p, `must be an object of at most ${max} entries`);
    for (const [k, x] of Object.entries(v)) {
      if (k.length > keyMax || !keyRe.test(k)) fail(`${p}.${k}`, "is not an identifier");
      value(x, `${p}.${k}`);
    }
  };

const identifierRe = /^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$/;
/** An identifier's length at most (§5.3: 1..64). */
const identifierMax = 64;
const identifier: Check = (v, p) => {
  if (typeof v !== "string" || v.length > identifierMax || !identifierRe.test(v)) fail(p, "must be an identifier");
};
const opaqueId = pattern(opaqueIdPattern, "an opaque id", maxOpaqueIdChars);
const sha256 = pattern(/^sha256:[a-f0-9]{64}$/, "sha256:<64 hex>");
const timestamp = pattern(/^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?Z$/, "a UTC timestamp");
const ms = int(0, 31_536_000_000);
const relativePath = pattern(/^(?!\/)(?!.*(?:^|\/)\.\.(?:\/|$)).+$/, "a relative path", 1024);

export const runEventTypes = [
  "run.created", "run.status_changed", "run.cancel_requested", "run.drive_opened", "step.entered",
  "step.status_changed", "step.outcome_recorded", "step.transitioned", "assignment.created", "assignment.accepted",
  "assignment.dispatched", "assignment.executing", "assignment.reattaching", "assignment.retry_pending",
  "assignment.result_recorded", "assignment.terminal", "attempt.created", "attempt.status_changed",
  "attempt.connection_lost", "effect.intent_recorded", "effect.dispatched", "effect.observed",
  "effect.receipt_recorded", "effect.settled", "effect.blocked_uncertain", "effect.uncertainty_resolved",
  "workspace.snapshot_pinned", "workspace.materialized", "model.resolved", "session.scope_rotated",
  "approval.recorded", "lease.acquired", "lease.released", "lease.lost", "delivery.status_changed",
  "candidate.created", "routing.attempt.recorded", "routing.route_switched",
];

const lifecycleStatus = oneOf(
  "queued", "offered", "accepted", "declined", "expired", "created", "preparing", "pending", "running", "waiting",
  "blocked_uncertain", "cancelling", "cancelled", "completed", "failed", "skipped", "passed", "dispatched",
  "executing", "reattaching", "retry_pending", "result_recorded", "terminal", "starting", "settling",
  "connection_lost", "intent_recorded", "observed", "receipt_recorded", "settled", "planned", "delivering",
  "partial", "delivered", "outbox_pending", "acknowledged", "rejected", "omitted", "active", "idle", "closed",
);

const ref = object({ id: opaqueId, kind: identifier }, { hash: sha256, status: lifecycleStatus, producerId: identifier });
const actor = object({ kind: oneOf("human", "runtime", "hub", "agent", "adapter"), id: text(1, 200) });
const policyClasses = [
  "read-only", "workspace-mutation", "external-idempotent", "receipt-queryable", "external-non-idempotent", "unknown",
];

const payload = object(
  {},
  {
    workflowId: identifier,
    displayTitle: text(1, 200),
    promptHash: sha256,
    status: lifecycleStatus,
    previousStatus: lifecycleStatus,
    outcome: identifier,
    summary: text(1, 1000),
    stepId: identifier,
    fromStepId: identifier,
    toStepId: identifier,
    agentId: identifier,
    stepAttempt: int(1),
    assignmentId: opaqueId,
    attemptId: opaqueId,
    instanceNo: int(1, 64),
    scopeEpoch: int(1),
    executor: object(
      { id: identifier, kind: oneOf("local", "ssh"), executorVersion: text(1, 128), harness: identifier, harnessVersion: text(1, 128) },
      { helperGeneration: text(1, 256) },
    ),
    model: object(
      { provider: identifier, model: text(1, 200) },
      { profile: identifier, tags: list(identifier, 32, true), thinking: text(1, 64) },
    ),
    timing: object({ durationMs: ms }, { startedAt: timestamp, finishedAt: timestamp, queueMs: ms, agentMs: ms }),
    usage: object(
      {},
      {
        inputTokens: int(0),
        outputTokens: int(0),
        cacheReadTokens: int(0),
        cacheWriteTokens: int(0),
        cost: num(0),
        currency: pattern(/^[A-Z]{3}$/, "a currency code"),
        costKind: oneOf("reported", "estimated", "unknown"),
      },
    ),
    fileChanges: list(
      object(
        { repositoryId: identifier },
        {
          added: list(relativePath, 1000),
          modified: list(relativePath, 1000),
          deleted: list(relativePath, 1000),
          redactedPathCount: int(0),
        },
      ),
      64,
    ),
    evidenceRefs: list(ref, 64),
    suppliedRefs: list(ref, 64),
    artifacts: list(
      object(
        {
          id: opaqueId,
          kind: identifier,
          hash: sha256,
          size: int(0, 2 ** 40),
          availability: oneOf("local", "online-runtime", "hub", "external"),
        },
        { classification: oneOf("public", "project", "sensitive", "secret") },
      ),
      64,
    ),
    receipts: list(object({ provider: identifier, kind: identifier, id: text(1, 512) }, { hash: sha256, observedAt: timestamp }), 64),
    environment: list(
      object(
        {
          name: pattern(/^[A-Z_][A-Z0-9_]*$/, "an environment variable name"),
          scope: text(1, 160),
          status: oneOf("resolved", "missing", "denied", "not-required"),
          source: oneOf("default", "host", "project", "repository", "secret-ref", "runtime"),
        },
        { version: text(1, 128) },
      ),
      256,
    ),
    error: object({ class: identifier, component: text(1, 128), retryable: bool }),
    effect: object(
      {
        id: opaqueId,
        policy: object(
          { class: oneOf(...policyClasses), sharedMutable: bool },
          { idempotencyKey: oneOf("run", "step", "assignment", "attempt", "explicit"), receiptQuery: text(1, 512) },
        ),
      },
      { idempotencyKeyHash: sha256 },
    ),
    lease: object({ id: opaqueId, fencingToken: text(1, 256), acquiredAt: timestamp, expiresAt: timestamp }, { operation: identifier }),
    actor,
    resolvedBy: actor,
    resolutionAction: oneOf("mark-completed", "confirm-absent-and-retry", "compensate-and-retry", "mark-failed", "cancel"),
    reason: text(1, 1000),
    candidate: object({ id: opaqueId, type: identifier, summary: text(1, 1000), confidence: num(0, 1), status: lifecycleStatus }),
    counts: map(identifierRe, identifierMax, int(0), 32),
    degraded: bool,
  },
  true,
);

const event = object({
  schema: constant("kxm.sync-event.v1"),
  sourceEventId: opaqueId,
  projectId: opaqueId,
  runId: opaqueId,
  homeRuntimeId: opaqueId,
  memoryRevision: opaqueId,
  eventType: oneOf(...runEventTypes),
  sequence: int(1),
  occurredAt: timestamp,
  configRevision: sha256,
  executorPolicyRevision: sha256,
  toolPolicyRevision: sha256,
  syncPolicyRevision: sha256,
  redaction: object({ version: identifier, fieldsOmitted: list(text(1, 128), 128, true), valuesReplaced: int(0, 100_000) }),
  payload,
});

/** The rules that tie fields together (after the shape is known to be right). */
function conditional(e: Obj): void {
  const type = e.eventType as string;
  const p = e.payload as Obj;
  const need = (...keys: string[]) => {
    for (const k of keys) if (!(k in p)) fail(`payload.${k}`, `is required for ${type}`);
  };
  if (type.startsWith("effect.")) need("effect");
  if (type.startsWith("lease.")) need("lease");
  if (type === "approval.recorded") need("actor", "outcome", "suppliedRefs");
  if (type === "effect.uncertainty_resolved") need("effect", "resolvedBy", "resolutionAction", "reason", "suppliedRefs");
  const effect = p.effect as Obj | undefined;
  if (!effect) return;
  const policy = effect.policy as Obj;
  const cls = policy.class as string;
  if ((type === "effect.intent_recorded" || type === "effect.dispatched") && policy.sharedMutable === true) need("lease");
  if ((cls === "read-only" || cls === "workspace-mutation") && policy.sharedMutable !== false) {
    fail("payload.effect.policy.sharedMutable", `must be false for ${cls}`);
  }
  if (cls === "external-idempotent") {
    if (!("idempotencyKey" in policy)) fail("payload.effect.policy.idempotencyKey", "is required for external-idempotent");
    if (!("receiptQuery" in policy)) fail("payload.effect.policy.receiptQuery", "is required for external-idempotent");
    if (!("idempotencyKeyHash" in effect)) fail("payload.effect.idempotencyKeyHash", "is required for external-idempotent");
  }
  if (cls === "receipt-queryable" && !("receiptQuery" in policy)) {
    fail("payload.effect.policy.receiptQuery", "is required for receipt-queryable");
  }
  if (cls === "external-non-idempotent" || cls === "unknown") {
    for (const k of ["idempotencyKey", "receiptQuery"]) {
      if (k in policy) fail(`payload.effect.policy.${k}`, `is not allowed for ${cls}`);
    }
  }
}

/** The first violation of `kxm.sync-event.v1` in `value`, or undefined when it is valid. */
export function checkSyncEvent(value: unknown): string | undefined {
  try {
    event(value as Json, "event");
    conditional(value as Obj);
    return undefined;
  } catch (e) {
    if (e instanceof Invalid) return e.message;
    throw e;
  }
}
