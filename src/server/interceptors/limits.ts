import { toBinary } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import { errors } from "../../errors.js";

/**
 * Refuses request messages over `maxBytes` with payload_too_large (and its ErrorInfo), by the
 * declared content length when there is one, else by the message's encoded size. Connect's own
 * `readMaxBytes` stays as a hard cap above this, for bodies too big to read at all.
 */
export function createLimitsInterceptor(maxBytes: number): Interceptor {
  return (next) => async (req) => {
    const declared = Number(req.header.get("content-length") ?? Number.NaN);
    const size = Number.isFinite(declared)
      ? declared
      : req.stream
        ? 0
        : toBinary(req.method.input, req.message).byteLength;
    if (size > maxBytes) throw errors.payloadTooLarge(maxBytes);
    return next(req);
  };
}
