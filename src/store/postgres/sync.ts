import type { ChangeRecord } from "../change-feed.js";
import type { IngestContext, IngestOutcome, SyncChanges, SyncEventRow, SyncStore } from "../sync-store.js";
import type { PgAccess } from "./transaction.js";
import { runFromDb, runtimeFromDb, runViewColumns, type RunDb as RunViewDb, type RuntimeDb } from "../rows.js";
import { runtimesOfProject } from "./agents.js";
import { keyLists } from "./key-list.js";
import type { SyncRunView } from "../../domain.js";

interface RunDb {
  project_id: string;
  run_id: string;
  hub_project: string;
  home_runtime_id: string;
  cursor: number;
}

/** One run as a push sees it: its row (once it has one) and the sequences the push stored. */
interface RunState {
  projectId: string;
  runId: string;
  row: { hub_project: string; home_runtime_id: string; cursor: number } | undefined;
  /** The row exists in the database (else this push inserts it). */
  stored: boolean;
  inserted: Set<number>;
  /** An event of the run was accepted or a duplicate: its cursor is answered. */
  touched: boolean;
}

/** Every run of a hub project, as its prefix describes it. */
const runsOfProject = `SELECT ${runViewColumns} FROM sync_runs r WHERE r.hub_project = $1 ORDER BY r.project_id, r.run_id`;

/** Keyed by the pair itself (JSON of the strings is one-to-one), never a joined string. */
const keyOf = (...parts: (string | number)[]) => JSON.stringify(parts);

/** The hub project owning each of a push's projects (an IN list: key-list.ts). */
const projectOwners = keyLists((ids) => `SELECT project_id, hub_project FROM sync_projects WHERE project_id IN (${ids})`);

const insertColumns = [
  "project_id", "run_id", "sequence", "hub_project", "home_runtime_id", "event_type", "content_hash",
  "received_at", "occurred_at", "run_status", "workflow_id", "display_title", "record",
] as const;
const insertTypes = ["text", "text", "bigint", "text", "text", "text", "text", "bigint", "text", "text", "text", "text", "text"];

/**
 * The sync concern of the PostgreSQL store: the same decisions as on SQLite, with the database read
 * a few times per push instead of a few times per event. A push reads what is stored under its
 * keys, its projects' owners and its runs (those rows locked) in one statement each, decides
 * every event in order against that and what the push itself stored, and writes its events in
 * one statement. Two replicas that create the same run, owner or event at once race on a
 * primary key: the loser's push runs again and sees the winner's rows (postgres/transaction.ts).
 */
