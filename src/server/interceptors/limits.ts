import type { Interceptor } from "@connectrpc/connect";
import { errors } from "../../errors.js";
import type { HeaderView } from "../../http/header-bag.js";

/**
 * Refuses a request whose declared content length is over `maxBytes` with payload_too_large
 * (and its ErrorInfo) before any handler runs. A request without a declared length (gRPC over
 * HTTP/2, streams) is held to the same limit by connect itself, which reads no message over
 * `readMaxBytes` (= maxBytes, after decompression too); wire/framework-errors.ts answers that refusal
 * as payload_too_large, so no message is encoded a second time here to measure it.
 */
export function createLimitsInterceptor(maxBytes: number): Interceptor {
  return (next) => async (req) => {
    checkDeclaredLength(req.header, maxBytes);
    return next(req);
  };
}

/** The limit rule: throws payload_too_large when the declared content length is over `maxBytes`. */
export function checkDeclaredLength(header: HeaderView, maxBytes: number): void {
  const declared = Number(header.get("content-length") ?? Number.NaN);
  if (Number.isFinite(declared) && declared > maxBytes) throw errors.payloadTooLarge(maxBytes);
}
