import type { ServiceImpl } from "@connectrpc/connect";
import type { Leases } from "../lease/leases.js";
import type { FenceReason as DomainFenceReason } from "../lease/rules.js";
import { FenceReason, type LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { agentOf, readProjectOf } from "./caller.js";
import { leaseToProto } from "./convert.js";
import type { WatchHandlers } from "./watch-handlers.js";

const fenceReason: Record<DomainFenceReason, FenceReason> = {
  current: FenceReason.CURRENT,
  superseded: FenceReason.SUPERSEDED,
  expired: FenceReason.EXPIRED,
  released: FenceReason.RELEASED,
  unknown: FenceReason.UNKNOWN,
};

/** LeaseService over the lease domain: read the caller, call one domain function, map back. */
export function leaseHandlers(leases: Leases, watches: WatchHandlers): ServiceImpl<typeof LeaseService> {
  return {
    async acquireLease(req, ctx) {
      // A waiting acquire ends when its client goes away (ctx.signal).
      const r = await leases.acquire(agentOf(ctx), { name: req.name, ttlMs: req.ttlMs, waitMs: req.waitMs }, ctx.signal);
      return { lease: leaseToProto(r.lease), renewed: r.renewed, waitedMs: r.waitedMs };
    },
    async renewLease(req, ctx) {
      const r = await leases.renew(agentOf(ctx), req);
      return { lease: leaseToProto(r.lease), renewed: r.renewed };
    },
    async releaseLease(req, ctx) {
      const r = await leases.release(agentOf(ctx), req);
      return { released: r.released, lease: leaseToProto(r.lease) };
    },
    async getLease(req, ctx) {
      const r = await leases.get(readProjectOf(ctx), req);
      return { lease: leaseToProto(r.lease), expired: r.expired };
    },
    async checkFence(req, ctx) {
      const r = await leases.checkFence(readProjectOf(ctx), req);
      return { valid: r.valid, reason: fenceReason[r.reason], lease: r.lease && leaseToProto(r.lease) };
    },
    async listLeases(req, ctx) {
      const r = await leases.list(readProjectOf(ctx), req);
      return { leases: r.leases.map(leaseToProto), nextPageToken: r.nextPageToken };
    },
    watchLeases: watches.watchLeases,
  };
}
