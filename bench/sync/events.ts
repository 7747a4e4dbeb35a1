/**
 * Deterministic, valid `kxm.sync-event.v1` events for the sync benchmark: `runs` runs of
 * consecutive sequences, one pushing runtime, a rotating mix of event types whose payloads range
 * from a few fields to nested file changes, references, usage and effects.
 *
 * No list or map is ever empty except `redaction.fieldsOmitted`: the hub's JSON form of a
 * protobuf event drops empty lists (sync-convert.ts), so an empty list here would hash
 * differently on the two paths.
 */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export const runtimeId = "rtm_benchruntime01";

/** 64 hex characters that differ with `n` (not a real digest; the schema only checks the form). */
const hex64 = (n: number) => ((Math.imul(n + 1, 2654435761) >>> 0).toString(16).padStart(8, "0")).repeat(8);
const sha = (n: number) => `sha256:${hex64(n)}`;
const pad = (n: number, w: number) => String(n).padStart(w, "0");

const steps = ["plan", "implement", "test", "review", "publish"];
const agents = ["planner", "builder", "tester", "reviewer"];
const base = Date.UTC(2026, 0, 1, 8, 0, 0);
const iso = (ms: number) => new Date(ms).toISOString();

/** Event types after the first (run.created), in rotation. */
const rotation = [
  "step.entered",
  "assignment.created",
  "attempt.status_changed",
  "model.resolved",
  "step.outcome_recorded",
  "assignment.result_recorded",
  "effect.intent_recorded",
  "lease.acquired",
  "effect.receipt_recorded",
  "step.transitioned",
  "approval.recorded",
  "run.status_changed",
];

function payloadFor(type: string, run: number, seq: number, at: number): JsonObject {
  const step = steps[seq % steps.length]!;
  const agentId = agents[seq % agents.length]!;
  const tag = `r${pad(run, 4)}-s${pad(seq, 6)}`;
  const model = { provider: "openai", model: "gpt-5-codex", profile: "deep", tags: ["fast", "tools"], thinking: "high" };
  switch (type) {
    case "run.created":
      return {
        workflowId: "wf-release",
        displayTitle: `Release train ${run}: bump deps, fix flaky tests, publish`,
        promptHash: sha(run),
        status: "created",
      };
    case "run.status_changed":
      return { status: "running", previousStatus: "waiting", workflowId: "wf-release", counts: { steps: seq % 7, retries: seq % 3 } };
    case "step.entered":
      return { stepId: step, agentId, stepAttempt: 1 + (seq % 3), instanceNo: 1, scopeEpoch: 1 + (seq >> 4) };
    case "assignment.created":
      return { assignmentId: `asg_${tag}`, stepId: step, agentId, status: "created", instanceNo: 1 };
    case "attempt.status_changed":
      return {
        attemptId: `att_${tag}`,
        assignmentId: `asg_${tag}`,
        status: "running",
        previousStatus: "starting",
        executor: { id: "local-1", kind: "local", executorVersion: "1.4.2", harness: "codex", harnessVersion: "0.31.0" },
        model,
      };
    case "model.resolved":
      return { stepId: step, agentId, model };
    case "step.outcome_recorded":
      return {
        stepId: step,
        outcome: "passed",
        status: "passed",
        summary: `Step ${step} of run ${run} finished after ${3 + (seq % 11)} tool calls; all checks green (event ${seq}).`,
        timing: { durationMs: 1_000 + seq * 7, startedAt: iso(at - 60_000), finishedAt: iso(at), queueMs: seq % 500, agentMs: 900 + seq },
        usage: {
          inputTokens: 12_000 + seq,
          outputTokens: 800 + (seq % 900),
          cacheReadTokens: 4_096,
          cacheWriteTokens: 128,
          cost: Math.round((0.01 + (seq % 97) / 1_000) * 10_000) / 10_000,
          currency: "USD",
          costKind: "reported",
        },
      };
    case "assignment.result_recorded":
      return {
        assignmentId: `asg_${tag}`,
        stepId: step,
        status: "result_recorded",
        fileChanges: [
          { repositoryId: "main-repo", added: [`src/gen/part-${seq}.ts`], modified: ["src/index.ts", "package.json", "README.md"], redactedPathCount: 0 },
        ],
        evidenceRefs: [{ id: `evd_${tag}`, kind: "test-report", hash: sha(seq), status: "passed", producerId: "ci" }],
        artifacts: [{ id: `art_${tag}`, kind: "log", hash: sha(seq + 1), size: 10_000 + seq, availability: "hub", classification: "project" }],
      };
    case "effect.intent_recorded":
      return {
        stepId: step,
        effect: {
          id: `eff_${tag}`,
          policy: { class: "external-idempotent", sharedMutable: false, idempotencyKey: "step", receiptQuery: `GET /v1/receipts?key=${tag}` },
          idempotencyKeyHash: sha(seq + 2),
        },
      };
    case "lease.acquired":
      return {
        lease: { id: `lse_${tag}`, fencingToken: String(seq), acquiredAt: iso(at), expiresAt: iso(at + 300_000), operation: "publish" },
      };
    case "effect.receipt_recorded":
      return {
        effect: { id: `eff_${tag}`, policy: { class: "receipt-queryable", sharedMutable: false, receiptQuery: `GET /v1/receipts?key=${tag}` } },
        receipts: [{ provider: "github", kind: "pull-request", id: `pr-${run}-${seq}`, hash: sha(seq + 3), observedAt: iso(at) }],
      };
    case "step.transitioned":
      return { fromStepId: step, toStepId: steps[(seq + 1) % steps.length]!, stepId: step };
    case "approval.recorded":
      return {
        actor: { kind: "human", id: "alice@example.com" },
        outcome: "approved",
        suppliedRefs: [{ id: `evd_appr-${tag}`, kind: "approval" }],
        reason: "Looks good; ship it.",
      };
    default:
      throw new Error(`no payload for ${type}`);
  }
}

