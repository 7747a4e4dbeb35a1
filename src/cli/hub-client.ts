import { CommandError, exitCodes } from "./command-error.js";
import { tlsRefusal, type HubTls } from "./tls-client.js";
import { hubFetch } from "./tls-fetch.js";

/** Where the ops commands find the hub, and the bearer token they present to it. */
export interface HubTarget {
  /** The hub's base URL; a path in it (a hub behind a prefix) is kept. */
  url: URL;
  /** The admin token or the project's own; undefined sends no Authorization header. */
  token: string | undefined;
  /** The CA to trust and the client certificate, for an https:// URL (tls-client.ts). */
  tls?: HubTls;
}

/** How long a call may take before the hub counts as unreachable. */
export const callTimeoutMs = 10_000;

/** A path segment as the REST face reads it back: a lease name or project may hold `/`. */
export const segment = (s: string) => encodeURIComponent(s);

/**
 * One call to the hub's REST face over fetch (the command line holds no RPC client: it sits
 * beside main.ts, which must not import generated code). Answers the hub's JSON body on 2xx.
 * Throws CommandError: the hub's refusal as its own `code` and message (exit 1, the body kept for
 * `--json`); `hub_unreachable` (exit 3) when nothing answered in time, or something that is not
 * a hub did (no JSON body with a code: a wrong URL, a proxy's error page); `tls_failed` (exit 3)
 * when the TLS handshake failed (an untrusted hub certificate, a refused client certificate).
 */
export async function callHub(target: HubTarget, method: string, apiPath: string, body?: unknown): Promise<unknown> {
  const url = new URL(target.url.pathname.replace(/\/+$/, "") + apiPath, target.url);
  const headers: Record<string, string> = { accept: "application/json" };
  if (target.token) headers.authorization = `Bearer ${target.token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let res: Response;
  let text: string;
  try {
    res = await hubFetch(target.tls)(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(callTimeoutMs),
    });
    text = await res.text();
  } catch (e) {
    const tls = tlsRefusal(e, target.url, target.tls);
    if (tls) throw tls;
    const timedOut = (e as Error).name === "TimeoutError";
    const why = timedOut ? `no answer within ${callTimeoutMs / 1000} s` : causeOf(e);
    throw new CommandError("hub_unreachable", `cannot reach the hub at ${target.url.origin} (${why}); see --url, KXM_URL`, exitCodes.unreachable);
  }
  const answer = parse(text);
  if (res.ok && answer !== undefined) return answer;
  const refusal = answer as { code?: unknown; error?: unknown } | undefined;
  if (typeof refusal?.code === "string") {
    throw new CommandError(refusal.code, typeof refusal.error === "string" ? refusal.error : `HTTP ${res.status}`, exitCodes.refused, answer);
  }
  throw new CommandError(
    "hub_unreachable",
    `${url.origin} answered ${method} ${url.pathname} with HTTP ${res.status} and no hub answer; is --url a kxm hub?`,
    exitCodes.unreachable,
  );
}

function parse(text: string): unknown {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null ? v : undefined;
  } catch {
    return undefined;
  }
}

/** fetch's own error says only "fetch failed"; the socket's code (ECONNREFUSED, ENOTFOUND) is in its cause. */
function causeOf(e: unknown): string {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (e as Error).message;
}
