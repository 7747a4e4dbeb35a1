/**
 * kxm-hub's client library: a session (registration, heartbeats, credentials), leases kept
 * renewed with a loss signal, a resuming inbox and typed errors, over the generated Connect
 * clients (exported too, for everything else the hub serves).
 */
export { connect, Session, type SessionOptions } from "./session.js";
export { HeldLease, type AcquireOptions } from "./lease.js";
export { checkFence, type FenceCheck } from "./fence.js";
export { inboxEvents, type InboxEvent, type InboxOptions } from "./inbox.js";
export { awaitReply } from "./reply.js";
export { RunFactSync, type RunFact, type RunFactSyncOptions, type PushOutcome } from "./sync.js";
export { HubError } from "./errors.js";
export { nodeTlsOptions, type NodeTlsOptions, type TlsOptions } from "./tls.js";
export { handshakeFailure, tlsFailure, type TlsFailure } from "./tls-failure.js";
export { monotonicClock, type Clock } from "./clock.js";
export * from "./generated.js";
