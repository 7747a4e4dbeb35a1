import { createPrivateKey, X509Certificate, type KeyObject } from "node:crypto";
import fs from "node:fs";
import tls from "node:tls";
import { ConfigError, type HubConfig } from "../config.js";
import type { Observer } from "../observe.js";

/** The PEM files a TLS hub serves with, as configured. */
export interface TlsFiles {
  cert: string;
  key: string;
  /** Client certificates must be signed by a CA in this bundle (mutual TLS). */
  clientCa?: string;
}

/** The files' contents once checked, and the served certificate's public facts (for the log). */
export interface TlsMaterial {
  cert: Buffer;
  key: Buffer;
  ca?: Buffer;
  /** SHA-256 fingerprint of the served (leaf) certificate. */
  fingerprint256: string;
  /** When the served certificate expires, as OpenSSL prints it. */
  validTo: string;
}

const sameBytes = (a: Buffer | undefined, b: Buffer | undefined) => (a === undefined ? b === undefined : b !== undefined && a.equals(b));

/** A TLS handshake not finished this long after its first byte is dropped. */
export const handshakeTimeoutMs = 10_000;

/** The configured TLS files, or undefined for a plaintext hub (validateConfig checked the pairs). */
export function tlsFilesOf(c: Pick<HubConfig, "tlsCert" | "tlsKey" | "tlsClientCa">): TlsFiles | undefined {
  if (c.tlsCert === undefined || c.tlsKey === undefined) return undefined;
  return { cert: c.tlsCert, key: c.tlsKey, ...(c.tlsClientCa !== undefined && { clientCa: c.tlsClientCa }) };
}

const pemBlocks = (pem: string, label: string) =>
  pem.match(new RegExp(`-----BEGIN ${label}-----[\\s\\S]+?-----END ${label}-----`, "g")) ?? [];

