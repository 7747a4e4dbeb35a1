import type Database from "better-sqlite3";
import type { StoreAccess } from "./batch.js";
import type { IngestContext, IngestOutcome, SyncEventRow, SyncRunView } from "../store.js";

interface PrefixDb {
  sequence: number;
  event_type: string;
  occurred_at: string;
  run_status: string | null;
  workflow_id: string | null;
  display_title: string | null;
}

/**
 * The sync half of the SQLite store. A push is one decision (all or nothing); each run's cursor is kept in
 * `sync_runs` and advanced over contiguous sequences as events arrive, so gaps stay open until
 * filled and reading a cursor is one row.
 */
export function createSqliteSync(db: Database.Database, { tx, read }: StoreAccess) {
  const q = {
    existing: db.prepare<[string, string, number], { content_hash: string; hub_project: string }>(
      "SELECT content_hash, hub_project FROM sync_events WHERE project_id = ? AND run_id = ? AND sequence = ?",
    ),
    owner: db.prepare<[string], { hub_project: string }>("SELECT hub_project FROM sync_projects WHERE project_id = ?"),
    claim: db.prepare("INSERT OR IGNORE INTO sync_projects (project_id, hub_project) VALUES (?, ?)"),
    run: db.prepare<[string, string], { hub_project: string; home_runtime_id: string; cursor: number }>(
      "SELECT hub_project, home_runtime_id, cursor FROM sync_runs WHERE project_id = ? AND run_id = ?",
    ),
    newRun: db.prepare(
      "INSERT INTO sync_runs (project_id, run_id, hub_project, home_runtime_id, cursor, stored) VALUES (?, ?, ?, ?, 0, 0)",
    ),
    insert: db.prepare(
      `INSERT INTO sync_events (project_id, run_id, sequence, hub_project, home_runtime_id, event_type, content_hash,
         received_at, occurred_at, run_status, workflow_id, display_title, record)
       VALUES (@projectId, @runId, @sequence, @hubProject, @homeRuntimeId, @eventType, @contentHash,
         @receivedAtMs, @occurredAt, @runStatus, @workflowId, @displayTitle, @record)`,
    ),
    has: db.prepare<[string, string, number], { one: number }>(
      "SELECT 1 AS one FROM sync_events WHERE project_id = ? AND run_id = ? AND sequence = ?",
    ),
    setCursor: db.prepare("UPDATE sync_runs SET cursor = ?, stored = stored + ? WHERE project_id = ? AND run_id = ?"),
    cursorOf: db.prepare<[string, string, string], { cursor: number }>(
      "SELECT cursor FROM sync_runs WHERE hub_project = ? AND project_id = ? AND run_id = ?",
    ),
    runsOf: db.prepare<[string], { project_id: string; run_id: string; home_runtime_id: string; cursor: number; stored: number }>(
      "SELECT project_id, run_id, home_runtime_id, cursor, stored FROM sync_runs WHERE hub_project = ? ORDER BY project_id, run_id",
    ),
    prefix: db.prepare<[string, string, number], PrefixDb>(
      `SELECT sequence, event_type, occurred_at, run_status, workflow_id, display_title FROM sync_events
       WHERE project_id = ? AND run_id = ? AND sequence <= ? ORDER BY sequence`,
    ),
  };

  return {
    async pushSyncEvents(events: SyncEventRow[], decide: (event: SyncEventRow, ctx: IngestContext) => IngestOutcome) {
      return tx(() => {
        const touched = new Map<string, { projectId: string; runId: string }>();
        const outcomes = events.map((e) => {
          const existing = q.existing.get(e.projectId, e.runId, e.sequence);
          const run = q.run.get(e.projectId, e.runId);
          const owner = q.owner.get(e.projectId);
          const ctx: IngestContext = {
            ...(existing && { existing: { contentHash: existing.content_hash, hubProject: existing.hub_project } }),
            ...(owner && { owner: owner.hub_project }),
            ...(run && { home: run.home_runtime_id }),
          };
          const outcome = decide(e, ctx);
          if (outcome.outcome === "accepted") {
            q.claim.run(e.projectId, e.hubProject);
            if (!run) q.newRun.run(e.projectId, e.runId, e.hubProject, e.homeRuntimeId);
            q.insert.run({
              ...e,
              runStatus: e.runStatus ?? null,
              workflowId: e.workflowId ?? null,
              displayTitle: e.displayTitle ?? null,
            });
            let cursor = run?.cursor ?? 0;
            while (q.has.get(e.projectId, e.runId, cursor + 1)) cursor++;
            q.setCursor.run(cursor, 1, e.projectId, e.runId);
          }
          // Keyed by the pair itself (JSON of the two strings is one-to-one), not a joined string.
          if (outcome.outcome !== "conflict") touched.set(JSON.stringify([e.projectId, e.runId]), e);
          return outcome;
        });
        const cursors = [...touched.values()].map(({ projectId, runId }) => ({
          projectId,
          runId,
          cursor: q.run.get(projectId, runId)?.cursor ?? 0,
        }));
        return { outcomes, cursors };
      });
    },

    getSyncCursor(hubProject: string, projectId: string, runId: string) {
      return read(() => q.cursorOf.get(hubProject, projectId, runId)?.cursor ?? 0);
    },

    listSyncRuns(hubProject: string): Promise<SyncRunView[]> {
      return read(() => q.runsOf.all(hubProject).map((r) => ({
        projectId: r.project_id,
        runId: r.run_id,
        homeRuntimeId: r.home_runtime_id,
        cursor: r.cursor,
        stored: r.stored,
        prefix: q.prefix.all(r.project_id, r.run_id, r.cursor).map((p) => ({
          sequence: p.sequence,
          eventType: p.event_type,
          occurredAt: p.occurred_at,
          ...(p.run_status !== null && { runStatus: p.run_status }),
          ...(p.workflow_id !== null && { workflowId: p.workflow_id }),
          ...(p.display_title !== null && { displayTitle: p.display_title }),
        })),
      })));
    },
  };
}
