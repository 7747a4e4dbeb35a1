import type { HandlerContext } from "@connectrpc/connect";
import { timestampFromMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { AgentCaller } from "../caller.js";
import type { Clock } from "../clock.js";
import type { Bus } from "../events/bus.js";
import { merge } from "../events/merge.js";
import { watch, type ChangePage, type WatchFrame } from "../events/watch.js";
import type { LeaseChange, Leases } from "../lease/leases.js";
import type { Presence, PresenceChange } from "../presence/presence.js";
import { create, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { LeaseEventKind, WatchLeasesResponseSchema } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import {
  OpenMessageChangeKind,
  WatchOpenMessagesResponseSchema,
  WatchProjectResponseSchema,
  WatchRunsResponseSchema,
  type WatchRunsResponse,
} from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import type { MessageWatchChange, OperatorLive, RunWatchChange } from "../operator/live.js";
import { WatchPresenceResponseSchema } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { callerOf } from "./caller.js";
import { agentToProto, homeRuntimeRunToProto, homeRuntimeToProto, leaseToProto, openMessageToProto, runtimeToProto } from "./convert.js";
import { intInRange, projectName } from "../validate.js";
import { homeRuntimeRun } from "../operator/snapshot.js";

export interface WatchDeps {
  presence: Presence;
  leases: Leases;
  operator: OperatorLive;
  presenceBus: Bus<PresenceChange>;
  leaseBus: Bus<LeaseChange>;
  messageBus: Bus<MessageWatchChange>;
  runBus: Bus<RunWatchChange>;
  clock: Clock;
  keepAliveMs: number;
  maxBuffered: number;
}

/** Where a watch stream's snapshot and changes come from. */
interface WatchSource<S, E> {
  bus: Bus<E>;
  snapshot: (project: string) => Promise<{ snapshot: S; cursor: number }>;
  read: (project: string, after: number, limit: number) => Promise<ChangePage<E>>;
  /** An agent watching its own project counts as active on each keep-alive. */
  agentsActive?: boolean;
}

/** How a watch stream's snapshot and changes become frames. */
interface WatchFrames<S, E, F> {
  snapshot: (s: S, cursor: bigint, at: Timestamp) => F;
  change: (e: E) => F | F[];
}

/** The project a watcher sees: an agent's own; a token caller's named one. */
function watchedProject(ctx: HandlerContext, requested: string): { project: string; agent?: AgentCaller } {
  const caller = callerOf(ctx);
  if (caller.kind === "agent") return { project: caller.project, agent: caller };
  return { project: caller.kind === "project" ? caller.project : projectName("project", requested) };
}

const leaseKinds = {
  granted: LeaseEventKind.GRANTED,
  renewed: LeaseEventKind.RENEWED,
  released: LeaseEventKind.RELEASED,
  taken_over: LeaseEventKind.TAKEN_OVER,
  queue_changed: LeaseEventKind.QUEUE_CHANGED,
  force_released: LeaseEventKind.FORCE_RELEASED,
} as const;

const keepAliveFrame = (f: Extract<WatchFrame<unknown, unknown>, { kind: "keepAlive" }>) => ({
  cursor: BigInt(f.cursor),
  event: { case: "keepAlive" as const, value: { at: timestampFromMs(f.atMs) } },
});

/**
 * The frames of one change, built once for every watcher that gets it: each watcher receives the
 * same change object from the bus, and the frame depends only on the change (its seq is the
 * cursor), so 1,000 watchers cost one conversion, not 1,000.
 */
function framesOnce<C extends object, F>(build: (change: C) => F) {
  const built = new WeakMap<C, F>();
  return (change: C): F => {
    let frames = built.get(change);
    if (frames === undefined) built.set(change, (frames = build(change)));
    return frames;
  };
}

/** A resume cursor as the client sent it (unset: start from a snapshot). */
const afterCursor = (value: bigint | undefined) =>
  value === undefined ? undefined : intInRange("afterCursor", value, 0, Number.MAX_SAFE_INTEGER, 0);

const messageKind = (status: string) =>
  status === "queued"
    ? OpenMessageChangeKind.SENT
    : status === "delivered"
      ? OpenMessageChangeKind.DELIVERED
      : OpenMessageChangeKind.ENDED;

/**
 * WatchPresence, WatchLeases, WatchOpenMessages and WatchRuns: a snapshot (or a resume), then
 * the stored changes, woken by the buses; WatchProjects: the project list as it changes.
 */
export function createWatchHandlers(deps: WatchDeps) {
  const common = { clock: deps.clock, keepAliveMs: deps.keepAliveMs, maxBuffered: deps.maxBuffered };
  const presenceFrames = framesOnce((c: PresenceChange) => {
    const cursor = BigInt(c.seq);
    const frames: MessageShape<typeof WatchPresenceResponseSchema>[] = [];
    if (c.agent) frames.push(create(WatchPresenceResponseSchema, { cursor, event: { case: "agent", value: agentToProto(c.agent) } }));
    if (c.runtime) frames.push(create(WatchPresenceResponseSchema, { cursor, event: { case: "runtime", value: runtimeToProto(c.runtime) } }));
    if (c.forgotten) frames.push(create(WatchPresenceResponseSchema, { cursor, event: { case: "forgotten", value: c.forgotten } }));
    return frames;
  });
  const messageFrame = framesOnce((c: MessageWatchChange) =>
    create(WatchOpenMessagesResponseSchema, {
      cursor: BigInt(c.seq),
      event: { case: "change", value: { kind: messageKind(c.status), message: openMessageToProto(c) } },
    }),
  );
  const runFrame = framesOnce((c: RunWatchChange): WatchRunsResponse => {
    const cursor = BigInt(c.seq);
    const b = c.body;
    if (b.kind === "alert") {
      const { kind: _, sequence, ...alert } = b;
      return create(WatchRunsResponseSchema, {
        cursor,
        event: { case: "alert", value: { ...alert, sequence: BigInt(sequence), at: timestampFromMs(c.atMs) } },
      });
    }
    // Orphaned or not is the home runtime's presence, which WatchPresence follows.
    const run = homeRuntimeRunToProto({ ...homeRuntimeRun(b.run, undefined), orphaned: false });
    return create(WatchRunsResponseSchema, { cursor, event: { case: "change", value: { homeRuntimeId: b.run.homeRuntimeId, run } } });
  });
  const leaseFrame = framesOnce((c: LeaseChange) =>
    create(WatchLeasesResponseSchema, {
      cursor: BigInt(c.seq),
      event: { case: "change", value: { kind: leaseKinds[c.kind], lease: leaseToProto(c.lease) } },
    }),
  );

  /**
   * One project's watch stream on the wire: who watches which project from where, its snapshot
   * frame (stamped with the hub's time) and its change frames; keep-alives as they come.
   */
  async function* served<S, E extends { seq: number }, F>(
    ctx: HandlerContext,
    req: { project: string; afterCursor?: bigint },
    source: WatchSource<S, E>,
    frame: WatchFrames<S, E, F>,
    /** Ends the stream (default: the call's own signal). */
    signal: AbortSignal = ctx.signal,
  ) {
    const { project, agent } = watchedProject(ctx, req.project);
    const caller = callerOf(ctx);
    const revoked = caller.kind === "agent" ? endOnKeyChange(caller, signal) : undefined;
    if (revoked) signal = revoked.signal;
    try {
      // An instance that ended between this call's authentication and the subscription above
      // (evicted, taken over, unregistered) is told now: nothing after it would tell the stream.
      if (caller.kind === "agent") await deps.presence.requireKey(caller);
      yield* servedFrames(project, agent, req, source, frame, signal);
    } finally {
      revoked?.dispose();
    }
    if (revoked?.error) throw revoked.error;
  }

  /**
   * A signal that also aborts when the agent behind a stream no longer has the key the stream was
   * opened with (unregistered, evicted, taken over); `error` then says so.
   */
  function endOnKeyChange(caller: AgentCaller, signal: AbortSignal) {
    const ac = new AbortController();
    const stop = () => ac.abort();
    signal.addEventListener("abort", stop, { once: true });
    const state = {
      signal: ac.signal,
      error: undefined as unknown,
      dispose() {
        unsubscribe();
        signal.removeEventListener("abort", stop);
      },
    };
    const unsubscribe = deps.presenceBus.subscribe(caller.project, (c) => {
      if (c.agent?.id !== caller.agentId) return;
      deps.presence.requireKey(caller).catch((e: unknown) => {
        state.error = e;
        ac.abort();
      });
    });
    return state;
  }

  async function* servedFrames<S, E extends { seq: number }, F>(
    project: string,
    agent: AgentCaller | undefined,
    req: { afterCursor?: bigint },
    source: WatchSource<S, E>,
    frame: WatchFrames<S, E, F>,
    signal: AbortSignal,
  ) {
    const frames = watch({
      ...common,
      bus: source.bus,
      key: project,
      afterCursor: afterCursor(req.afterCursor),
      snapshot: () => source.snapshot(project),
      read: (after, limit) => source.read(project, after, limit),
      signal,
      ...(source.agentsActive && agent && { onKeepAlive: async () => void (await deps.presence.recordActivity(agent)) }),
    });
    for await (const f of frames) {
      if (f.kind === "snapshot") {
        yield frame.snapshot(f.snapshot, BigInt(f.cursor), timestampFromMs(deps.clock.now()));
      } else if (f.kind === "change") {
        const out = frame.change(f.change);
        if (Array.isArray(out)) yield* out;
        else yield out;
      } else {
        yield keepAliveFrame(f);
      }
    }
  }

  const handlers = {
    watchPresence: (req: { project: string; afterCursor?: bigint }, ctx: HandlerContext, signal?: AbortSignal) =>
      served(
        ctx,
        req,
        { bus: deps.presenceBus, snapshot: deps.presence.snapshot, read: deps.presence.changes, agentsActive: true },
        {
          snapshot: (s, cursor, at) =>
            create(WatchPresenceResponseSchema, {
              cursor,
              event: { case: "snapshot", value: { agents: s.agents.map(agentToProto), runtimes: s.runtimes.map(runtimeToProto), at } },
            }),
          change: presenceFrames,
        },
        signal,
      ),

    watchLeases: (req: { project: string; afterCursor?: bigint }, ctx: HandlerContext, signal?: AbortSignal) =>
      served(
        ctx,
        req,
        { bus: deps.leaseBus, snapshot: deps.leases.snapshot, read: deps.leases.changes, agentsActive: true },
        {
          snapshot: (s, cursor, at) =>
            create(WatchLeasesResponseSchema, { cursor, event: { case: "snapshot", value: { leases: s.map(leaseToProto), at } } }),
          change: leaseFrame,
        },
        signal,
      ),

    watchOpenMessages: (req: { project: string; afterCursor?: bigint }, ctx: HandlerContext, signal?: AbortSignal) =>
      served(
        ctx,
        req,
        { bus: deps.messageBus, snapshot: deps.operator.openMessages, read: deps.operator.messageChanges },
        {
          snapshot: (s, cursor, at) =>
            create(WatchOpenMessagesResponseSchema, {
              cursor,
              event: { case: "snapshot", value: { messages: s.messages.map(openMessageToProto), total: s.total, at } },
            }),
          change: messageFrame,
        },
        signal,
      ),

    watchRuns: (req: { project: string; afterCursor?: bigint }, ctx: HandlerContext, signal?: AbortSignal) =>
      served(
        ctx,
        req,
        { bus: deps.runBus, snapshot: deps.operator.runs, read: deps.operator.runChanges },
        {
          snapshot: (s, cursor, at) =>
            create(WatchRunsResponseSchema, { cursor, event: { case: "snapshot", value: { homeRuntimes: s.map(homeRuntimeToProto), at } } }),
          change: runFrame,
        },
        signal,
      ),

    /** The four views of one project on one stream, each frame wrapped in its view's case. */
    watchProject(
      req: { project: string; presenceAfterCursor?: bigint; leasesAfterCursor?: bigint; messagesAfterCursor?: bigint; runsAfterCursor?: bigint },
      ctx: HandlerContext,
    ) {
      const stop = new AbortController();
      const signal = AbortSignal.any([ctx.signal, stop.signal]);
      const as = <C extends "presence" | "leases" | "messages" | "runs", F>(view: C, frames: AsyncIterable<F>) =>
        (async function* () {
          for await (const value of frames) yield { event: { case: view, value } } as MessageInitShape<typeof WatchProjectResponseSchema>;
        })();
      const at = (afterCursor: bigint | undefined) => ({ project: req.project, ...(afterCursor !== undefined && { afterCursor }) });
      return merge<MessageInitShape<typeof WatchProjectResponseSchema>>(
        [
          as("presence", handlers.watchPresence(at(req.presenceAfterCursor), ctx, signal)),
          as("leases", handlers.watchLeases(at(req.leasesAfterCursor), ctx, signal)),
          as("messages", handlers.watchOpenMessages(at(req.messagesAfterCursor), ctx, signal)),
          as("runs", handlers.watchRuns(at(req.runsAfterCursor), ctx, signal)),
        ],
        stop,
      );
    },

    async *watchProjects(_req: unknown, ctx: HandlerContext) {
      for await (const f of deps.operator.watchProjects({ keepAliveMs: deps.keepAliveMs, signal: ctx.signal })) {
        yield f.kind === "projects"
          ? { event: { case: "projects" as const, value: { projects: f.projects } } }
          : { event: { case: "keepAlive" as const, value: { at: timestampFromMs(f.atMs) } } };
      }
    },
  };
  return handlers;
}

export type WatchHandlers = ReturnType<typeof createWatchHandlers>;
