import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { errors, errorTable, isHubError, type ConnectCodeName, type HubError } from "../../errors.js";
import type { Observer } from "../../observe.js";
import { StoreUnavailable } from "../../store/store.js";
import { ErrorInfoSchema } from "../../../gen/ts/google/rpc/error_details_pb.js";
import { LeaseSchema } from "../../../gen/ts/kxm/hub/v1/lease_pb.js";
import { kRequestId, kResponseHeaders } from "../../http/context.js";
import { requestIdOf } from "../../http/request-id.js";
import { HeaderBag, type HeaderView } from "../../http/header-bag.js";
import { leaseToProto } from "../convert.js";

export const errorDomain = "kxm-hub";

const connectCode: Record<ConnectCodeName, Code> = {
  invalid_argument: Code.InvalidArgument,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  permission_denied: Code.PermissionDenied,
  resource_exhausted: Code.ResourceExhausted,
  failed_precondition: Code.FailedPrecondition,
  aborted: Code.Aborted,
  out_of_range: Code.OutOfRange,
  unimplemented: Code.Unimplemented,
  internal: Code.Internal,
  unavailable: Code.Unavailable,
  unauthenticated: Code.Unauthenticated,
};

/** A HubError as RPC clients see it: the table's code plus ErrorInfo (and the lease, if any). */
export function toConnectError(e: HubError, headers?: Headers): ConnectError {
  const details: NonNullable<ConstructorParameters<typeof ConnectError>[3]> = [
    { desc: ErrorInfoSchema, value: { reason: e.code.toUpperCase(), domain: errorDomain, metadata: e.metadata } },
  ];
  if (e.lease) details.push({ desc: LeaseSchema, value: leaseToProto(e.lease) });
  const stackTraceLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0; // as HubError: a typed refusal carries no stack
  try {
    return new ConnectError(e.message, connectCode[errorTable[e.code].connect], headers, details, e);
  } finally {
    Error.stackTraceLimit = stackTraceLimit;
  }
}

/**
 * The error rule of every call: a HubError becomes its typed ConnectError; a store that is away
 * is store_unavailable; the end of a call (a ConnectError: deadline, shutdown, the client gone)
 * stays as connect raised it; anything else is `internal`, logged with its cause and never
 * sent. The call's extra headers (its request id, rate-limit headers) go on the refusal too.
 */
export function createErrorMapping(observer: Observer) {
  return function mapError(e: unknown, requestId: string, extraHeaders: HeaderView): ConnectError {
    let err: ConnectError;
    if (isHubError(e)) {
      if (e.code === "internal_error") observer.log("internal_error", { requestId, error: String(e.cause ?? e) });
      err = toConnectError(e);
    } else if (e instanceof StoreUnavailable) {
      // The database several hubs share is away: a retry is safe (nothing was answered).
      observer.log("store_unavailable", { requestId, error: String(e.message) });
      err = toConnectError(errors.storeUnavailable(e));
    } else if (e instanceof ConnectError) {
      // The end of a call (deadline, shutdown, the client gone): as connect raised it.
      err = e;
    } else {
      observer.log("internal_error", { requestId, error: e instanceof Error ? (e.stack ?? e.message) : String(e) });
      err = new ConnectError("internal server error", Code.Internal);
    }
    extraHeaders.forEach((v, k) => err.metadata.set(k, v));
    // The request_error line and the errors counter are the call's report (interceptors/observe.ts).
    return err;
  };
}

/** A call's request id (its well-formed `x-request-id`, else a new one) and the headers every answer of it carries. */
export function callIdentity(requestIdHeader: string | null): { requestId: string; extraHeaders: HeaderBag } {
  const requestId = requestIdOf(requestIdHeader);
  return { requestId, extraHeaders: new HeaderBag({ "x-request-id": requestId }) };
}

/**
 * The error rule (createErrorMapping) as an interceptor: gives every call a request id (response
 * header `x-request-id`) and maps every error once. Only the observe interceptor runs outside
 * it, so it sees the mapped outcome.
 */
export function createErrorInterceptor(observer: Observer): Interceptor {
  const map = createErrorMapping(observer);
  return (next) => async (req) => {
    const { requestId, extraHeaders } = callIdentity(req.header.get("x-request-id"));
    req.contextValues.set(kRequestId, requestId);
    req.contextValues.set(kResponseHeaders, extraHeaders);
    try {
      const res = await next(req);
      extraHeaders.forEach((v, k) => res.header.set(k, v));
      if (!res.stream) return res;
      const source = res.message;
      return {
        ...res,
        message: (async function* () {
          try {
            yield* source;
          } catch (e) {
            throw map(e, requestId, extraHeaders);
          }
          // @NOTE decisions D47, D48: a stream that ends because its deadline passed, or because the
          // hub is shutting down (unavailable: reconnect, to another replica if there is one),
          // says so instead of ending as if it were complete.
          const reason: unknown = req.signal.reason;
          if (reason instanceof ConnectError && (reason.code === Code.DeadlineExceeded || reason.code === Code.Unavailable)) {
            throw map(reason, requestId, extraHeaders);
          }
        })(),
      };
    } catch (e) {
      throw map(e, requestId, extraHeaders);
    }
  };
}
