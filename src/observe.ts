/**
 * What domain code reports: log events with the reference hub's names, and counters. The ops
 * layer implements it (pino, prom-client); domain code never imports either.
 */
export type CounterName =
  | "requests"
  | "errors"
  | "registrations"
  | "leasesGranted"
  | "leasesRenewed"
  | "leasesRefused"
  | "leasesReleased"
  | "runtimeHeartbeats"
  | "messagesSent"
  | "messagesReplied"
  | "messagesCancelled"
  | "messagesExpired"
  | "messagesPurged"
  | "syncAccepted"
  | "syncDuplicate"
  | "syncRefused"
  | "syncConflicts";

/**
 * Which part of the port answered a request: `rpc` (Connect, gRPC, gRPC-Web on an RPC path),
 * `rest` (the `/v1/...` face, unmatched paths included), or `http` (refused before either face
 * took it: a request target that is no path, CONNECT, a parser refusal, an ops route refusal), or
 * `mcp` (a tool call, or the registration of an MCP session's agent, at `/mcp`).
 */
export type Face = "rpc" | "rest" | "http" | "mcp";

/** One finished request, reported exactly once by the face that answered it. */
export interface CallReport {
  face: Face;
  /** The RPC service ("kxm.hub.v1.LeaseService"), or "" when the request named no method. */
  service: string;
  /** The RPC method ("AcquireLease"), or "" when the request named no method. */
  method: string;
  /** The RPC path, the REST rule ("POST /v1/leases/{name}/acquire"), or "" when none matched. */
  route: string;
  /** The request path when no route matched (for the log; cut to 200 characters). */
  path?: string;
  /** The Connect code in snake_case ("aborted", "deadline_exceeded"), or "ok". */
  code: string;
  /** The hub's error code (errors.ts, e.g. "lease_held") when the refusal has one. */
  reason?: string;
  /** The HTTP status written (REST and http faces). */
  statusCode?: number;
  requestId: string;
  /** Who called: "agent:<id>", "project:<name>", "admin", "public", or "unauthenticated". Never a secret. */
  caller: string;
  durationMs: number;
}

/** A server stream, by method: "subscribe", "watch_presence", "watch_leases". */
export type StreamKind = string;

export interface Observer {
  log(event: string, fields: Record<string, unknown>): void;
  count(counter: CounterName, by?: number): void;
}

/** What the faces (server/, transcode/) report besides: finished requests and open streams. */
export interface FaceObserver extends Observer {
  /** A request is done (answered, refused, or its stream ended). */
  call(report: CallReport): void;
  /** A server stream opened (+1) or closed (-1). */
  stream(kind: StreamKind, delta: 1 | -1): void;
}
