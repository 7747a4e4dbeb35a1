import type { HandlerContext } from "@connectrpc/connect";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { Clock } from "../clock.js";
import type { Bus } from "../events/bus.js";
import { watch, type WatchFrame } from "../events/watch.js";
import type { LeaseChange, Leases } from "../lease/leases.js";
import type { Presence, PresenceChange } from "../presence/presence.js";
import { create, type MessageShape } from "@bufbuild/protobuf";
import { LeaseEventKind, WatchLeasesResponseSchema } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import {
  OpenMessageChangeKind,
  WatchOpenMessagesResponseSchema,
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

/** The project a watcher sees: an agent's own; a token caller's named one. */
function watchedProject(ctx: HandlerContext, requested: string): { project: string; agentId?: string } {
  const caller = callerOf(ctx);
  if (caller.kind === "agent") return { project: caller.project, agentId: caller.agentId };
  return { project: caller.kind === "project" ? caller.project : projectName("project", requested) };
}

const leaseKinds = {
  granted: LeaseEventKind.GRANTED,
  renewed: LeaseEventKind.RENEWED,
  released: LeaseEventKind.RELEASED,
  taken_over: LeaseEventKind.TAKEN_OVER,
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

  return {
    async *watchPresence(req: { project: string; afterCursor?: bigint }, ctx: HandlerContext) {
      const { project, agentId } = watchedProject(ctx, req.project);
      const frames = watch({
        ...common,
        bus: deps.presenceBus,
        key: project,
        afterCursor: afterCursor(req.afterCursor),
        snapshot: () => deps.presence.snapshot(project),
        read: (after, limit) => deps.presence.changes(project, after, limit),
        signal: ctx.signal,
        ...(agentId && { onKeepAlive: async () => void (await deps.presence.recordActivity(agentId)) }),
      });
      for await (const f of frames) {
        const cursor = BigInt(f.cursor);
        if (f.kind === "snapshot") {
          yield {
            cursor,
            event: {
              case: "snapshot" as const,
              value: {
                agents: f.snapshot.agents.map(agentToProto),
                runtimes: f.snapshot.runtimes.map(runtimeToProto),
                at: timestampFromMs(deps.clock.now()),
              },
            },
          };
        } else if (f.kind === "change") {
          yield* presenceFrames(f.change);
        } else {
          yield keepAliveFrame(f);
        }
      }
    },

    async *watchLeases(req: { project: string; afterCursor?: bigint }, ctx: HandlerContext) {
      const { project, agentId } = watchedProject(ctx, req.project);
      const frames = watch({
        ...common,
        bus: deps.leaseBus,
        key: project,
        afterCursor: afterCursor(req.afterCursor),
        snapshot: () => deps.leases.snapshot(project),
        read: (after, limit) => deps.leases.changes(project, after, limit),
        signal: ctx.signal,
        ...(agentId && { onKeepAlive: async () => void (await deps.presence.recordActivity(agentId)) }),
      });
      for await (const f of frames) {
        const cursor = BigInt(f.cursor);
        if (f.kind === "snapshot") {
          yield {
            cursor,
            event: { case: "snapshot" as const, value: { leases: f.snapshot.map(leaseToProto), at: timestampFromMs(deps.clock.now()) } },
          };
        } else if (f.kind === "change") {
          yield leaseFrame(f.change);
        } else {
          yield keepAliveFrame(f);
        }
      }
    },

    async *watchOpenMessages(req: { project: string; afterCursor?: bigint }, ctx: HandlerContext) {
      const { project } = watchedProject(ctx, req.project);
      const frames = watch({
        ...common,
        bus: deps.messageBus,
        key: project,
        afterCursor: afterCursor(req.afterCursor),
        snapshot: () => deps.operator.openMessages(project),
        read: (after, limit) => deps.operator.messageChanges(project, after, limit),
        signal: ctx.signal,
      });
      for await (const f of frames) {
        if (f.kind === "snapshot") {
          yield {
            cursor: BigInt(f.cursor),
            event: {
              case: "snapshot" as const,
              value: {
                messages: f.snapshot.messages.map(openMessageToProto),
                total: f.snapshot.total,
                at: timestampFromMs(deps.clock.now()),
              },
            },
          };
        } else if (f.kind === "change") {
          yield messageFrame(f.change);
        } else {
          yield keepAliveFrame(f);
        }
      }
    },

    async *watchRuns(req: { project: string; afterCursor?: bigint }, ctx: HandlerContext) {
      const { project } = watchedProject(ctx, req.project);
      const frames = watch({
        ...common,
        bus: deps.runBus,
        key: project,
        afterCursor: afterCursor(req.afterCursor),
        snapshot: () => deps.operator.runs(project),
        read: (after, limit) => deps.operator.runChanges(project, after, limit),
        signal: ctx.signal,
      });
      for await (const f of frames) {
        if (f.kind === "snapshot") {
          yield {
            cursor: BigInt(f.cursor),
            event: {
              case: "snapshot" as const,
              value: { homeRuntimes: f.snapshot.map(homeRuntimeToProto), at: timestampFromMs(deps.clock.now()) },
            },
          };
        } else if (f.kind === "change") {
          yield runFrame(f.change);
        } else {
          yield keepAliveFrame(f);
        }
      }
    },

    async *watchProjects(_req: unknown, ctx: HandlerContext) {
      for await (const f of deps.operator.watchProjects({ keepAliveMs: deps.keepAliveMs, signal: ctx.signal })) {
        yield f.kind === "projects"
          ? { event: { case: "projects" as const, value: { projects: f.projects } } }
          : { event: { case: "keepAlive" as const, value: { at: timestampFromMs(f.atMs) } } };
      }
    },
  };
}

export type WatchHandlers = ReturnType<typeof createWatchHandlers>;
