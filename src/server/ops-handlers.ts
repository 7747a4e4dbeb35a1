import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { OperatorView } from "../operator/snapshot.js";
import type { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { agentToProto, homeRuntimeToProto, leaseToProto, openMessageToProto } from "./convert.js";
import { openMessageView } from "../peer/rules.js";
import type { WatchHandlers } from "./watch-handlers.js";

/** OpsService: the operator snapshot, the list of projects, and their live forms (watch-handlers.ts). */
export function opsHandlers(operator: OperatorView, watches: WatchHandlers): ServiceImpl<typeof OpsService> {
  return {
    async listProjects() {
      return { projects: await operator.listProjects() };
    },
    async getSnapshot(req) {
      const s = await operator.snapshot(req);
      return {
        project: s.project,
        fetchedAt: timestampFromMs(s.fetchedAtMs),
        agents: s.agents.map(agentToProto),
        openMessages: s.openMessages.map((m) => openMessageToProto(openMessageView(m, s.fetchedAtMs))),
        openMessageTotal: s.openMessageTotal,
        homeRuntimes: s.homeRuntimes.map(homeRuntimeToProto),
        leases: s.leases.map(leaseToProto),
      };
    },
    watchProjects: (req, ctx) => watches.watchProjects(req, ctx),
    watchOpenMessages: (req, ctx) => watches.watchOpenMessages(req, ctx),
    watchRuns: (req, ctx) => watches.watchRuns(req, ctx),
    watchProject: (req, ctx) => watches.watchProject(req, ctx),
  };
}
