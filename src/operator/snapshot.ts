import type { Clock } from "../clock.js";
import type { Leases } from "../lease/leases.js";
import type { Messages } from "../peer/messages.js";
import type { AgentView, Presence, RuntimeView } from "../presence/presence.js";
import type { MessageStore } from "../store/message-store.js";
import type { HubStore } from "../store/store.js";
import type { SyncStore } from "../store/sync-store.js";
import { projectName } from "../validate.js";
import type { LeaseView, MessageRow, SyncRunView } from "../domain.js";

export interface HomeRuntimeRun {
  projectId: string;
  runId: string;
  workflowId?: string;
  displayTitle?: string;
  status?: string;
  lastSequence: number;
  pendingGap: boolean;
  updatedAt?: string;
  orphaned: boolean;
}

export interface HomeRuntime {
  runtimeId: string;
  host?: string;
  heartbeatAtMs?: number;
  leaseExpiresAtMs?: number;
  presence: "online" | "expired" | "unknown";
  orphaned: boolean;
  runs: HomeRuntimeRun[];
  runTotal: number;
}

export interface OperatorSnapshot {
  project: string;
  fetchedAtMs: number;
  agents: AgentView[];
  openMessages: MessageRow[];
  openMessageTotal: number;
  homeRuntimes: HomeRuntime[];
  /** Live leases by name, at most maxLeases. */
  leases: LeaseView[];
}

/** A project as the operator's list shows it. */
export interface ProjectSummary {
  project: string;
  agents: number;
  onlineAgents: number;
  heldLeases: number;
  openMessages: number;
  hasToken: boolean;
}

const maxOpenMessages = 16;
const maxLeases = 100;
const maxRunsPerRuntime = 16;

/** A run as the operator sees it, under a home runtime whose presence is `presence`. */
export function homeRuntimeRun(run: SyncRunView, presence: HomeRuntime["presence"] | undefined): HomeRuntimeRun {
  return {
    projectId: run.projectId,
    runId: run.runId,
    ...(run.workflowId !== undefined && { workflowId: run.workflowId }),
    ...(run.displayTitle !== undefined && { displayTitle: run.displayTitle }),
    ...(run.status !== undefined && { status: run.status }),
    lastSequence: run.cursor,
    pendingGap: run.stored > run.cursor,
    ...(run.updatedAt !== undefined && { updatedAt: run.updatedAt }),
    orphaned: presence !== "online",
  };
}

/**
 * Runs grouped under their home runtime: every runtime that ever heartbeated, with or without
 * runs, and every runtime that owns runs, heartbeat or not; each runtime's newest runs first.
 */
export function byHomeRuntime(runs: SyncRunView[], runtimes: RuntimeView[]): HomeRuntime[] {
  const byRuntime = new Map<string, RuntimeView>(runtimes.map((r) => [r.runtimeId, r]));
  const runsByRuntime = new Map<string, HomeRuntimeRun[]>();
  for (const run of runs) {
    const item = homeRuntimeRun(run, byRuntime.get(run.homeRuntimeId)?.presence);
    runsByRuntime.set(run.homeRuntimeId, [...(runsByRuntime.get(run.homeRuntimeId) ?? []), item]);
  }
  const ids = [...new Set([...byRuntime.keys(), ...runsByRuntime.keys()])].sort();
  return ids.map((runtimeId): HomeRuntime => {
    const r = byRuntime.get(runtimeId);
    // Newest first by time, not by text: "12:00:00Z" sorts after "12:00:00.500Z" as a string.
    const at = (r: { updatedAt?: string }) => (r.updatedAt === undefined ? Number.NEGATIVE_INFINITY : Date.parse(r.updatedAt) || Number.NEGATIVE_INFINITY);
    const all = (runsByRuntime.get(runtimeId) ?? []).sort((a, b) => at(b) - at(a));
    return {
      runtimeId,
      ...(r?.host !== undefined && { host: r.host }),
      ...(r && { heartbeatAtMs: r.heartbeatAtMs, leaseExpiresAtMs: r.leaseExpiresAtMs }),
      presence: r?.presence ?? "unknown",
      orphaned: r?.presence !== "online",
      runs: all.slice(0, maxRunsPerRuntime),
      runTotal: all.length,
    };
  });
}

/**
 * What an operator sees of a project (reference-hub.md §5.4). Runs are grouped under their
 * home runtime and described from their gapless prefix only; every runtime that ever
 * heartbeated appears, with or without runs.
 */
export function createOperatorView(deps: {
  store: Pick<HubStore, "listProjects"> & { messages: MessageStore; sync: SyncStore };
  clock: Clock;
  presence: Presence;
  messages: Messages;
  leases: Leases;
  /** Projects with their own token (they are listed even before they hold anything). */
  tokenProjects: string[];
}) {
  const { store, clock, presence, messages, leases } = deps;

  /** Every project the hub knows, by name: stored data or a configured token. */
  async function listProjects(): Promise<ProjectSummary[]> {
    const counts = new Map((await store.listProjects(clock.now())).map((c) => [c.project, c]));
    const tokens = new Set(deps.tokenProjects);
    return [...new Set([...counts.keys(), ...tokens])].sort().map((project) => ({
      project,
      agents: counts.get(project)?.agents ?? 0,
      onlineAgents: counts.get(project)?.onlineAgents ?? 0,
      heldLeases: counts.get(project)?.heldLeases ?? 0,
      openMessages: counts.get(project)?.openMessages ?? 0,
      hasToken: tokens.has(project),
    }));
  }

  async function snapshot(input: { project: string }): Promise<OperatorSnapshot> {
    const project = projectName("project", input.project);
    await messages.expireDue();
    await messages.purge();
    const nowMs = clock.now();
    const [agents, open, runs, runtimes, held] = await Promise.all([
      presence.list({ project }, { includeOffline: true }),
      store.messages.listOpenMessages(project, maxOpenMessages),
      store.sync.listSyncRuns(project),
      presence.runtimes(project),
      leases.list({ project }, { includeExpired: false, pageSize: maxLeases, pageToken: "" }),
    ]);
    const homeRuntimes = byHomeRuntime(runs, runtimes);
    const onlineFirst = [...agents].sort(
      (a, b) => Number(b.online) - Number(a.online) || a.name.localeCompare(b.name),
    );
    return {
      project,
      fetchedAtMs: nowMs,
      agents: onlineFirst,
      openMessages: open.messages,
      openMessageTotal: open.total,
      homeRuntimes,
      leases: held.leases,
    };
  }

  return { snapshot, listProjects };
}

export type OperatorView = ReturnType<typeof createOperatorView>;
