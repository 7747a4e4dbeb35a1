// Signing in: the token is kept for this tab only (sessionStorage), sent as a bearer header,
// never put in a URL. The page talks to the hub it was served by, through its public API.
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { reasonOf } from "./live.js";

export interface Session {
  token: string;
  /** Admin: every project; else the one project the token is for. */
  admin: boolean;
  project?: string;
  /** Signed in with no token: the hub accepts every caller (loopback, no admin token). */
  open?: boolean;
}

export interface Clients {
  ops: Client<typeof OpsService>;
  presence: Client<typeof PresenceService>;
}

const key = "kxm-hub.session";
/** Set when the operator signs out: no signing in by itself until they sign in again. */
const signedOutKey = "kxm-hub.signed-out";

export function clientsFor(token: string): Clients {
  const bearer: Interceptor = (next) => (req) => {
    if (token) req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [bearer] });
  return {
    ops: createClient(OpsService, transport),
    presence: createClient(PresenceService, transport),
  };
}

export function savedSession(): Session | undefined {
  try {
    const s = JSON.parse(sessionStorage.getItem(key) ?? "null") as Session | null;
    return s && typeof s.token === "string" && typeof s.admin === "boolean" ? s : undefined;
  } catch {
    return undefined;
  }
}

export function saveSession(s: Session): void {
  sessionStorage.setItem(key, JSON.stringify(s));
  sessionStorage.removeItem(signedOutKey);
}

export function forgetSession(): void {
  sessionStorage.removeItem(key);
  sessionStorage.setItem(signedOutKey, "1");
}

/**
 * Whether the page may try to sign in by itself on load: not right after the operator signed
 * out, and only from a loopback address, the only place a hub without tokens listens (so a
 * remote hub is not sent a call it will refuse on every visit).
 */
export function mayOpenBySelf(): boolean {
  const loopback = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/.test(location.hostname);
  return loopback && sessionStorage.getItem(signedOutKey) === null;
}

/**
 * The session of a hub that accepts no token at all (loopback, no admin token): ListProjects
 * without one succeeds. Undefined for a hub that wants a token, or that cannot be reached.
 */
export async function openHubSession(): Promise<Session | undefined> {
  try {
    await clientsFor("").ops.listProjects({});
    return { token: "", admin: true, open: true };
  } catch {
    return undefined;
  }
}

/** What the page tells an operator the hub refused, by its reason. */
export function refusalText(e: unknown, project?: string): string {
  const reason = reasonOf(e);
  if (reason === "INVALID_AUTH") {
    return project
      ? `The hub refused this token: it is neither the admin token nor the token of project “${project}”.`
      : "The hub refused this token: it is not the admin token. With a project's token, name the project too.";
  }
  if (reason === "ADMIN_AUTH_NOT_CONFIGURED") {
    return "This hub has no admin token and is not on loopback: sign in with a project's token and name the project.";
  }
  if (reason === "PROTOCOL_ERROR") return `The hub refused the project name: ${e instanceof ConnectError ? e.rawMessage : String(e)}`;
  if (e instanceof ConnectError && reason === undefined) return `The hub could not be reached (${e.rawMessage}). Try again.`;
  return `The hub refused: ${e instanceof ConnectError ? e.rawMessage : String(e)}`;
}

/**
 * What the page tells an operator the hub refused on an admin-only call (the audit trail, the
 * project tokens): `what` the call would have done, e.g. "read the audit trail". A refusal
 * that is not about the admin token reads as at sign-in (refusalText).
 */
export function adminRefusalText(e: unknown, session: Session, what: string): string {
  const reason = reasonOf(e);
  if (reason === "INVALID_AUTH" && !session.admin) {
    return `Only the admin token may ${what}. This page is signed in with the token of project “${session.project ?? ""}”: sign out and sign in with the admin token.`;
  }
  if (reason === "INVALID_AUTH") return `The hub no longer takes this page's token as the admin token, so it may not ${what}: sign out and sign in again.`;
  if (reason === "ADMIN_AUTH_NOT_CONFIGURED") {
    return `This hub has no admin token and is not on loopback: nobody may ${what} through it until it is given one (KXM_AUTH_TOKEN).`;
  }
  return refusalText(e, session.project);
}

/**
 * Finds out what a token is: the admin's when ListProjects accepts it (or any token on a
 * loopback hub without an admin token), else a project's when that project's operator read
 * accepts it. Throws the hub's refusal.
 */
export async function signIn(token: string, project: string | undefined): Promise<Session> {
  const c = clientsFor(token);
  try {
    await c.ops.listProjects({});
    return { token, admin: true, ...(project && { project }), ...(token === "" && { open: true }) };
  } catch (e) {
    const reason = reasonOf(e);
    if (!project || (reason !== "INVALID_AUTH" && reason !== "ADMIN_AUTH_NOT_CONFIGURED")) throw e;
  }
  await c.presence.listAgents({ project });
  return { token, admin: false, project };
}
