import fs from "node:fs";
import tls from "node:tls";
import { tlsFailure, type TlsFailure } from "../../clients/ts/src/tls-failure.js";
import type { FlagDoc } from "../config.js";
import { CommandError, exitCodes, usageError } from "./command-error.js";

/**
 * TLS toward the hub for every command that calls it (the agent commands, `ops`, `mcp`, the git
 * guard): which CA to trust and which client certificate to present, read once from the files the
 * flags, variables or git config name; and what a failed handshake says.
 */

export const tlsFlags = {
  "tls-ca": {
    env: "KXM_TLS_CA",
    value: "file",
    meaning: "PEM file of the CA that signed the hub's certificate (an https:// URL), trusted instead of the system's CAs",
    default: "the system's CAs",
  },
  "tls-client-cert": {
    env: "KXM_TLS_CLIENT_CERT",
    value: "file",
    meaning: "PEM client certificate for a hub with mutual TLS (signed by the hub's KXM_TLS_CLIENT_CA); needs --tls-client-key",
    default: "none",
  },
  "tls-client-key": { env: "KXM_TLS_CLIENT_KEY", value: "file", meaning: "the client certificate's PEM private key, unencrypted", default: "none" },
} satisfies Record<string, FlagDoc>;

export type TlsFlag = keyof typeof tlsFlags;

/** Where each TLS setting comes from, as a message names it: `KXM_TLS_CA (--tls-ca)`, `kxm.tlsCa`. */
export type TlsSettingNames = Record<TlsFlag, string>;

const commandNames: TlsSettingNames = {
  "tls-ca": "KXM_TLS_CA (--tls-ca)",
  "tls-client-cert": "KXM_TLS_CLIENT_CERT (--tls-client-cert)",
  "tls-client-key": "KXM_TLS_CLIENT_KEY (--tls-client-key)",
};

/** The TLS a command uses toward the hub: the files' contents, as Node's tls.connect takes them. */
export interface HubTls {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  /** The settings' names, for the advice in a refusal. */
  names: TlsSettingNames;
}

/** A TLS file that cannot be used: a usage error for a command, guard_misconfigured for the hook. */
export class TlsFileError extends Error {}

