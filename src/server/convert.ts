import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { LeaseView } from "../errors.js";
import type { AgentView, RuntimeView } from "../presence/presence.js";
import { type Lease, LeaseSchema } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import {
  type Agent,
  AgentSchema,
  PresenceState,
  type RuntimePresence,
  RuntimePresenceSchema,
  RuntimePresenceState,
} from "../../gen/ts/kxm/hub/v1/presence_pb.js";

/** Domain records -> protobuf messages. The only place that knows both shapes. */

export const leaseToProto = (l: LeaseView): Lease =>
  create(LeaseSchema, {
    resource: l.resource,
    project: l.project,
    name: l.name,
    holderAgentId: l.holderAgentId,
    holderAgentName: l.holderAgentName,
    fencingToken: BigInt(l.fencingToken),
    acquiredAt: timestampFromMs(l.acquiredAtMs),
    expiresAt: timestampFromMs(l.expiresAtMs),
  });

const presenceState = {
  online: PresenceState.ONLINE,
  stale: PresenceState.STALE,
  offline: PresenceState.OFFLINE,
} as const;

export const agentToProto = (a: AgentView): Agent =>
  create(AgentSchema, {
    id: a.id,
    name: a.name,
    purpose: a.purpose,
    project: a.project,
    model: a.model,
    host: a.host,
    connectedAt: timestampFromMs(a.connectedAtMs),
    lastSeenAt: timestampFromMs(a.lastSeenAtMs),
    online: a.online,
    presence: presenceState[a.presence],
    leaseExpiresAt: timestampFromMs(a.leaseExpiresAtMs),
  });

export const runtimeToProto = (r: RuntimeView): RuntimePresence =>
  create(RuntimePresenceSchema, {
    runtimeId: r.runtimeId,
    host: r.host,
    registeredAt: timestampFromMs(r.registeredAtMs),
    heartbeatAt: timestampFromMs(r.heartbeatAtMs),
    leaseExpiresAt: timestampFromMs(r.leaseExpiresAtMs),
    presence: r.presence === "online" ? RuntimePresenceState.ONLINE : RuntimePresenceState.EXPIRED,
  });
