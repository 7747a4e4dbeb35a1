import os from "node:os";
import { parseArgs } from "node:util";
import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { connect, HubError, type Session } from "../../clients/ts/src/index.js";
import { argumentMessage, isArgumentError, type FlagDoc } from "../config.js";
import { CommandError, exitCodes, usageError, write as writeOut } from "./command-error.js";
import { terminalText } from "./ops-output.js";
import type { HubTarget } from "./hub-client.js";
import { hubTls, libraryTls, tlsFlags, tlsRefusal, type HubTls } from "./tls-client.js";

/**
 * What the agent commands (`lease run`, `agents`, `send`, `inbox`, `reply`, `lease ...`) share:
 * the hub, the project and the agent they act as, from flags or KXM_ variables, and a session
 * opened through the TypeScript client library (clients/ts), so registration, heartbeats and
 * lease keeping have one implementation.
 */

export const defaultHubUrl = "http://127.0.0.1:7331";

export const agentFlags = {
  url: { env: "KXM_URL", value: "url", meaning: "the hub's base URL", default: defaultHubUrl },
  token: {
    env: "KXM_TOKEN",
    value: "token",
    meaning: "sent as Authorization: Bearer: the project's token (or the admin token)",
    default: "none (a loopback hub without tokens)",
  },
  project: { env: "KXM_PROJECT", value: "project", meaning: "the project the agent works in", default: "none, required" },
  agent: {
    env: "KXM_AGENT",
    value: "name",
    meaning: "the agent's name: the command registers it, or resumes it if it is offline; a name online elsewhere is refused",
    default: "none, required where the command acts as an agent",
  },
  ...tlsFlags,
} satisfies Record<string, FlagDoc>;

export interface AgentTarget {
  url: URL;
  token: string | undefined;
  project: string;
  /** Undefined for the commands that read with the project's token only. */
  agent: string | undefined;
  /** The CA to trust and the client certificate (KXM_TLS_CA, KXM_TLS_CLIENT_CERT, KXM_TLS_CLIENT_KEY). */
  tls: HubTls;
}

/** The REST face's target (plain fetch) for the commands that need no agent identity. */
export const restTarget = (t: AgentTarget): HubTarget => ({ url: t.url, token: t.token, tls: t.tls });

/** Parses `args` against `options` plus --help; an argument problem is a usage error (exit 2). */
export function parseFlags<O extends NonNullable<Parameters<typeof parseArgs>[0]>["options"]>(args: string[], options: O) {
  try {
    return parseArgs({ args, options: { ...options, help: { type: "boolean", short: "h" } }, allowPositionals: true, strict: true });
  } catch (e) {
    if (isArgumentError(e)) throw usageError(argumentMessage(e));
    throw e;
  }
}

/** `raw` as the hub's base URL: http or https, with no user name or password; else a usage error naming `flag`. */
export function hubUrl(raw: string, flag: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw usageError(`${flag} must be a URL such as ${defaultHubUrl}, got ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw usageError(`${flag} must start with http:// or https://`);
  return withoutCredentials(url, flag);
}

/**
 * Refuses (usage_error) a hub URL that carries a user name or password: the commands never send
 * one (the hub's credential is --token), and fetch would refuse it with the whole URL, password
 * included, in its message.
 */
export function withoutCredentials(url: URL, flag: string): URL {
  if (url.username !== "" || url.password !== "") throw usageError(`${flag} carries a user name or password, which is never sent: give the hub's token as --token (KXM_TOKEN) instead`);
  return url;
}

/** parseArgs options for the agent flags, each a string. */
export const agentFlagOptions = Object.fromEntries(Object.keys(agentFlags).map((f) => [f, { type: "string" as const }])) as Record<
  keyof typeof agentFlags,
  { type: "string" }
>;

/**
 * The hub, project and agent from the flags, else the variables (an empty variable counts as
 * unset), and the TLS files read. Throws usage_error when the project (or, with `needAgent`, the
 * agent) is missing, a value cannot travel in an HTTP header, or a TLS file cannot be used.
 */
export function agentTarget(values: Record<string, unknown>, needAgent: boolean): AgentTarget {
  const given: Partial<Record<keyof typeof agentFlags, string>> = {};
  for (const [flag, doc] of Object.entries(agentFlags) as [keyof typeof agentFlags, FlagDoc][]) {
    const v = (values[flag] as string | undefined) ?? process.env[doc.env!];
    if (v !== undefined && v.trim() !== "") given[flag] = v.trim();
  }
  const missing = (needAgent ? (["project", "agent"] as const) : (["project"] as const)).filter((f) => given[f] === undefined);
  if (missing.length > 0) {
    throw usageError(`${missing.map((f) => `${agentFlags[f].env} (--${f})`).join(" and ")} ${missing.length === 1 ? "is" : "are"} required`);
  }
  for (const f of ["token", "project", "agent"] as const) {
    if (given[f] !== undefined && /[^\x20-\x7e]/.test(given[f])) throw usageError(`--${f} (${agentFlags[f].env}) must be printable ASCII`);
  }
  const url = hubUrl(given.url ?? defaultHubUrl, "--url (KXM_URL)");
  return { url, token: given.token, project: given.project!, agent: given.agent, tls: hubTls(given) };
}

const units: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** A duration such as `30s`, `5m`, `1500ms`, `1h` or a bare number of milliseconds, within bounds. */
export function durationMs(flag: string, raw: string, minMs: number, maxMs: number): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(raw.trim());
  const ms = m ? Math.round(Number(m[1]) * units[m[2] ?? "ms"]!) : NaN;
  if (!Number.isFinite(ms) || ms < minMs || ms > maxMs) {
    throw usageError(`--${flag} must be a duration such as 30s, 5m or 1500ms (a bare number is milliseconds), ${minMs}..${maxMs} ms; got ${JSON.stringify(raw)}`);
  }
  return ms;
}