function readPem(name: string, file: string): Buffer {
  let data: Buffer;
  try {
    data = fs.readFileSync(file);
  } catch (e) {
    throw new TlsFileError(`cannot read ${name} ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  if (!data.includes("-----BEGIN")) throw new TlsFileError(`${name} ${file} holds no PEM data`);
  return data;
}

/**
 * Reads the files `files` names (absent or blank: not set) and checks that Node can use them (a
 * key that is not the certificate's, an encrypted key, a certificate without its key). Throws
 * TlsFileError naming the setting and the file.
 */
export function readHubTls(files: Partial<Record<TlsFlag, string>>, names: TlsSettingNames): HubTls {
  const set = (f: TlsFlag) => (files[f]?.trim() ? files[f]!.trim() : undefined);
  const [caFile, certFile, keyFile] = [set("tls-ca"), set("tls-client-cert"), set("tls-client-key")];
  if ((certFile === undefined) !== (keyFile === undefined)) {
    const [has, lacks] = certFile === undefined ? (["tls-client-key", "tls-client-cert"] as const) : (["tls-client-cert", "tls-client-key"] as const);
    throw new TlsFileError(`${names[has]} needs ${names[lacks]}: a client certificate goes with its private key`);
  }
  const out: HubTls = { names };
  if (caFile !== undefined) out.ca = readPem(names["tls-ca"], caFile);
  if (certFile !== undefined) out.cert = readPem(names["tls-client-cert"], certFile);
  if (keyFile !== undefined) out.key = readPem(names["tls-client-key"], keyFile);
  const usable = (options: tls.SecureContextOptions, which: string) => {
    try {
      tls.createSecureContext(options);
    } catch (e) {
      throw new TlsFileError(`${which} cannot be used: ${(e as Error).message}`);
    }
  };
  if (out.ca) usable({ ca: out.ca }, `${names["tls-ca"]} ${caFile}`);
  if (out.cert) usable({ cert: out.cert, key: out.key }, `${names["tls-client-cert"]} ${certFile} with ${names["tls-client-key"]} ${keyFile}`);
  return out;
}

/**
 * A command's TLS from its resolved flags (a flag, else its variable): a file that cannot be used
 * is a usage error (exit 2) naming it.
 */
export function hubTls(given: Partial<Record<string, string>>): HubTls {
  try {
    return readHubTls(given, commandNames);
  } catch (e) {
    if (e instanceof TlsFileError) throw usageError(e.message);
    throw e;
  }
}

/** True when any TLS file is set. */
export const hasTls = (t: HubTls | undefined): t is HubTls => t !== undefined && (t.ca !== undefined || t.cert !== undefined);

/** The TLS settings as the client library takes them (undefined when none is set). */
export const libraryTls = (t: HubTls | undefined) => (hasTls(t) ? { ca: t.ca, cert: t.cert, key: t.key } : undefined);

/** What to do about a failed handshake, by Node's code. */
function advice(code: string, t: HubTls | undefined): string {
  const names = t?.names ?? commandNames;
  if (/CERTIFICATE_REQUIRED/.test(code)) {
    return `the hub wants a client certificate (mutual TLS): set ${names["tls-client-cert"]} and ${names["tls-client-key"]}`;
  }
  if (/UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_UNKNOWN|UNSUPPORTED_CERTIFICATE|ECONNRESET/.test(code)) {
    return `the hub refuses a client certificate its KXM_TLS_CLIENT_CA did not sign: check ${names["tls-client-cert"]}`;
  }
  if (/ALTNAME|HOSTNAME/.test(code)) return "the hub's certificate does not name the host in the URL: use a host name or address it holds";
  if (/EXPIRED|NOT_YET_VALID/.test(code)) return "the hub's certificate is outside its validity period";
  if (/WRONG_VERSION_NUMBER|PACKET_LENGTH_TOO_LONG|HTTP_REQUEST/.test(code)) return "the port does not speak TLS: use http://";
  if (t?.ca) return `the CA in ${names["tls-ca"]} did not sign the hub's certificate`;
  return `the hub's certificate is not signed by a CA this machine trusts: give the hub's CA in ${names["tls-ca"]}`;
}

/**
 * With a client certificate set, a hub with mutual TLS that refuses it (its client CA did not
 * sign it) closes the connection just after the handshake, without a TLS alert: the call fails
 * with a reset (HTTP/1.1) or a cancelled HTTP/2 stream. Such a failure is reported as TLS.
 */
function resetAfterHandshake(e: unknown, url: URL, t: HubTls | undefined): TlsFailure | undefined {
  if (url.protocol !== "https:" || !t?.cert) return undefined;
  const seen = new Set<unknown>();
  for (let c = e; typeof c === "object" && c !== null && !seen.has(c); c = (c as { cause?: unknown }).cause) {
    seen.add(c);
    const { code, message } = c as { code?: unknown; message?: unknown };
    if (code === "ECONNRESET" || (typeof message === "string" && /stream closed with error code CANCEL|socket hang up/.test(message))) {
      return { code: "ECONNRESET", reason: "the hub closed the connection right after the TLS handshake" };
    }
  }
  return undefined;
}

/**
 * A failed TLS handshake as the command's refusal: `tls_failed`, exit 3 like an unreachable hub,
 * with Node's code (UNABLE_TO_VERIFY_LEAF_SIGNATURE, ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED,
 * ...), its reason and what to do. Undefined for any other failure.
 */
export function tlsRefusal(e: unknown, url: URL, t: HubTls | undefined): CommandError | undefined {
  const f = tlsFailure(e) ?? resetAfterHandshake(e, url, t);
  if (!f) return undefined;
  return new CommandError("tls_failed", `TLS with the hub at ${url.origin} failed: ${f.code}: ${f.reason}; ${advice(f.code, t)}`, exitCodes.unreachable);
}
