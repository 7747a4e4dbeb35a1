import type { Clock } from "../clock.js";
import type { Bus } from "../events/bus.js";
import { createWaker } from "../events/wait.js";
import type { Messages } from "../peer/messages.js";
import { openMessageView, type MessageChangeBody } from "../peer/rules.js";
import type { Presence } from "../presence/presence.js";
import type { ChangeFeed, ChangeRead, StreamChange } from "../store/change-feed.js";
import type { MessageStore } from "../store/message-store.js";
import type { SyncStore } from "../store/sync-store.js";
import type { RunChangeBody } from "../sync/sync.js";
import { byHomeRuntime, type HomeRuntime, type ProjectSummary } from "./snapshot.js";

/** A stored change of a project's open messages (WatchOpenMessages' cursor is `seq`). */
export interface MessageWatchChange extends MessageChangeBody {
  seq: number;
  project: string;
}

/** A stored change of a project's runs: a run moved, or a push was refused (WatchRuns). */
export interface RunWatchChange {
  seq: number;
  project: string;
  atMs: number;
  body: RunChangeBody;
}

export const messageWatchChangeOf = (c: StreamChange): MessageWatchChange => ({
  seq: c.seq,
  project: c.project,
  ...(c.body as MessageChangeBody),
});

export const runWatchChangeOf = (c: StreamChange): RunWatchChange => ({
  seq: c.seq,
  project: c.project,
  atMs: c.atMs,
  body: c.body as RunChangeBody,
});

/** The open messages a snapshot lists (the newest; the total counts them all). */
export const maxSnapshotMessages = 200;

/**
 * How long WatchProjects rests after a list, as a multiple of what the list took (real time): a
 * busy hub changes many times a second and each list counts every project's rows, so a watcher
 * spends at most a fifth of its time listing, however busy the hub; on a quiet one, a change
 * shows at once.
 */
export const projectsListRest = 4;

export interface OperatorLiveDeps {
  store: { messages: MessageStore; sync: SyncStore; changes: ChangeFeed };
  clock: Clock;
  presence: Presence;
  messages: Messages;
  /** Every project change, any stream (the key is the project). */
  changes: Bus<StreamChange>;
  listProjects: () => Promise<ProjectSummary[]>;
}

/**
 * The live parts of the operator's views: the snapshots and stored changes WatchOpenMessages and
 * WatchRuns resume from, and the project list WatchProjects sends again as projects change.
 */
export function createOperatorLive(deps: OperatorLiveDeps) {
  const { store, clock, presence, messages } = deps;

  async function changesOf<C>(project: string, stream: "messages" | "runs", afterSeq: number, limit: number, of: (c: StreamChange) => C) {
    const r: ChangeRead = await store.changes.readChanges(project, stream, afterSeq, limit);
    return { changes: r.changes.map(of), head: r.head };
  }

  return {
    /** The open messages now (due ones expired first), and the number of the last change they reflect. */
    async openMessages(project: string) {
      await messages.expireDue();
      const { messages: open, total, head } = await store.messages.openMessagesSnapshot(project, maxSnapshotMessages);
      const nowMs = clock.now();
      return { cursor: head, snapshot: { messages: open.map((m) => openMessageView(m, nowMs)), total } };
    },

    messageChanges: (project: string, afterSeq: number, limit: number) =>
      changesOf(project, "messages", afterSeq, limit, messageWatchChangeOf),

    /** The runs under their home runtimes now, and the number of the last change they reflect. */
    async runs(project: string): Promise<{ cursor: number; snapshot: HomeRuntime[] }> {
      const { runs, runtimes, head } = await store.sync.runsSnapshot(project);
      return { cursor: head, snapshot: byHomeRuntime(runs, presence.runtimeViews(runtimes)) };
    },

    runChanges: (project: string, afterSeq: number, limit: number) => changesOf(project, "runs", afterSeq, limit, runWatchChangeOf),

    /**
     * The project list now, then again each time it differs after a change (resting
     * projectsListRest times the list's cost in between) or at a keep-alive (a lease lapses without a change);
     * a keep-alive when it does not.
     */
    async *watchProjects(o: { keepAliveMs: number; signal: AbortSignal }): AsyncGenerator<
      { kind: "projects"; projects: ProjectSummary[] } | { kind: "keepAlive"; atMs: number }
    > {
      const waker = createWaker(clock);
      const unsubscribe = deps.changes.subscribe("*", () => waker.wake());
      let last: string | undefined;
      let idle = false;
      try {
        while (!o.signal.aborted) {
          const started = performance.now();
          const projects = await deps.listProjects();
          const took = performance.now() - started;
          const text = JSON.stringify(projects);
          if (text !== last) {
            last = text;
            yield { kind: "projects", projects };
          } else if (idle) {
            yield { kind: "keepAlive", atMs: clock.now() };
          }
          idle = !(await waker.wait(o.keepAliveMs, o.signal));
          if (!idle) await new Promise((r) => setTimeout(r, Math.min(1_000, took * projectsListRest)));
        }
      } finally {
        unsubscribe();
      }
    },
  };
}

export type OperatorLive = ReturnType<typeof createOperatorLive>;