/**
 * A library error as the command's refusal: the hub's own code (exit 1), or hub_unreachable
 * (exit 3) when the hub could not be reached, tls_failed (exit 3) when its TLS handshake failed.
 */
export function refusalOf(e: unknown, t: Pick<AgentTarget, "url" | "tls">): CommandError {
  if (e instanceof CommandError) return e;
  const err = HubError.from(e);
  const tls = tlsRefusal(err, t.url, t.tls);
  if (tls) return tls;
  if (err.code === "unavailable") {
    return new CommandError("hub_unreachable", `cannot reach the hub at ${t.url.origin} (${err.message}); see --url, KXM_URL`, exitCodes.unreachable);
  }
  return new CommandError(err.code, err.message, exitCodes.refused);
}

/**
 * Registers the agent (or resumes it, offline, with its id, leases and inbox) through the client
 * library. Never a takeover: a name online elsewhere is refused (duplicate_agent_name), so a
 * command never ends another instance's streams nor releases its leases.
 */
export async function openSession(t: AgentTarget, purpose: string): Promise<Session> {
  try {
    return await connect({ url: t.url.href.replace(/\/+$/, ""), token: t.token, project: t.project, name: t.agent!, purpose, tls: libraryTls(t.tls) });
  } catch (e) {
    throw refusalOf(e, t);
  }
}

/** How long releasing or unregistering may take before a command ends anyway. */
const endTimeoutMs = 5_000;

/** Waits for `p` (its failure ignored) at most endTimeoutMs: a hub that answers nothing must not keep a command from ending. */
export async function bounded(p: Promise<unknown>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p.catch(() => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, endTimeoutMs)))]);
  clearTimeout(timer);
}

/** Closes the session (releases what the library holds, unregisters), bounded; an agent left online goes stale on its own. */
export const closeSession = (session: Session) => bounded(session.close());

/**
 * Writes to stdout as terminalText: what the commands print holds text other agents chose (lease
 * names, purposes, hosts, message content), which must not reach a terminal as its escapes.
 */
export const write = (text: string): Promise<void> => writeOut(terminalText(text));

/** A library answer as ProtoJSON, every field written (64-bit integers as strings, enums by name). */
export const protoJson = <D extends DescMessage>(schema: D, message: MessageShape<D>): unknown => toJson(schema, message, { alwaysEmitImplicit: true });

/**
 * Runs `fn` with a session of the agent, then unregisters it (offline; the leases it holds stay
 * held until released or lapsed, and its next command resumes it with them). A library error is
 * the command's refusal.
 */
export async function asAgent<T>(t: AgentTarget, purpose: string, fn: (session: Session) => Promise<T>): Promise<T> {
  const session = await openSession(t, purpose);
  // Interrupted (Ctrl-C, a parent's SIGTERM): the agent is unregistered first, as at the end of
  // any command, then the command ends as the signal would (128 + its number). Left online, its
  // name would refuse the next command as it (duplicate_agent_name) until it went stale.
  const onSignal = (signal: NodeJS.Signals) => {
    void closeSession(session).finally(() => process.exit(128 + (os.constants.signals[signal] ?? 0)));
  };
  for (const s of endingSignals) process.once(s, onSignal);
  try {
    return await fn(session);
  } catch (e) {
    throw refusalOf(e, t);
  } finally {
    for (const s of endingSignals) process.off(s, onSignal);
    await closeSession(session);
  }
}

/** The signals a command is ended by that let it unregister its agent first. */
const endingSignals = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