/** Event `seq` (from 1) of run `run`. */
export function makeEvent(run: number, seq: number): JsonObject {
  const type = seq === 1 ? "run.created" : rotation[(seq - 2) % rotation.length]!;
  const at = base + run * 3_600_000 + seq * 1_234;
  const redacted = seq % 5 === 0;
  return {
    schema: "kxm.sync-event.v1",
    sourceEventId: `evt_r${pad(run, 4)}-s${pad(seq, 6)}`,
    projectId: projectIdOf(run),
    runId: runIdOf(run),
    homeRuntimeId: runtimeId,
    memoryRevision: `mem_rev-${pad(run, 4)}-${pad(seq >> 6, 4)}`,
    eventType: type,
    sequence: seq,
    occurredAt: iso(at),
    configRevision: sha(run * 4),
    executorPolicyRevision: sha(run * 4 + 1),
    toolPolicyRevision: sha(run * 4 + 2),
    syncPolicyRevision: sha(run * 4 + 3),
    redaction: { version: "v1", fieldsOmitted: redacted ? ["payload.summary"] : [], valuesReplaced: redacted ? 1 : 0 },
    payload: payloadFor(type, run, seq, at),
  };
}

export const projectIdOf = (run: number) => `prj_bench-p${run % 4}`;
export const runIdOf = (run: number) => `run_bench-${pad(run, 4)}`;

export interface BatchPlan {
  count: number;
  batches: number;
  /** The events of batch `i`, built on demand (the same every time). */
  batch(i: number): JsonObject[];
  /** Events per run: what each run's cursor should reach. */
  perRun(): { projectId: string; runId: string; n: number }[];
}

/**
 * `count` events over `runs` runs (run numbers from `firstRun`), in batches of `batch`, built on
 * demand so that no scenario holds them all on its heap.
 * seq: event k is sequence k % perRun + 1 of run k / perRun (a batch holds consecutive sequences
 * of one run, as a runtime flushing one run pushes them). interleave: round-robin over the runs
 * (a batch holds one event of each of up to `batch` runs).
 */
export function planBatches(count: number, runs: number, batch: number, order: "seq" | "interleave", firstRun = 0): BatchPlan {
  const perRun = Math.ceil(count / runs);
  const at = (k: number) =>
    order === "seq" ? { run: firstRun + Math.floor(k / perRun), seq: (k % perRun) + 1 } : { run: firstRun + (k % runs), seq: Math.floor(k / runs) + 1 };
  return {
    count,
    batches: Math.ceil(count / batch),
    batch(i) {
      const out: JsonObject[] = [];
      for (let k = i * batch; k < Math.min(count, (i + 1) * batch); k++) {
        const { run, seq } = at(k);
        out.push(makeEvent(run, seq));
      }
      return out;
    },
    perRun() {
      const m = new Map<number, number>();
      for (let k = 0; k < count; k++) {
        const { run } = at(k);
        m.set(run, (m.get(run) ?? 0) + 1);
      }
      return [...m].map(([run, n]) => ({ projectId: projectIdOf(run), runId: runIdOf(run), n }));
    },
  };
}