export function createPostgresSync({ changeTx, rows, now, snapshot, head }: PgAccess): SyncStore {
  return {
    pushSyncEvents(events: SyncEventRow[], decide: (event: SyncEventRow, ctx: IngestContext) => IngestOutcome, changes: SyncChanges) {
      // A push records changes only in the hub projects of its events (an event is accepted only
      // into a run of its own hub project), whose heads it locks first.
      return changeTx([...new Set(events.map((e) => e.hubProject))], async (t, record) => {
        /** The changes for watchers, recorded last. */
        const recorded: { project: string; change: ChangeRecord }[] = [];
        const projectIds = [...new Set(events.map((e) => e.projectId))];
        const runPairs = [...new Map(events.map((e) => [keyOf(e.projectId, e.runId), e])).values()];
        const existing = new Map<string, { contentHash: string; hubProject: string }>();
        for (const r of (
          await t.query<{ project_id: string; run_id: string; sequence: number; content_hash: string; hub_project: string }>(
            `SELECT s.project_id, s.run_id, s.sequence, s.content_hash, s.hub_project FROM sync_events s
             JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS k (project_id, run_id, sequence)
               ON s.project_id = k.project_id AND s.run_id = k.run_id AND s.sequence = k.sequence`,
            [events.map((e) => e.projectId), events.map((e) => e.runId), events.map((e) => e.sequence)],
          )
        ).rows) {
          existing.set(keyOf(r.project_id, r.run_id, r.sequence), { contentHash: r.content_hash, hubProject: r.hub_project });
        }
        const owners = new Map<string, string | undefined>(projectIds.map((p) => [p, undefined]));
        if (projectIds.length > 0) {
          const ownersRead = projectOwners(projectIds);
          for (const r of (await t.query<{ project_id: string; hub_project: string }>(ownersRead.text, ownersRead.params)).rows) {
            owners.set(r.project_id, r.hub_project);
          }
        }
        const runs = new Map<string, RunState>(
          runPairs.map((e) => [keyOf(e.projectId, e.runId), { projectId: e.projectId, runId: e.runId, row: undefined, stored: false, inserted: new Set(), touched: false }]),
        );
        // Only the runs of the push's own hub projects are locked (their batches are one at a
        // time, behind the projects' heads): a run of another hub project is read as it stands,
        // its events refused (the project's owner is another), and locking it too let two
        // projects' batches lock the same runs in opposite orders and deadlock.
        for (const r of (
          await t.query<RunDb>(
            `WITH k AS (SELECT * FROM unnest($1::text[], $2::text[]) AS k (project_id, run_id)),
               own AS (
                 SELECT r.project_id, r.run_id, r.hub_project, r.home_runtime_id, r.cursor FROM sync_runs r
                 JOIN k ON r.project_id = k.project_id AND r.run_id = k.run_id
                 WHERE r.hub_project = ANY($3::text[])
                 ORDER BY r.project_id, r.run_id FOR UPDATE OF r)
             SELECT * FROM own
             UNION ALL
             SELECT r.project_id, r.run_id, r.hub_project, r.home_runtime_id, r.cursor FROM sync_runs r
             JOIN k ON r.project_id = k.project_id AND r.run_id = k.run_id
             WHERE r.hub_project <> ALL($3::text[])`,
            [runPairs.map((e) => e.projectId), runPairs.map((e) => e.runId), [...new Set(events.map((e) => e.hubProject))]],
          )
        ).rows) {
          const run = runs.get(keyOf(r.project_id, r.run_id))!;
          run.row = { hub_project: r.hub_project, home_runtime_id: r.home_runtime_id, cursor: r.cursor };
          run.stored = true;
        }

        const claims: [string, string][] = [];
        const toInsert: SyncEventRow[] = [];
        const outcomes = events.map((e) => {
          const key = keyOf(e.projectId, e.runId, e.sequence);
          const run = runs.get(keyOf(e.projectId, e.runId))!;
          const stored = existing.get(key);
          const owner = owners.get(e.projectId);
          const ctx: IngestContext = {
            ...(stored && { existing: stored }),
            ...(owner !== undefined && { owner }),
            ...(run.row && { home: run.row.home_runtime_id }),
          };
          const outcome = decide(e, ctx);
          if (outcome.outcome === "accepted") {
            if (owner === undefined) {
              claims.push([e.projectId, e.hubProject]);
              owners.set(e.projectId, e.hubProject);
            }
            run.row ??= { hub_project: e.hubProject, home_runtime_id: e.homeRuntimeId, cursor: 0 };
            existing.set(key, { contentHash: e.contentHash, hubProject: e.hubProject });
            toInsert.push(e);
            run.inserted.add(e.sequence);
          }
          if (outcome.outcome === "conflict") recorded.push({ project: e.hubProject, change: changes.conflict(e, outcome) });
          else run.touched = true;
          return outcome;
        });

        // Plain inserts: a row another replica created meanwhile is a unique_violation, and the
        // push runs again on what that replica stored.
        for (const [projectId, hubProject] of claims) {
          await t.query("INSERT INTO sync_projects (project_id, hub_project) VALUES ($1, $2)", [projectId, hubProject]);
        }
        for (const run of runs.values()) {
          if (run.row && !run.stored) {
            await t.query("INSERT INTO sync_runs (project_id, run_id, hub_project, home_runtime_id, cursor, stored) VALUES ($1, $2, $3, $4, 0, 0)", [
              run.projectId,
              run.runId,
              run.row.hub_project,
              run.row.home_runtime_id,
            ]);
          }
        }
        if (toInsert.length > 0) {
          const arrays = [
            toInsert.map((e) => e.projectId),
            toInsert.map((e) => e.runId),
            toInsert.map((e) => e.sequence),
            toInsert.map((e) => e.hubProject),
            toInsert.map((e) => e.homeRuntimeId),
            toInsert.map((e) => e.eventType),
            toInsert.map((e) => e.contentHash),
            toInsert.map((e) => e.receivedAtMs),
            toInsert.map((e) => e.occurredAt),
            toInsert.map((e) => e.runStatus ?? null),
            toInsert.map((e) => e.workflowId ?? null),
            toInsert.map((e) => e.displayTitle ?? null),
            toInsert.map((e) => e.record),
          ];
          await t.query(
            `INSERT INTO sync_events (${insertColumns.join(", ")})
             SELECT * FROM unnest(${insertTypes.map((type, i) => `$${i + 1}::${type}[]`).join(", ")})`,
            arrays,
          );
        }

        const cursors: { projectId: string; runId: string; cursor: number }[] = [];
        for (const run of runs.values()) {
          if (run.row && run.inserted.size > 0) {
            // The cursor moves over contiguous sequences (this push's own are stored by now, with
            // any stored earlier): to the end of the stretch that starts right after it, in one
            // statement. Walked one sequence a statement, a push that filled a gap before a
            // long stretch held the project's heads for a round trip per event.
            const [end] = (
              await t.query<{ cursor: number }>(
                // The stretch from $3 + 1 on is where sequence - (its rank after $3) stays $3.
                `SELECT coalesce(max(sequence), $3::bigint) AS cursor FROM (
                   SELECT sequence, sequence - row_number() OVER (ORDER BY sequence) AS stretch
                   FROM sync_events WHERE project_id = $1 AND run_id = $2 AND sequence > $3::bigint
                 ) x WHERE stretch = $3::bigint`,
                [run.projectId, run.runId, run.row.cursor],
              )
            ).rows;
            const cursor = Number(end!.cursor);
            await t.query("UPDATE sync_runs SET cursor = $1, stored = stored + $2 WHERE project_id = $3 AND run_id = $4", [
              cursor,
              run.inserted.size,
              run.projectId,
              run.runId,
            ]);
            run.row.cursor = cursor;
            const [view] = (
              await t.query<RunViewDb>(`SELECT ${runViewColumns} FROM sync_runs r WHERE r.project_id = $1 AND r.run_id = $2`, [
                run.projectId,
                run.runId,
              ])
            ).rows;
            recorded.push({ project: run.row.hub_project, change: changes.run(runFromDb(view!)) });
          }
          if (run.touched) cursors.push({ projectId: run.projectId, runId: run.runId, cursor: run.row?.cursor ?? 0 });
        }
        if (recorded.length > 0) {
          const atMs = await now(t);
          for (const r of recorded) await record(r.project, r.change.stream, r.change.body, atMs);
        }
        return { outcomes, cursors };
      });
    },

    async getSyncCursor(hubProject: string, projectId: string, runId: string) {
      const [r] = await rows<{ cursor: number }>("SELECT cursor FROM sync_runs WHERE hub_project = $1 AND project_id = $2 AND run_id = $3", [
        hubProject,
        projectId,
        runId,
      ]);
      return r?.cursor ?? 0;
    },

    async listSyncRuns(hubProject: string): Promise<SyncRunView[]> {
      return (await rows<RunViewDb>(runsOfProject, [hubProject])).map(runFromDb);
    },

    runsSnapshot(project: string) {
      return snapshot(async (t) => ({
        runs: (await t.query<RunViewDb>(runsOfProject, [project])).rows.map(runFromDb),
        runtimes: (await t.query<RuntimeDb>(runtimesOfProject, [project])).rows.map(runtimeFromDb),
        head: await head(t, project, "runs"),
      }));
    },
  };
}
