import fs from "node:fs";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { HubError } from "./errors.js";

/**
 * TLS for an `https://` hub URL: the CA to trust and, for a hub with mutual TLS
 * (KXM_TLS_CLIENT_CA), the certificate and key this client presents. Each is PEM text (a string
 * holding `-----BEGIN`, or a Buffer) or the path of a PEM file. Without `ca` the system's CAs are
 * trusted (and NODE_EXTRA_CA_CERTS); with it, only `ca`.
 */
export interface TlsOptions {
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
}

/** What Node's `tls.connect` (and so connect-node's `nodeOptions`) takes. */
export interface NodeTlsOptions {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

function pem(field: keyof TlsOptions, v: string | Buffer): Buffer {
  if (typeof v !== "string") return v;
  if (v.includes("-----BEGIN")) return Buffer.from(v);
  try {
    return fs.readFileSync(v);
  } catch (e) {
    throw new HubError("invalid_tls_config", `cannot read tls.${field} ${v}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, { field, file: v });
  }
}

/**
 * The TLS options as Node takes them, files read (once, now). Throws HubError
 * `invalid_tls_config` naming the file that cannot be read, or a certificate without its key
 * (or the reverse). Undefined when there is nothing to set.
 */
export function nodeTlsOptions(o: TlsOptions | undefined): NodeTlsOptions | undefined {
  if (!o || (o.ca === undefined && o.cert === undefined && o.key === undefined)) return undefined;
  if ((o.cert === undefined) !== (o.key === undefined)) {
    throw new HubError("invalid_tls_config", `tls.${o.cert === undefined ? "key" : "cert"} needs tls.${o.cert === undefined ? "cert" : "key"}: a client certificate goes with its private key`);
  }
  const out: NodeTlsOptions = {};
  for (const field of ["ca", "cert", "key"] as const) {
    const v = o[field];
    if (v !== undefined) out[field] = pem(field, v);
  }
  return out;
}

/**
 * The library's own transport: Connect over HTTP/2 on one connection (its owner closes it), to
 * an `http://` hub (h2c) or an `https://` one (TLS with `tls`, HTTP/2 by ALPN). Reads the TLS
 * files now, so a file that cannot be read is refused before any call (invalid_tls_config).
 */
export function ownTransport(url: string, tls: TlsOptions | undefined): { connection: Http2SessionManager; make: (interceptors: Interceptor[]) => Transport } {
  const options = nodeTlsOptions(tls);
  // TLS options for a hub reached in clear would not be used, and the token and agent key would
  // travel unprotected while the caller thinks otherwise.
  if (options && new URL(url).protocol !== "https:") {
    throw new HubError("invalid_tls_config", `TLS options are given but the hub's URL ${new URL(url).origin} is not https://: use https://, or drop them`);
  }
  // Pings on the connection: one that went silent (a NAT's state dropped, a peer gone without a
  // reset) is noticed and replaced, where the kernel alone would keep it for many minutes.
  const connection = new Http2SessionManager(url, { pingIntervalMs: 10_000, pingTimeoutMs: 10_000 }, options);
  return { connection, make: (interceptors) => createConnectTransport({ baseUrl: url, httpVersion: "2", sessionManager: connection, interceptors }) };
}
