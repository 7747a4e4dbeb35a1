import type { ConnectRouter } from "@connectrpc/connect";
import type { Leases } from "../lease/leases.js";
import type { InboxStreams } from "../peer/inbox-stream.js";
import type { Messages } from "../peer/messages.js";
import type { Presence } from "../presence/presence.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { leaseHandlers } from "./lease-handlers.js";
import { peerHandlers } from "./peer-handlers.js";
import { presenceHandlers } from "./presence-handlers.js";
import type { WatchHandlers } from "./watch-handlers.js";

export interface Domains {
  presence: Presence;
  leases: Leases;
  messages: Messages;
  openInbox: InboxStreams;
  watches: WatchHandlers;
}

/** The services this hub serves. The REST face derives its routes from the same list. */
export const servedServices = [PresenceService, LeaseService, PeerService];

export function routes(d: Domains) {
  return (router: ConnectRouter) => {
    router.service(PresenceService, presenceHandlers(d.presence, d.watches));
    router.service(LeaseService, leaseHandlers(d.leases, d.watches));
    router.service(PeerService, peerHandlers(d.messages, d.openInbox));
  };
}
