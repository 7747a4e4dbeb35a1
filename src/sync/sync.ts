import type { Audit } from "../auth/audit.js";
import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
import type { Observer } from "../observe.js";
import type { IngestContext, IngestOutcome, SyncChanges, SyncEventRow, SyncStore } from "../store/sync-store.js";
import { idOf, isOpaqueId, maxOpaqueIdChars, opaqueIdPattern, projectName } from "../validate.js";
import { createPreparePool, type PreparePool } from "./prepare-pool.js";
import type { SyncRunView } from "../domain.js";

export { contentHash } from "./prepare.js";

export const maxSyncBatch = 100;

export type SyncCode =
  | "sync_event_invalid"
  | "sync_runtime_mismatch"
  | "sync_sequence_reused"
  | "sync_project_mismatch"
  | "sync_home_runtime_mismatch";

/** The result for one pushed event, in request order, with the identity it carried. */
export interface SyncResult {
  projectId?: string;
  runId?: string;
  sequence?: number;
  outcome: "accepted" | "duplicate" | "conflict" | "rejected";
  code?: SyncCode;
}

type JsonObject = { [key: string]: unknown };

/**
 * Where one event stands against what is stored: a repeat of the same content by the same hub
 * project is a duplicate; any other event under a stored key reuses the sequence; a projectId
 * belongs to the first hub project that pushed it; a run keeps its first home runtime.
 * A reuse names the stored hash only to the hub project that stored it: another project's
 * alert would otherwise carry what that project stored (and tell whether it pushed the same).
 */
export function decideIngest(e: SyncEventRow, ctx: IngestContext): IngestOutcome {
  if (ctx.existing) {
    const own = ctx.existing.hubProject === e.hubProject;
    if (own && ctx.existing.contentHash === e.contentHash) return { outcome: "duplicate" };
    return { outcome: "conflict", reason: "sequence_reused", ...(own && { existingHash: ctx.existing.contentHash }) };
  }
  if (ctx.owner !== undefined && ctx.owner !== e.hubProject) return { outcome: "conflict", reason: "project_mismatch" };
  if (ctx.home !== undefined && ctx.home !== e.homeRuntimeId) return { outcome: "conflict", reason: "home_runtime_mismatch" };
  return { outcome: "accepted" };
}

/** What watchers of a project's runs learn (WatchRuns): a run as its prefix now describes it, or a refused push. */
export type RunChangeBody =
  | { kind: "run"; run: SyncRunView }
  | { kind: "alert"; code: SyncCode; runtimeId: string; projectId: string; runId: string; sequence: number };

/** The changes a push records: each run it stored events of, each conflict (a security alert). */
export const syncChanges: SyncChanges = {
  run: (run) => ({ stream: "runs", body: { kind: "run", run } satisfies RunChangeBody }),
  conflict: (e, o) => ({
    stream: "runs",
    body: {
      kind: "alert",
      code: `sync_${o.reason}`,
      runtimeId: e.homeRuntimeId,
      projectId: e.projectId,
      runId: e.runId,
      sequence: e.sequence,
    } satisfies RunChangeBody,
  }),
};

/**
 * A run's projectId or runId as a read names it: trimmed, and refused (protocol_error) unless a
 * push could have stored it (the schema's opaque id, at most 144 characters).
 * @NOTE decision D68: an id no push can store names no run; it is not a run with nothing stored.
 */
function storableIdOf(label: string, value: string): string {
  const id = idOf(label, value.trim(), maxOpaqueIdChars);
  if (!opaqueIdPattern.test(id)) throw errors.protocol(`${label} must be an opaque id`, label);
  return id;
}

/**
 * The identity a result carries back (reference-hub.md §5.1 step 1): string ids cut to 144
 * characters, and `sequence` when it is an integer the JSON form holds exactly (a safe integer).
 * A wider int64 from a binary client reaches the JSON form rounded (2^63-1 as 2^63, 2^53+1 as
 * 2^53): echoed, it would name another sequence, or one no int64 holds, and the answer could not
 * be written after the batch was stored. The schema refuses such an event (sequence ≤ 2^53-1).
 */
function echo(event: unknown): Pick<SyncResult, "projectId" | "runId" | "sequence"> {
  const e = (typeof event === "object" && event !== null ? event : {}) as JsonObject;
  return {
    ...(typeof e.projectId === "string" && { projectId: e.projectId.slice(0, 144) }),
    ...(typeof e.runId === "string" && { runId: e.runId.slice(0, 144) }),
    ...(Number.isSafeInteger(e.sequence) && { sequence: e.sequence as number }),
  };
}

