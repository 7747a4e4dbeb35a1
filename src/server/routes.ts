import type { ConnectRouter } from "@connectrpc/connect";
import type { Leases } from "../lease/leases.js";
import type { InboxReader } from "../peer/inbox-read.js";
import type { InboxStreams } from "../peer/inbox-stream.js";
import type { Messages } from "../peer/messages.js";
import type { OperatorView } from "../operator/snapshot.js";
import type { Presence } from "../presence/presence.js";
import type { Sync } from "../sync/sync.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { SyncService } from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { ServerReflection } from "../../gen/ts/grpc/reflection/v1/reflection_pb.js";
import { leaseHandlers } from "./lease-handlers.js";
import { opsHandlers } from "./ops-handlers.js";
import { peerHandlers } from "./peer-handlers.js";
import { presenceHandlers } from "./presence-handlers.js";
import { reflectionHandlers } from "./reflection.js";
import { syncHandlers } from "./sync-handlers.js";
import type { WatchHandlers } from "./watch-handlers.js";
import type { ProjectTokens } from "../auth/project-tokens.js";
import type { Audit } from "../auth/audit.js";

export interface Domains {
  presence: Presence;
  leases: Leases;
  messages: Messages;
  openInbox: InboxStreams;
  readInbox: InboxReader;
  watches: WatchHandlers;
  sync: Sync;
  operator: OperatorView;
  tokens: ProjectTokens;
  audit: Audit;
}

/** The services this hub serves. The REST face derives its routes from the same list. */
export const servedServices = [PresenceService, LeaseService, PeerService, SyncService, OpsService];

export function routes(d: Domains) {
  return (router: ConnectRouter) => {
    router.service(PresenceService, presenceHandlers(d.presence, d.watches));
    router.service(LeaseService, leaseHandlers(d.leases, d.watches));
    router.service(PeerService, peerHandlers(d.messages, d.openInbox, d.readInbox));
    router.service(SyncService, syncHandlers(d.sync));
    router.service(OpsService, opsHandlers(d.operator, d.watches, d.leases, d.presence, d.tokens, d.audit));
    router.service(ServerReflection, reflectionHandlers(servedServices));
  };
}
