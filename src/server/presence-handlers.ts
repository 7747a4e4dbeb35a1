import type { ServiceImpl } from "@connectrpc/connect";
import type { Presence } from "../presence/presence.js";
import type { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { agentOf, readProjectOf } from "./caller.js";
import { agentToProto, runtimeToProto } from "./convert.js";
import type { WatchHandlers } from "./watch-handlers.js";

/** PresenceService over the presence domain. */
export function presenceHandlers(presence: Presence, watches: WatchHandlers): ServiceImpl<typeof PresenceService> {
  return {
    async registerAgent(req) {
      const r = await presence.register(req);
      return {
        agent: agentToProto(r.agent),
        agentKey: r.agentKey,
        resumed: r.resumed,
        takenOver: r.takenOver,
        releasedLeases: r.releasedLeases.map((l) => l.name),
      };
    },
    async heartbeat(_req, ctx) {
      return { agent: agentToProto(await presence.heartbeat(agentOf(ctx))) };
    },
    async unregisterAgent(_req, ctx) {
      await presence.unregister(agentOf(ctx));
      return {};
    },
    async listAgents(req, ctx) {
      const agents = await presence.list(readProjectOf(ctx), { includeOffline: req.includeOffline });
      return { agents: agents.map(agentToProto) };
    },
    async reportRuntimePresence(req, ctx) {
      const r = await presence.reportRuntime(req);
      // REST answers 201 on a runtime's first heartbeat (transcode/rest-status.ts reads this).
      if (r.first) ctx.responseHeader.set("x-kxm-created", "1");
      return { presence: runtimeToProto(r.presence) };
    },
    watchPresence: watches.watchPresence,
  };
}
