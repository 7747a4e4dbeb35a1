/**
 * Every refusal the hub makes, defined once. Domain code throws `HubError`s built by the
 * factories below; each face maps them once (server/interceptors/errors.ts for RPC,
 * transcode/rest-errors.ts for REST) using this table.
 */
import { isoOfMs } from "./clock.js";
import type { LeaseView } from "./domain.js";

/** Connect codes by name, kept free of the Connect import so domain code stays transport-free. */
export type ConnectCodeName =
  | "invalid_argument"
  | "not_found"
  | "already_exists"
  | "permission_denied"
  | "resource_exhausted"
  | "failed_precondition"
  | "aborted"
  | "out_of_range"
  | "unimplemented"
  | "internal"
  | "unavailable"
  | "unauthenticated";

interface Row {
  connect: ConnectCodeName;
  rest: number;
  /** ErrorInfo metadata keys the REST face also writes as top-level body fields. */
  restExtras?: readonly string[];
}

export const errorTable = {
  invalid_json: { connect: "invalid_argument", rest: 400 },
  protocol_error: { connect: "invalid_argument", rest: 400 },
  unsupported_media_type: { connect: "invalid_argument", rest: 415 },
  payload_too_large: { connect: "resource_exhausted", rest: 413 },
  route_not_found: { connect: "unimplemented", rest: 404 },
  internal_error: { connect: "internal", rest: 500 },
  invalid_auth: { connect: "unauthenticated", rest: 401, restExtras: ["operation", "nextAction"] },
  invalid_agent_identity: { connect: "unauthenticated", rest: 401, restExtras: ["operation", "nextAction"] },
  admin_auth_not_configured: { connect: "failed_precondition", rest: 503 },
  rate_limited: { connect: "resource_exhausted", rest: 429 },
  duplicate_agent_name: { connect: "already_exists", rest: 409 },
  invalid_runtime_id: { connect: "invalid_argument", rest: 400 },
  target_not_found: { connect: "not_found", rest: 404 },
  self_target: { connect: "invalid_argument", rest: 400 },
  hop_limit_reached: { connect: "failed_precondition", rest: 400 },
  idempotency_conflict: { connect: "already_exists", rest: 409 },
  message_not_found: { connect: "not_found", rest: 404 },
  message_forbidden: { connect: "permission_denied", rest: 403 },
  invalid_message_state: { connect: "failed_precondition", rest: 409 },
  duplicate_reply: { connect: "already_exists", rest: 409 },
  cursor_expired: { connect: "out_of_range", rest: 400 },
  lease_held: { connect: "aborted", rest: 409 },
  lease_superseded: { connect: "aborted", rest: 409 },
  lease_expired: { connect: "failed_precondition", rest: 409 },
  lease_not_found: { connect: "not_found", rest: 404 },
  lease_token_required: { connect: "invalid_argument", rest: 400 },
  invalid_sync_batch: { connect: "invalid_argument", rest: 400 },
  sync_batch_too_large: { connect: "invalid_argument", rest: 413 },
  subscriber_too_slow: { connect: "resource_exhausted", rest: 429 },
  hub_shutting_down: { connect: "unavailable", rest: 503 },
  store_unavailable: { connect: "unavailable", rest: 503 },
  token_scope_insufficient: { connect: "permission_denied", rest: 403 },
  origin_not_allowed: { connect: "permission_denied", rest: 403 },
  token_not_found: { connect: "not_found", rest: 404 },
  token_limit_reached: { connect: "failed_precondition", rest: 409 },
  lease_queue_full: { connect: "resource_exhausted", rest: 429 },
  too_many_streams: { connect: "resource_exhausted", rest: 429 },
} as const satisfies Record<string, Row>;

export type HubCode = keyof typeof errorTable;

export interface HubErrorInit {
  /** Facts for the caller: ErrorInfo metadata on RPC; REST extras where the table says. */
  metadata?: Record<string, string>;
  lease?: LeaseView;
  cause?: unknown;
}

export class HubError extends Error {
  readonly code: HubCode;
  readonly metadata: Record<string, string>;
  readonly lease: LeaseView | undefined;

