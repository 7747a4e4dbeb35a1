import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { OperatorView } from "../operator/snapshot.js";
import type { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { agentToProto, homeRuntimeToProto, leaseToProto, openMessageToProto } from "./convert.js";
import { openMessageView } from "../peer/rules.js";
import type { WatchHandlers } from "./watch-handlers.js";
import type { Leases } from "../lease/leases.js";
import type { Presence } from "../presence/presence.js";
import { operatorProjectOf } from "./caller.js";
import type { ProjectTokens } from "../auth/project-tokens.js";
import { securityHandlers } from "./security-handlers.js";
import type { Audit } from "../auth/audit.js";

/**
 * OpsService: the operator snapshot, the list of projects, their live forms (watch-handlers.ts),
 * the operator's hands (force-release a lease, evict an agent) and the project tokens
 * and the audit trail (security-handlers.ts).
 */
export function opsHandlers(
  operator: OperatorView,
  watches: WatchHandlers,
  leases: Leases,
  presence: Presence,
  tokens: ProjectTokens,
  audit: Audit,
): ServiceImpl<typeof OpsService> {
  return {
    ...securityHandlers(tokens, audit),
    async forceReleaseLease(req, ctx) {
      const r = await leases.forceRelease(operatorProjectOf(ctx, req.project), req);
      return { lease: leaseToProto(r.lease), next: r.next && leaseToProto(r.next) };
    },
    async evictAgent(req, ctx) {
      const r = await presence.evict(operatorProjectOf(ctx, req.project), req.agentId);
      return { agent: agentToProto(r.agent), releasedLeases: r.releasedLeases.map(leaseToProto) };
    },
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
