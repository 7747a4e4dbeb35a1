import type Database from "better-sqlite3";
import type { StoreAccess } from "./batch.js";
import { runFromDb, runViewColumns, type RunDb } from "../rows.js";
import type { IngestContext, IngestOutcome, SyncChanges, SyncEventRow, SyncStore } from "../sync-store.js";
import type { RuntimeRow, SyncRunView } from "../../domain.js";

/** One run as a push sees it: its row (once it has one) and the sequences the push stored. */
interface RunState {
  projectId: string;
  runId: string;
  row: { hub_project: string; home_runtime_id: string; cursor: number } | undefined;
  inserted: Set<number>;
  /** An event of the run was accepted or a duplicate: its cursor is answered. */
  touched: boolean;
}

/**
 * The sync concern of the SQLite store. A push is one decision (all or nothing); each run's cursor is kept in
 * `sync_runs` and advanced over contiguous sequences as events arrive, so gaps stay open until
 * filled and reading a cursor is one row. `runtimesNow` reads a project's runtimes for the run
 * snapshot (agents.ts).
 */
export function createSqliteSync(
  db: Database.Database,
  { changeTx, read, now, head }: StoreAccess,
  runtimesNow: (project: string) => RuntimeRow[],
): SyncStore {
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
    runsOf: db.prepare<[string], RunDb>(
      `SELECT ${runViewColumns} FROM sync_runs r WHERE r.hub_project = ? ORDER BY r.project_id, r.run_id`,
    ),
    runView: db.prepare<[string, string], RunDb>(`SELECT ${runViewColumns} FROM sync_runs r WHERE r.project_id = ? AND r.run_id = ?`),
  };

  const runsNow = (hubProject: string): SyncRunView[] => q.runsOf.all(hubProject).map(runFromDb);

  return {
    async pushSyncEvents(
      events: SyncEventRow[],
      decide: (event: SyncEventRow, ctx: IngestContext) => IngestOutcome,
      changes: SyncChanges,
    ) {
      return changeTx((record) => {
        const atMs = now();
        // What earlier events of this push stored is kept here, so each event costs its own
        // lookup and insert, and each run and project one read and one write per push.
        const owners = new Map<string, string | undefined>();
        const runs = new Map<string, RunState>();
        const runOf = (projectId: string, runId: string): RunState => {
          // Keyed by the pair itself (JSON of the two strings is one-to-one), not a joined string.
          const key = JSON.stringify([projectId, runId]);
          let state = runs.get(key);
          if (!state) {
            const row = q.run.get(projectId, runId);
            state = { projectId, runId, row, inserted: new Set(), touched: false };
            runs.set(key, state);
          }
          return state;
        };
        const outcomes = events.map((e) => {
          const existing = q.existing.get(e.projectId, e.runId, e.sequence);
          const run = runOf(e.projectId, e.runId);
          if (!owners.has(e.projectId)) owners.set(e.projectId, q.owner.get(e.projectId)?.hub_project);
          const owner = owners.get(e.projectId);
          const ctx: IngestContext = {
            ...(existing && { existing: { contentHash: existing.content_hash, hubProject: existing.hub_project } }),
            ...(owner !== undefined && { owner }),
            ...(run.row && { home: run.row.home_runtime_id }),
          };
          const outcome = decide(e, ctx);
          if (outcome.outcome === "accepted") {
            if (owner === undefined) {
              q.claim.run(e.projectId, e.hubProject);
              owners.set(e.projectId, e.hubProject);
            }
            if (!run.row) {
              q.newRun.run(e.projectId, e.runId, e.hubProject, e.homeRuntimeId);
              run.row = { hub_project: e.hubProject, home_runtime_id: e.homeRuntimeId, cursor: 0 };
            }
            q.insert.run({
              ...e,
              runStatus: e.runStatus ?? null,
              workflowId: e.workflowId ?? null,
              displayTitle: e.displayTitle ?? null,
            });
            run.inserted.add(e.sequence);
          }
          if (outcome.outcome === "conflict") {
            const c = changes.conflict(e, outcome);
            record(e.hubProject, c.stream, c.body, atMs);
          } else {
            run.touched = true;
          }
          return outcome;
        });
        const cursors: { projectId: string; runId: string; cursor: number }[] = [];
        for (const run of runs.values()) {
          if (run.row && run.inserted.size > 0) {
            // The cursor moves over contiguous sequences: this push's own, then any stored earlier.
            let cursor = run.row.cursor;
            while (run.inserted.has(cursor + 1) || q.has.get(run.projectId, run.runId, cursor + 1)) cursor++;
            q.setCursor.run(cursor, run.inserted.size, run.projectId, run.runId);
            run.row.cursor = cursor;
            const c = changes.run(runFromDb(q.runView.get(run.projectId, run.runId)!));
            record(run.row.hub_project, c.stream, c.body, atMs);
          }
          if (run.touched) cursors.push({ projectId: run.projectId, runId: run.runId, cursor: run.row?.cursor ?? 0 });
        }
        return { outcomes, cursors };
      });
    },

    getSyncCursor(hubProject: string, projectId: string, runId: string) {
      return read(() => q.cursorOf.get(hubProject, projectId, runId)?.cursor ?? 0);
    },

    listSyncRuns(hubProject: string): Promise<SyncRunView[]> {
      return read(() => runsNow(hubProject));
    },

    runsSnapshot(project: string) {
      return read(() => ({ runs: runsNow(project), runtimes: runtimesNow(project), head: head(project, "runs") }));
    },
  };
}
