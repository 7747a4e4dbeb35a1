import { ConnectError, createContextKey } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import type { Caller } from "../caller.js";
import { errorTable, isHubError } from "../errors.js";
import type { Face, FaceObserver } from "../observe.js";
import { ErrorInfoSchema } from "../../gen/ts/google/rpc/error_details_pb.js";

/**
 * One request on its way through the port. The face that takes the request starts it, the
 * interceptors and the face fill it in (method, caller, outcome), and the face reports it once
 * when the answer is written, so every request is counted once whichever face it came by:
 * the REST face calls the RPC handlers in-process, and those calls are the REST face's.
 */
export interface CallRecord {
  face: Face;
  service: string;
  method: string;
  route: string;
  path?: string;
  /** performance.now() at the start. */
  startedAt: number;
  requestId?: string;
  caller?: Caller;
  /** The Connect code in snake_case, or "ok"; unset until an outcome is known. */
  code?: string;
  /** The hub's error code, when the refusal carries one. */
  reason?: string;
  reported: boolean;
}

/** The request's CallRecord, set by the face that took the request. */
export const kCall = createContextKey<CallRecord | undefined>(undefined, { description: "call record" });

/** The longest request path a record keeps (it is only logged). */
const maxPathChars = 200;

/**
 * Starts a record now.
 * @NOTE Durations are measured with the monotonic performance.now(), not the hub Clock: they
 * decide nothing, and the tests' fake clock would make every one zero.
 */
export function startCall(face: Face, at: { service?: string; method?: string; route?: string; path?: string } = {}): CallRecord {
  return {
    face,
    service: at.service ?? "",
    method: at.method ?? "",
    route: at.route ?? "",
    ...(at.path !== undefined && { path: at.path.slice(0, maxPathChars) }),
    startedAt: performance.now(),
    reported: false,
  };
}

/** Records how the call ended: "ok" without an error, else the error's code and hub reason. */
export function noteOutcome(call: CallRecord | undefined, error?: unknown): void {
  if (!call) return;
  if (error === undefined) {
    call.code = "ok";
    call.reason = undefined;
  } else if (isHubError(error)) {
    call.code = errorTable[error.code].connect;
    call.reason = error.code;
  } else if (error instanceof ConnectError) {
    call.code = codeToString(error.code);
    // A typed refusal carries its HubError as the cause (interceptors/errors.ts): its code is the
    // ErrorInfo's reason, read without decoding the detail again.
    call.reason =
      isHubError(error.cause) && errorTable[error.cause.code].connect === call.code
        ? error.cause.code
        : error.findDetails(ErrorInfoSchema)[0]?.reason.toLowerCase();
  } else {
    call.code = "internal";
    call.reason = "internal_error";
  }
}

/** Who called, for logs: ids and project names only, never a token or key. */
export function callerLabel(caller: Caller | undefined): string {
  if (!caller) return "unauthenticated";
  switch (caller.kind) {
    case "agent":
      return `agent:${caller.agentId}`;
    case "project":
      return `project:${caller.project}`;
    default:
      return caller.kind;
  }
}

/**
 * Reports the call once (later calls do nothing). A call whose outcome nobody noted is
 * "unknown"; `statusCode` is the HTTP status written, where the face has one.
 */
export function finishCall(observer: FaceObserver, call: CallRecord, end: { requestId?: string; statusCode?: number } = {}): void {
  if (call.reported) return;
  call.reported = true;
  observer.call({
    face: call.face,
    service: call.service,
    method: call.method,
    route: call.route,
    ...(call.path !== undefined && { path: call.path }),
    code: call.code ?? "unknown",
    ...(call.reason !== undefined && { reason: call.reason }),
    ...(end.statusCode !== undefined && { statusCode: end.statusCode }),
    requestId: call.requestId ?? end.requestId ?? "",
    caller: callerLabel(call.caller),
    durationMs: performance.now() - call.startedAt,
  });
}
