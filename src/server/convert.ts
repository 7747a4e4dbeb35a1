import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { HomeRuntime, HomeRuntimeRun } from "../operator/snapshot.js";
import type { MessageChangeBody } from "../peer/rules.js";
import type { AgentView, RuntimeView } from "../presence/presence.js";
import {
  Delivery,
  type Message,
  MessageBox,
  MessageSchema,
  MessageStatus,
} from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { type Lease, LeaseSchema } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import {
  type HomeRuntime as HomeRuntimeProto,
  type HomeRuntimeRun as HomeRuntimeRunProto,
  HomeRuntimeRunSchema,
  HomeRuntimeSchema,
  type OpenMessage,
  OpenMessageSchema,
} from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import {
  type Agent,
  AgentSchema,
  PresenceState,
  type RuntimePresence,
  RuntimePresenceSchema,
  RuntimePresenceState,
} from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { Delivery as DomainDelivery, LeaseView, MessageRow, MessageStatus as DomainStatus } from "../domain.js";

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
    waiters: (l.waiters ?? []).map((w) => ({
      agentId: w.agentId,
      agentName: w.agentName,
      since: timestampFromMs(w.sinceMs),
      waitUntil: timestampFromMs(w.deadlineMs),
    })),
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

export const deliveryToProto: Record<DomainDelivery, Delivery> = {
  followUp: Delivery.FOLLOW_UP,
  steer: Delivery.STEER,
  nextTurn: Delivery.NEXT_TURN,
};

/**
 * Unset (UNSPECIFIED) is undefined, the default. A number the schema does not know is passed on
 * as its digits, for the domain's validation to refuse in its place in the order.
 */
export const deliveryFromProto = (d: Delivery): string | undefined =>
  d === Delivery.UNSPECIFIED
    ? undefined
    : ((Object.entries(deliveryToProto) as [DomainDelivery, Delivery][]).find(([, v]) => v === d)?.[0] ?? String(d));

export const statusToProto: Record<DomainStatus, MessageStatus> = {
  queued: MessageStatus.QUEUED,
  delivered: MessageStatus.DELIVERED,
  replied: MessageStatus.REPLIED,
  cancelled: MessageStatus.CANCELLED,
  expired: MessageStatus.EXPIRED,
  error: MessageStatus.ERROR,
};

export const statusFromProto = (s: MessageStatus): DomainStatus | undefined =>
  (Object.entries(statusToProto) as [DomainStatus, MessageStatus][]).find(([, v]) => v === s)?.[0];

export const boxFromProto = (b: MessageBox): "inbox" | "outbox" => (b === MessageBox.OUTBOX ? "outbox" : "inbox");

export const messageToProto = (m: MessageRow): Message =>
  create(MessageSchema, {
    id: m.id,
    project: m.project,
    fromAgentId: m.fromId,
    fromName: m.fromName,
    toAgentId: m.toId,
    toName: m.toName,
    content: m.content,
    delivery: deliveryToProto[m.delivery],
    hops: m.hops,
    maxHops: m.maxHops,
    seq: BigInt(m.seq),
    correlationId: m.correlationId,
    replyTo: m.replyTo,
    idempotencyKey: m.idempotencyKey,
    createdAt: timestampFromMs(m.createdAtMs),
    expiresAt: timestampFromMs(m.expiresAtMs),
    deliveredAt: m.deliveredAtMs === undefined ? undefined : timestampFromMs(m.deliveredAtMs),
    repliedAt: m.repliedAtMs === undefined ? undefined : timestampFromMs(m.repliedAtMs),
    cancelledAt: m.cancelledAtMs === undefined ? undefined : timestampFromMs(m.cancelledAtMs),
    status: statusToProto[m.status],
    reply: m.reply && { content: m.reply.content, createdAt: timestampFromMs(m.reply.createdAtMs) },
    error: m.error,
  });

const runtimePresence = {
  online: RuntimePresenceState.ONLINE,
  expired: RuntimePresenceState.EXPIRED,
  unknown: RuntimePresenceState.UNKNOWN,
} as const;

const optionalTimestamp = (ms: number | undefined) => (ms === undefined ? undefined : timestampFromMs(ms));

/** A run under its home runtime, as the operator views send it. */
export const homeRuntimeRunToProto = (r: HomeRuntimeRun): HomeRuntimeRunProto =>
  create(HomeRuntimeRunSchema, { ...r, lastSequence: BigInt(r.lastSequence) });

export const homeRuntimeToProto = (h: HomeRuntime): HomeRuntimeProto =>
  create(HomeRuntimeSchema, {
    runtimeId: h.runtimeId,
    host: h.host,
    heartbeatAt: optionalTimestamp(h.heartbeatAtMs),
    leaseExpiresAt: optionalTimestamp(h.leaseExpiresAtMs),
    presence: runtimePresence[h.presence],
    orphaned: h.orphaned,
    runs: h.runs.map(homeRuntimeRunToProto),
    runTotal: h.runTotal,
  });

/** An open (or just ended) message without its content. */
export const openMessageToProto = (m: MessageChangeBody): OpenMessage =>
  create(OpenMessageSchema, {
    id: m.id,
    status: statusToProto[m.status],
    fromName: m.fromName,
    toName: m.toName,
    delivery: deliveryToProto[m.delivery],
    createdAt: timestampFromMs(m.createdAtMs),
    expiresAt: timestampFromMs(m.expiresAtMs),
    deliveredAt: optionalTimestamp(m.deliveredAtMs),
    endedAt: optionalTimestamp(m.endedAtMs),
    correlationId: m.correlationId,
  });
