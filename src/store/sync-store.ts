import type { ChangeRecord } from "./change-feed.js";
import type { RuntimeRow, SyncRunView } from "../domain.js";

/**
 * The run-facts concern of the store: pushed sync events, the runs they describe and each run's
 * cursor. Each backend implements it in one file (sqlite/sync.ts, postgres/sync.ts); the sync
 * domain takes this interface.
 */

/** A run fact as stored: its key, who pushed it, its hash, its canonical JSON and the fields views need. */
export interface SyncEventRow {
  projectId: string;
  runId: string;
  sequence: number;
  hubProject: string;
  homeRuntimeId: string;
  eventType: string;
  contentHash: string;
  receivedAtMs: number;
  occurredAt: string;
  /** payload.status of a run.* event. */
  runStatus?: string;
  workflowId?: string;
  displayTitle?: string;
  /** The canonical JSON text the hash covers. */
  record: string;
}

/** What the hub already holds that bears on storing one event. */
export interface IngestContext {
  /** The stored event under the same key. */
  existing?: { contentHash: string; hubProject: string };
  /** The hub project owning the event's projectId. */
  owner?: string;
  /** The run's home runtime. */
  home?: string;
}

export type IngestOutcome =
  | { outcome: "accepted" }
  | { outcome: "duplicate" }
  | { outcome: "conflict"; reason: "sequence_reused" | "project_mismatch" | "home_runtime_mismatch"; existingHash?: string };

/** The changes a push records for watchers of its hub project (WatchRuns), made by the domain. */
export interface SyncChanges {
  /** A run whose events the push stored, as it stands after the push. */
  run(view: SyncRunView): ChangeRecord;
  /** An event the push refused as a conflict. */
  conflict(event: SyncEventRow, outcome: Extract<IngestOutcome, { outcome: "conflict" }>): ChangeRecord;
}

export interface SyncStore {
  /**
   * Stores a batch of run facts in one transaction, deciding each in order (later events see
   * what earlier ones stored), and records a change for each conflict and for each run it stored
   * events of (all of one hub project). Returns one outcome per event and the cursor of every
   * run with an accepted or duplicate event.
   */
  pushSyncEvents(
    events: SyncEventRow[],
    decide: (event: SyncEventRow, ctx: IngestContext) => IngestOutcome,
    changes: SyncChanges,
  ): Promise<{ outcomes: IngestOutcome[]; cursors: { projectId: string; runId: string; cursor: number }[] }>;
  /** A run's cursor as seen by a hub project (0 when it has none of the run). */
  getSyncCursor(hubProject: string, projectId: string, runId: string): Promise<number>;
  /** Every run of a hub project, as its gapless prefix describes it. */
  listSyncRuns(hubProject: string): Promise<SyncRunView[]>;
  /** The runs and runtimes of a project, and the head of its run changes they reflect. */
  runsSnapshot(project: string): Promise<{ runs: SyncRunView[]; runtimes: RuntimeRow[]; head: number }>;
}
