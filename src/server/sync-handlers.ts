import type { ServiceImpl } from "@connectrpc/connect";
import type { HandlerContext } from "@connectrpc/connect";
import { errors } from "../errors.js";
import type { SyncResult, Sync } from "../sync/sync.js";
import { SyncEventSchema } from "../../gen/ts/kxm/hub/v1/sync_event_pb.js";
import { SyncOutcome, type SyncService } from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { callerOf } from "./caller.js";
import { eventJson } from "./sync-convert.js";
import { unknownProperties } from "../wire/unknown-properties.js";

const outcomes = {
  accepted: SyncOutcome.ACCEPTED,
  duplicate: SyncOutcome.DUPLICATE,
  conflict: SyncOutcome.CONFLICT,
  rejected: SyncOutcome.REJECTED,
} as const;

/** The hub project the caller's token is for (the auth rule reads it from the request). */
function projectOf(ctx: HandlerContext): string {
  const caller = callerOf(ctx);
  if (caller.kind !== "project") throw errors.internal(new Error("sync method reached without a project caller"));
  return caller.project;
}

const resultToProto = (r: SyncResult) => ({
  projectId: r.projectId,
  runId: r.runId,
  sequence: r.sequence === undefined ? undefined : BigInt(r.sequence),
  outcome: outcomes[r.outcome],
  code: r.code,
});

const cursorToProto = (c: { projectId: string; runId: string; cursor: number }) => ({
  projectId: c.projectId,
  runId: c.runId,
  cursor: BigInt(c.cursor),
});

/** SyncService over the sync domain; events reach it in their wire-independent JSON form. */
export function syncHandlers(sync: Sync): ServiceImpl<typeof SyncService> {
  return {
    async pushEvents(req, ctx) {
      const r = await sync.push(projectOf(ctx), {
        runtimeId: req.runtimeId,
        // The REST face marks an `events` that was missing or not a list (rest-quirks.ts).
        events: unknownProperties(req).includes("events") ? undefined : req.events.map((e) => eventJson(SyncEventSchema, e)),
      });
      return { results: r.results.map(resultToProto), cursors: r.cursors.map(cursorToProto) };
    },
    async getCursor(req, ctx) {
      return { cursor: cursorToProto(await sync.cursor(projectOf(ctx), req)) };
    },
  };
}