export interface SyncDeps {
  store: { sync: SyncStore };
  clock: Clock;
  observer: Observer;
  /** Where events are checked and hashed (prepare-pool.ts); default: on the calling thread. */
  prepare?: PreparePool;
  /** Where security alerts are kept besides the log (the audit trail). */
  audit?: Audit;
}

/** Run facts: validated and hashed first, then stored in one transaction per batch. */
export function createSync({ store, clock, observer, prepare = createPreparePool({ threads: 0 }), audit }: SyncDeps) {
  /** A security alert: in the log at once, and in the audit trail. */
  const alert = (project: string, fields: Record<string, unknown>) => {
    observer.log("security_alert", { ...fields, project });
    audit?.alert({ kind: "sync_conflict", project, detail: fields });
  };
  return {
    /**
     * Stores a batch for `project`, pushed by `runtimeId`. `events` are the events' JSON forms.
     * `events` undefined means the request's list was missing or not a list (REST).
     * Throws protocol_error (project), invalid_runtime_id, invalid_sync_batch, sync_batch_too_large,
     * in that order. The project rule already ran in authentication; it runs again here so a
     * caller that skips the faces cannot store facts under a name no face would accept.
     */
    async push(hubProject: string, input: { runtimeId: string; events: unknown[] | undefined }) {
      const project = projectName("project", hubProject);
      const runtimeId = input.runtimeId.trim();
      if (!isOpaqueId(runtimeId)) throw errors.invalidRuntimeId();
      if (!Array.isArray(input.events)) throw errors.invalidSyncBatch();
      if (input.events.length > maxSyncBatch) throw errors.syncBatchTooLarge(maxSyncBatch);
      const receivedAtMs = clock.now();
      const results: SyncResult[] = [];
      const rows: SyncEventRow[] = [];
      const slots: number[] = [];
      const prepared = await prepare.prepare(input.events);
      for (const [i, event] of input.events.entries()) {
        const identity = echo(event);
        const ready = prepared[i];
        if (!ready) {
          results.push({ ...identity, outcome: "rejected", code: "sync_event_invalid" });
          continue;
        }
        const e = event as JsonObject & { payload: JsonObject };
        if (e.homeRuntimeId !== runtimeId) {
          alert(project, {
            alert: "sync_runtime_mismatch",
            runtimeId,
            ...identity,
            homeRuntimeId: e.homeRuntimeId,
          });
          results.push({ ...identity, outcome: "rejected", code: "sync_runtime_mismatch" });
          continue;
        }
        const eventType = e.eventType as string;
        const p = e.payload;
        rows.push({
          projectId: e.projectId as string,
          runId: e.runId as string,
          sequence: e.sequence as number,
          hubProject: project,
          homeRuntimeId: runtimeId,
          eventType,
          contentHash: ready.contentHash,
          receivedAtMs,
          occurredAt: e.occurredAt as string,
          ...(eventType.startsWith("run.") && typeof p.status === "string" && { runStatus: p.status }),
          ...(typeof p.workflowId === "string" && { workflowId: p.workflowId }),
          ...(typeof p.displayTitle === "string" && { displayTitle: p.displayTitle }),
          record: ready.record,
        });
        slots.push(results.length);
        results.push({ ...identity, outcome: "accepted" });
      }
      const { outcomes, cursors } = await store.sync.pushSyncEvents(rows, decideIngest, syncChanges);
      outcomes.forEach((o, i) => {
        const row = rows[i]!;
        const result = results[slots[i]!]!;
        if (o.outcome !== "conflict") {
          result.outcome = o.outcome;
          return;
        }
        result.outcome = "conflict";
        result.code = `sync_${o.reason}`;
        alert(project, {
          alert: "sync_sequence_conflict",
          reason: o.reason,
          runtimeId,
          projectId: row.projectId,
          runId: row.runId,
          sequence: row.sequence,
          presentedHash: row.contentHash,
          ...(o.existingHash !== undefined && { existingHash: o.existingHash }),
        });
      });
      for (const r of results) {
        if (r.outcome === "accepted") observer.count("syncAccepted");
        else if (r.outcome === "duplicate") observer.count("syncDuplicate");
        else observer.count("syncRefused");
        if (r.outcome === "conflict") observer.count("syncConflicts");
      }
      return { results, cursors };
    },

    /**
     * The gapless cursor of one run for `project`: 0 for a run it stored nothing of. Throws
     * protocol_error for a project, projectId or runId no push could have stored.
     */
    async cursor(hubProject: string, input: { projectId: string; runId: string }) {
      const project = projectName("project", hubProject);
      const projectId = storableIdOf("projectId", input.projectId);
      const runId = storableIdOf("runId", input.runId);
      return { projectId, runId, cursor: await store.sync.getSyncCursor(project, projectId, runId) };
    },
  };
}

export type Sync = ReturnType<typeof createSync>;
