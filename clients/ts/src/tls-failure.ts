import net from "node:net";
import tls from "node:tls";

/** The X.509 verification results OpenSSL reports by name (Node's `err.code` for them). */
const verifyCodes = new Set([
  "UNABLE_TO_GET_ISSUER_CERT", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY", "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_DECRYPT_CERT_SIGNATURE", "UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY", "CERT_SIGNATURE_FAILURE",
  "CERT_NOT_YET_VALID", "CERT_HAS_EXPIRED", "ERROR_IN_CERT_NOT_BEFORE_FIELD", "ERROR_IN_CERT_NOT_AFTER_FIELD",
  "DEPTH_ZERO_SELF_SIGNED_CERT", "SELF_SIGNED_CERT_IN_CHAIN", "CERT_CHAIN_TOO_LONG", "CERT_REVOKED",
  "INVALID_CA", "PATH_LENGTH_EXCEEDED", "INVALID_PURPOSE", "CERT_UNTRUSTED", "CERT_REJECTED", "HOSTNAME_MISMATCH",
]);

/** A TLS failure: Node's code for it and its reason in words. */
export interface TlsFailure {
  /** e.g. `UNABLE_TO_VERIFY_LEAF_SIGNATURE`, `ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED`, `ERR_TLS_CERT_ALTNAME_INVALID`. */
  code: string;
  /** e.g. `unable to verify the first certificate`, `tlsv13 alert certificate required`. */
  reason: string;
}

/**
 * The TLS failure in an error's cause chain (a failed call, a failed fetch), if it is one: what
 * tells an untrusted hub certificate or a refused client certificate from a hub that is down.
 */
export function tlsFailure(e: unknown): TlsFailure | undefined {
  const seen = new Set<unknown>();
  for (let c = e; typeof c === "object" && c !== null && !seen.has(c); c = (c as { cause?: unknown }).cause) {
    seen.add(c);
    const code = (c as { code?: unknown }).code;
    const message = String((c as { message?: unknown }).message ?? "");
    // OpenSSL's own lines: <id>:error:<code>:<library>:<function>:<reason>:<file>:<line>:...
    const openssl = /:error:[0-9A-Fa-f]+:[^:]*:[^:]*:([^:]+):/.exec(message)?.[1]?.trim();
    if (typeof code === "string" && (verifyCodes.has(code) || /^ERR_(SSL|TLS|OSSL)_/.test(code))) {
      return { code, reason: openssl ?? message.split("\n")[0]!.trim() };
    }
    // node:https reports some of OpenSSL's failures as EPROTO, the reason only in the message.
    if (code === "EPROTO" && openssl) return { code: `ERR_SSL_${openssl.toUpperCase().replace(/\W+/g, "_")}`, reason: openssl };
  }
  return undefined;
}

/**
 * One TLS handshake with an `https://` hub, then a wait for its first bytes: the TLS failure, if
 * any. What a session asks when its first call failed without a reason to act on: with TLS 1.3
 * the hub judges the client certificate after the client's side of the handshake is done, and a
 * hub with mutual TLS closes the connection of a certificate its client CA did not sign without
 * an alert, which a transport reports as a reset or a cancelled stream.
 */
export function handshakeFailure(url: string, options: tls.ConnectionOptions = {}): Promise<TlsFailure | undefined> {
  const u = new URL(url);
  if (u.protocol !== "https:") return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const host = u.hostname.replace(/^\[|\]$/g, "");
    const socket = tls.connect({
      ...options,
      host,
      port: Number(u.port || 443),
      // h2 first: a hub that took the handshake speaks at once (its SETTINGS).
      ALPNProtocols: ["h2", "http/1.1"],
      ...(net.isIP(host) === 0 && { servername: host }),
    });
    const done = (f: TlsFailure | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(f);
    };
    let secured = false;
    const timer = setTimeout(() => done(undefined), 5_000);
    socket.once("secureConnect", () => {
      secured = true;
      timer.refresh();
    });
    socket.once("data", () => done(undefined));
    // Before the handshake is done, only a TLS failure is one (a refused connection is not).
    socket.once("error", (e) => done(tlsFailure(e) ?? (secured ? closed(options) : undefined)));
    socket.once("close", () => done(secured ? closed(options) : undefined));
  });
}

/** A connection closed right after the handshake: what a hub with mutual TLS does to a certificate it refuses. */
const closed = (options: tls.ConnectionOptions): TlsFailure | undefined =>
  options.cert ? { code: "ECONNRESET", reason: "the hub closed the connection right after the TLS handshake: a hub with mutual TLS does so when its client CA did not sign the client certificate" } : undefined;
