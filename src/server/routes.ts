import type { ConnectRouter } from "@connectrpc/connect";
import type { Leases } from "../lease/leases.js";
import type { Presence } from "../presence/presence.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { leaseHandlers } from "./lease-handlers.js";
import { presenceHandlers } from "./presence-handlers.js";

export interface Domains {
  presence: Presence;
  leases: Leases;
}

/** The services this hub serves. The REST face derives its routes from the same list. */
export const servedServices = [PresenceService, LeaseService];

export function routes(domains: Domains) {
  return (router: ConnectRouter) => {
    router.service(PresenceService, presenceHandlers(domains.presence));
    router.service(LeaseService, leaseHandlers(domains.leases));
  };
}
