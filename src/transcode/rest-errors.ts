import { create, type JsonObject } from "@bufbuild/protobuf";
import type { ConnectError } from "@connectrpc/connect";
import { errorTable, isHubError, type HubCode, type HubError } from "../errors.js";
import { leaseToProto } from "../server/convert.js";
import { ErrorInfoSchema } from "../../gen/ts/google/rpc/error_details_pb.js";
import { LeaseSchema } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { toRestJson } from "./rest-json.js";

/** What the REST face answers for a refusal: the reference's status and body. */
export interface RestError {
  status: number;
  body: JsonObject;
  headers: Record<string, string>;
}

/**
 * A refusal as the REST face writes it, from the ErrorInfo the RPC face attached:
 * `{error, code, requestId, ...extras}` with the status of errors.ts. An error without
 * ErrorInfo (a protocol-level failure of the in-process call) is internal_error.
 */
export function restErrorFromConnect(err: ConnectError, requestId: string): RestError {
  // The RPC face's own mapping keeps the HubError as the cause: read it as is, sparing the
  // ErrorInfo and Lease details a round trip through protobuf messages. Same body either way.
  if (isHubError(err.cause)) return restErrorOfTyped(err.cause, requestId);
  const info = err.findDetails(ErrorInfoSchema)[0];
  const code = (info?.reason.toLowerCase() ?? "internal_error") as HubCode;
  const row = errorTable[code] ?? errorTable.internal_error;
  const body: JsonObject = {
    error: info ? err.rawMessage : "internal server error",
    code: info ? code : "internal_error",
    requestId,
  };
  for (const key of ("restExtras" in row ? row.restExtras : []) as readonly string[]) {
    const v = info?.metadata[key];
    if (v !== undefined) body[key] = v;
  }
  const lease = err.findDetails(LeaseSchema)[0];
  if (lease) body.lease = toRestJson(LeaseSchema, lease);
  const headers: Record<string, string> = {};
  const retryAfterMs = info?.metadata.retryAfterMs;
  if (code === "rate_limited" && retryAfterMs) headers["retry-after"] = String(Math.ceil(Number(retryAfterMs) / 1_000));
  return { status: info ? row.rest : 500, body, headers };
}

/** A typed refusal with everything the RPC face attaches: the row's extras, the lease, retry-after. */
function restErrorOfTyped(e: HubError, requestId: string): RestError {
  const row = errorTable[e.code];
  const body: JsonObject = { error: e.message, code: e.code, requestId };
  for (const key of ("restExtras" in row ? row.restExtras : []) as readonly string[]) {
    const v = e.metadata[key];
    if (v !== undefined) body[key] = v;
  }
  if (e.lease) body.lease = toRestJson(LeaseSchema, create(LeaseSchema, leaseToProto(e.lease)));
  const headers: Record<string, string> = {};
  const retryAfterMs = e.metadata.retryAfterMs;
  if (e.code === "rate_limited" && retryAfterMs) headers["retry-after"] = String(Math.ceil(Number(retryAfterMs) / 1_000));
  return { status: row.rest, body, headers };
}

/** A refusal made by the REST face itself (before any RPC runs), mapped as the RPC face's are. */
export const restErrorFromHub = restErrorOfTyped;
