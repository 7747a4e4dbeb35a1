import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, LeaseSchema, type Lease } from "./generated.js";
import { tlsFailure, type TlsFailure } from "./tls-failure.js";

/**
 * A refusal from the hub, whatever the call: its code (`lease_held`, `cursor_expired`, …, the
 * hub's error table), the facts in its metadata, and the lease it concerns when there is one.
 * Anything that is not a hub refusal (the hub unreachable, a cancelled call) is a `HubError`
 * with `code` `unavailable`, `cancelled` or `unknown`, and `transient` says whether trying
 * again later may succeed. A failed TLS handshake (a hub certificate no trusted CA signed, a
 * client certificate the hub wants and did not get) is `tls_failed`, not transient, with Node's
 * code in `metadata.tlsCode`; a TLS option the library cannot use is `invalid_tls_config`.
 */
export class HubError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly metadata: Record<string, string> = {},
    readonly lease?: Lease,
    readonly transient = false,
    options?: { cause: unknown },
  ) {
    super(message, options);
    this.name = "HubError";
  }

  /** A failed TLS handshake: `tls_failed`, not transient, Node's code in `metadata.tlsCode`. */
  static tls(f: TlsFailure, cause: unknown): HubError {
    return new HubError("tls_failed", `TLS with the hub failed: ${f.code}: ${f.reason}`, { tlsCode: f.code }, undefined, false, { cause });
  }

  /**
   * The error of a failed call, typed. Given the call's `signal`, a call cancelled while that
   * signal was not aborted was cut from the other side (connect-node reports an HTTP/2 stream
   * the hub's end closed, as when the hub is killed under the call, as Canceled): the hub is
   * away, `unavailable` and transient, as a reset connection is.
   */
  static from(e: unknown, signal?: AbortSignal): HubError {
    if (e instanceof HubError) return e;
    const c = ConnectError.from(e);
    const info = c.findDetails(ErrorInfoSchema)[0];
    if (info && info.domain === "kxm-hub") {
      const code = info.reason.toLowerCase();
      // Over the rate or the stream's lag: later. A body over the limit fails the same way again.
      const transient = c.code === Code.Unavailable || (c.code === Code.ResourceExhausted && code !== "payload_too_large");
      return new HubError(code, c.rawMessage, { ...info.metadata }, c.findDetails(LeaseSchema)[0], transient, { cause: e });
    }
    const tls = tlsFailure(e);
    if (tls) return HubError.tls(tls, e);
    if (c.code === Code.Canceled && (signal === undefined || signal.aborted)) return new HubError("cancelled", c.rawMessage, {}, undefined, false, { cause: e });
    // No answer from the hub: it is away, or the connection broke under the call (a reset is
    // Aborted in connect-node, and comes when a hub is killed mid-call). Trying again may work.
    const transient = [Code.Unavailable, Code.DeadlineExceeded, Code.Unknown, Code.Internal, Code.Aborted, Code.Canceled].includes(c.code);
    return new HubError(transient ? "unavailable" : "unknown", c.rawMessage, {}, undefined, transient, { cause: e });
  }
}

const neverAborted = new AbortController().signal;

/**
 * The error of a call the library made for its caller, typed: `signal` is the caller's (none
 * given: undefined). A Canceled that signal does not explain was cut from the hub's side and is
 * `unavailable`, transient (see HubError.from), not the caller's `cancelled`. @internal
 */
export const callError = (e: unknown, signal: AbortSignal | undefined): HubError => HubError.from(e, signal ?? neverAborted);