function read(setting: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (e) {
    throw new ConfigError("invalid_config", `cannot read ${setting} ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/** Every certificate of a PEM bundle parsed; at least one. */
function certificates(setting: string, file: string, pem: Buffer): X509Certificate[] {
  const blocks = pemBlocks(pem.toString("latin1"), "CERTIFICATE");
  if (blocks.length === 0) throw new ConfigError("invalid_config", `${setting} ${file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  return blocks.map((b, i) => {
    try {
      return new X509Certificate(b);
    } catch (e) {
      throw new ConfigError("invalid_config", `${setting} ${file}: certificate ${i + 1} cannot be parsed (${(e as Error).message})`);
    }
  });
}

function privateKey(file: string, pem: Buffer): KeyObject {
  const text = pem.toString("latin1");
  if (text.includes("-----BEGIN ENCRYPTED PRIVATE KEY-----") || text.includes("Proc-Type: 4,ENCRYPTED")) {
    throw new ConfigError("invalid_config", `KXM_TLS_KEY ${file} holds no usable PEM private key: it is encrypted (a passphrase is not supported)`);
  }
  try {
    return createPrivateKey(pem);
  } catch (e) {
    // OpenSSL's reasons name no key material.
    throw new ConfigError("invalid_config", `KXM_TLS_KEY ${file} holds no usable PEM private key: ${(e as Error).message}`);
  }
}

/**
 * Reads the certificate, key and client CA files and checks them the way the TLS port will use
 * them: a certificate valid at `nowMs`, its own private key, a CA bundle of certificates, and a
 * secure context Node builds from them. Why: a bad file must refuse the start (or a reload) with
 * words naming the file, not fail every handshake later. Throws ConfigError invalid_config; its
 * message never holds key material. `nowMs` is the wall clock's, as every peer's TLS stack judges
 * the certificate on its own.
 */
export function loadTlsMaterial(files: TlsFiles, nowMs = Date.now()): TlsMaterial {
  const cert = read("KXM_TLS_CERT", files.cert);
  const key = read("KXM_TLS_KEY", files.key);
  const ca = files.clientCa === undefined ? undefined : read("KXM_TLS_CLIENT_CA", files.clientCa);
  const [leaf] = certificates("KXM_TLS_CERT", files.cert, cert);
  const pk = privateKey(files.key, key);
  if (!leaf!.checkPrivateKey(pk)) {
    throw new ConfigError("invalid_config", `KXM_TLS_KEY ${files.key} is not the private key of the certificate in KXM_TLS_CERT ${files.cert}`);
  }
  // Every client would refuse it in the handshake.
  if (Date.parse(leaf!.validTo) < nowMs) {
    throw new ConfigError("invalid_config", `KXM_TLS_CERT ${files.cert} expired (valid to ${leaf!.validTo})`);
  }
  if (Date.parse(leaf!.validFrom) > nowMs) {
    throw new ConfigError("invalid_config", `KXM_TLS_CERT ${files.cert} is not valid yet (valid from ${leaf!.validFrom})`);
  }
  // A bundle of leaves only (a client's own certificate, say) can verify no client: every
  // handshake would fail, which is the file's fault and is told now.
  if (ca && !certificates("KXM_TLS_CLIENT_CA", files.clientCa!, ca).some((c) => c.ca)) {
    throw new ConfigError("invalid_config", `KXM_TLS_CLIENT_CA ${files.clientCa} holds no CA certificate (basicConstraints CA:TRUE) to verify clients with`);
  }
  try {
    tls.createSecureContext(secureContextOptions({ cert, key, ca }));
  } catch (e) {
    const which = [files.cert, files.key, files.clientCa].filter(Boolean).join(", ");
    throw new ConfigError("invalid_config", `TLS files refused (${which}): ${(e as Error).message}`);
  }
  return { cert, key, ...(ca && { ca }), fingerprint256: leaf!.fingerprint256, validTo: leaf!.validTo };
}

/** What a secure context is built from: the pair, and the client CA when there is one. */
export function secureContextOptions(m: Pick<TlsMaterial, "cert" | "key" | "ca">): tls.SecureContextOptions {
  return { cert: m.cert, key: m.key, ...(m.ca && { ca: m.ca }) };
}

/**
 * The options of the port's tls.Server: HTTP/2 preferred over HTTP/1.1 by ALPN, a handshake
 * bounded in time, and with a client CA, a certificate it signed required of every client (the
 * handshake fails without one, and a certificate it did not sign ends the connection).
 */
export function tlsServerOptions(m: TlsMaterial): tls.TlsOptions {
  return {
    ...secureContextOptions(m),
    ALPNProtocols: ["h2", "http/1.1"],
    handshakeTimeout: handshakeTimeoutMs,
    ...(m.ca && { requestCert: true, rejectUnauthorized: true }),
  };
}

export interface TlsWatchOptions {
  files: TlsFiles;
  /** What the port serves now. */
  current: TlsMaterial;
  /** Polling interval of the files. */
  intervalMs: number;
  /** Serves new material to new connections (tls.Server.setSecureContext). */
  apply: (m: TlsMaterial) => void;
  observer: Observer;
}

/**
 * Polls the TLS files (fs.watchFile, so a renamed-over file or a swapped symlink counts too) and,
 * on a change, reads them all: when they make a valid context the port serves it to new
 * connections (open ones keep theirs) and logs `tls_reloaded`; when not — say the certificate is
 * written and its key not yet — the old context stays, `tls_reload_failed` says why, and the next
 * change tries again. Why: certificates are renewed often (ACME) and a restart would cut every
 * stream. Returns the function that stops watching.
 */
export function watchTlsFiles({ files, current, intervalMs, apply, observer }: TlsWatchOptions): () => void {
  const paths = [...new Set([files.cert, files.key, ...(files.clientCa === undefined ? [] : [files.clientCa])])];
  let served = current;
  let pending: NodeJS.Timeout | undefined;
  const refused = (e: unknown) => observer.log("tls_reload_failed", { reason: (e as Error).message, serving: served.fingerprint256 });
  const reload = () => {
    pending = undefined;
    let next: TlsMaterial;
    try {
      next = loadTlsMaterial(files);
    } catch (e) {
      return refused(e);
    }
    if (sameBytes(next.cert, served.cert) && sameBytes(next.key, served.key) && sameBytes(next.ca, served.ca)) return;
    try {
      apply(next);
    } catch (e) {
      return refused(e);
    }
    served = next;
    observer.log("tls_reloaded", { fingerprint256: next.fingerprint256, validTo: next.validTo, clientCa: next.ca !== undefined });
  };
  // Files written together are seen by their own watchers a moment apart: one reload for them.
  const changed = () => {
    pending ??= setTimeout(reload, Math.min(50, intervalMs));
    pending.unref();
  };
  for (const p of paths) fs.watchFile(p, { interval: intervalMs, persistent: false }, changed);
  // A watcher's first look is its baseline: files written after they were read and before that
  // look would go unseen until they change again. One reload compares them with what is served.
  changed();
  return () => {
    for (const p of paths) fs.unwatchFile(p, changed);
    clearTimeout(pending);
    pending = undefined;
  };
}