  constructor(code: HubCode, message: string, init: HubErrorInit = {}) {
    // A refusal is an answer, not a fault: its stack says nothing (an internal error's cause keeps
    // its own), and capturing one was a visible share of what a refusal costs the hub.
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super(message, init.cause === undefined ? undefined : { cause: init.cause });
    } finally {
      Error.stackTraceLimit = stackTraceLimit;
    }
    this.name = "HubError";
    this.code = code;
    this.metadata = init.metadata ?? {};
    this.lease = init.lease;
  }
}

export const isHubError = (e: unknown): e is HubError => e instanceof HubError;

const leaseMeta = (lease: LeaseView) => ({
  resource: lease.resource,
  holderAgentId: lease.holderAgentId,
  holderAgentName: lease.holderAgentName,
  fencingToken: String(lease.fencingToken),
  expiresAt: isoOfMs(lease.expiresAtMs),
});

/** One factory per code; the argument types say what each refusal must carry. */
export const errors = {
  invalidJson: (message = "request body must be a JSON object") => new HubError("invalid_json", message),
  protocol: (message: string, field?: string) =>
    new HubError("protocol_error", message, { metadata: field ? { field } : {} }),
  unsupportedMediaType: () =>
    new HubError("unsupported_media_type", "content-type must be application/json"),
  payloadTooLarge: (maxBytes: number) =>
    new HubError("payload_too_large", `request body exceeds ${maxBytes} bytes`, {
      metadata: { maxBytes: String(maxBytes) },
    }),
  routeNotFound: () => new HubError("route_not_found", "route not found"),
  internal: (cause?: unknown) => new HubError("internal_error", "internal server error", { cause }),
  invalidAuth: () =>
    new HubError("invalid_auth", "invalid or missing bearer token", {
      metadata: { operation: "other", nextAction: "check_project_token" },
    }),
  invalidAgentIdentity: () =>
    new HubError("invalid_agent_identity", "invalid agent identity", {
      metadata: { operation: "other", nextAction: "reconnect_with_current_agent_key" },
    }),
  adminAuthNotConfigured: () =>
    new HubError("admin_auth_not_configured", "admin token is not configured on this hub"),
  rateLimited: (retryAfterMs: number) =>
    new HubError("rate_limited", "request rate limit exceeded", {
      metadata: { retryAfterMs: String(retryAfterMs) },
    }),
  duplicateAgentName: (name: string) =>
    new HubError("duplicate_agent_name", `agent name already active in project: ${name}`, {
      metadata: { name },
    }),
  invalidRuntimeId: () =>
    new HubError("invalid_runtime_id", "runtimeId must match ^[a-z][a-z0-9]{1,15}_[A-Za-z0-9][A-Za-z0-9_-]{5,127}$"),
  leaseQueueFull: (lease: LeaseView, maxWaiters: number) =>
    new HubError("lease_queue_full", `lease on ${lease.name} has ${maxWaiters} waiting calls, the most one lease queues; try again later`, {
      lease,
      metadata: { ...leaseMeta(lease), maxWaiters: String(maxWaiters) },
    }),
  tooManyStreams: (maxStreams: number) =>
    new HubError("too_many_streams", `${maxStreams} streams are open with these credentials already, the most they may hold; close one first`, {
      metadata: { maxStreams: String(maxStreams) },
    }),
  leaseHeld: (lease: LeaseView) =>
    new HubError(
      "lease_held",
      `lease on ${lease.name} is held by ${lease.holderAgentName} until ${isoOfMs(lease.expiresAtMs)}`,
      { lease, metadata: leaseMeta(lease) },
    ),
  leaseSuperseded: (name: string, lease: LeaseView) =>
    new HubError(
      "lease_superseded",
      `fencing token for ${name} was superseded; the hub is now at token ${lease.fencingToken}`,
      { lease, metadata: leaseMeta(lease) },
    ),
  leaseExpired: (lease: LeaseView) =>
    new HubError(
      "lease_expired",
      `lease on ${lease.name} expired at ${isoOfMs(lease.expiresAtMs)}; re-acquire to take it over`,
      { lease, metadata: leaseMeta(lease) },
    ),
  leaseNotFound: (name: string) =>
    new HubError("lease_not_found", `no lease is held on ${name}`, { metadata: { name } }),
  leaseTokenRequired: () => new HubError("lease_token_required", "fencingToken is required"),
  /** A browser page's request from an origin the hub neither lists nor is; on an open loopback hub, a request to a name not a loopback one (D67). */
  originNotAllowed: (why: string) => new HubError("origin_not_allowed", why),
  tokenScopeInsufficient: (scope: string, needed: string) =>
    new HubError("token_scope_insufficient", `this token's scope (${scope}) does not allow the call; it needs ${needed}`, {
      metadata: { scope, neededScope: needed },
    }),
  tokenNotFound: (tokenId: string) =>
    new HubError("token_not_found", `no such token in the project: ${tokenId}`, { metadata: { tokenId } }),
  tokenLimitReached: (project: string, max: number) =>
    new HubError("token_limit_reached", `project ${project} already has ${max} live tokens; revoke one first`, {
      metadata: { maxLiveTokens: String(max) },
    }),
  targetNotFound: (target: string) =>
    new HubError("target_not_found", `online target not found: ${target}`, { metadata: { target } }),
  selfTarget: () => new HubError("self_target", "an agent cannot message itself"),
  hopLimitReached: (hops: number, maxHops: number) =>
    new HubError("hop_limit_reached", `hop limit reached (${hops}/${maxHops})`, {
      metadata: { hops: String(hops), maxHops: String(maxHops) },
    }),
  idempotencyConflict: (key: string, messageId: string) =>
    new HubError("idempotency_conflict", "idempotency key was already used for a different message", {
      metadata: { idempotencyKey: key, messageId },
    }),
  messageNotFound: (id: string) => new HubError("message_not_found", `message not found: ${id}`, { metadata: { messageId: id } }),
  messageForbidden: (message: string, id: string) => new HubError("message_forbidden", message, { metadata: { messageId: id } }),
  invalidMessageState: (message: string, status: string) =>
    new HubError("invalid_message_state", message, { metadata: { status } }),
  duplicateReply: (id: string) => new HubError("duplicate_reply", "message was already replied", { metadata: { messageId: id } }),
  cursorExpired: (afterSeq: number, oldestSeq: number) =>
    new HubError("cursor_expired", `cursor ${afterSeq} is older than what the hub retains; resume from ${oldestSeq}`, {
      metadata: { afterSeq: String(afterSeq), oldestSeq: String(oldestSeq) },
    }),
  /**
   * An inbox cursor below what retention purged. Retention takes an inbox's ended messages, not
   * a prefix of it, so a message still pending may sit below `purgedThrough`: the way back is a
   * stream without a cursor (it sends the pending messages again), not `oldestSeq`, which would
   * skip them.
   */
  inboxCursorExpired: (afterSeq: number, purgedThrough: number) =>
    new HubError(
      "cursor_expired",
      `cursor ${afterSeq} is older than what the hub retains (events up to ${purgedThrough} were purged): open the inbox again without a cursor, which sends the messages still pending`,
      { metadata: { afterSeq: String(afterSeq), oldestSeq: String(purgedThrough), resume: "pending" } },
    ),
  /** A cursor ahead of its stream's head: not one this hub gave (a hub restored from a backup since). */
  cursorAhead: (afterSeq: number, headSeq: number) =>
    new HubError("cursor_expired", `cursor ${afterSeq} is ahead of what the hub has (${headSeq}); it is not one this hub gave: resume from ${headSeq}`, {
      metadata: { afterSeq: String(afterSeq), oldestSeq: String(headSeq) },
    }),
  invalidSyncBatch: () => new HubError("invalid_sync_batch", "events must be a list"),
  syncBatchTooLarge: (max: number) =>
    new HubError("sync_batch_too_large", `a sync batch holds at most ${max} events`, { metadata: { maxEvents: String(max) } }),
  subscriberTooSlow: (resumeAfterSeq: number) =>
    new HubError("subscriber_too_slow", "stream fell too far behind; resume from resumeAfterSeq", {
      metadata: { resumeAfterSeq: String(resumeAfterSeq) },
    }),
  /** The hub is stopping: retry, on another replica when there is one. */
  hubShuttingDown: () => new HubError("hub_shutting_down", "the hub is shutting down; retry (on another replica if there is one)"),
  /** The database several hubs share cannot be reached: nothing of the call was answered; retry. */
  storeUnavailable: (cause: unknown) =>
    new HubError("store_unavailable", "the hub's database cannot be reached; retry", { cause }),
};
