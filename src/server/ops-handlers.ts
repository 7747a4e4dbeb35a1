import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { OperatorView } from "../operator/snapshot.js";
import type { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { RuntimePresenceState } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { agentToProto, deliveryToProto, leaseToProto, statusToProto } from "./convert.js";

const runtimePresence = {
  online: RuntimePresenceState.ONLINE,
  expired: RuntimePresenceState.EXPIRED,
  unknown: RuntimePresenceState.UNKNOWN,
} as const;

/** OpsService: the operator snapshot and the list of projects. */
export function opsHandlers(operator: OperatorView): ServiceImpl<typeof OpsService> {
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
        openMessages: s.openMessages.map((m) => ({
          id: m.id,
          status: statusToProto[m.status],
          fromName: m.fromName,
          toName: m.toName,
          delivery: deliveryToProto[m.delivery],
          createdAt: timestampFromMs(m.createdAtMs),
          correlationId: m.correlationId,
        })),
        openMessageTotal: s.openMessageTotal,
        homeRuntimes: s.homeRuntimes.map((h) => ({
          runtimeId: h.runtimeId,
          host: h.host,
          heartbeatAt: h.heartbeatAtMs === undefined ? undefined : timestampFromMs(h.heartbeatAtMs),
          leaseExpiresAt: h.leaseExpiresAtMs === undefined ? undefined : timestampFromMs(h.leaseExpiresAtMs),
          presence: runtimePresence[h.presence],
          orphaned: h.orphaned,
          runs: h.runs.map((r) => ({ ...r, lastSequence: BigInt(r.lastSequence) })),
          runTotal: h.runTotal,
        })),
        leases: s.leases.map(leaseToProto),
      };
    },
  };
}
