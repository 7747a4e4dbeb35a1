import { errors } from "./errors.js";
import { holdsKey, type AgentRow } from "./domain.js";

/**
 * A managed project token a call was authenticated with (auth/tokens.ts): the streams the call
 * opens end when it is revoked or expires.
 */
export interface TokenGrant {
  id: string;
  project: string;
  expiresAtMs?: number;
}

/** Who is calling, as authentication established it. Handlers read it from the context. */
export type Caller =
  /**
   * `keyHash`: the stored hash of the key the call presented (never the key): a stream ends once
   * the agent's key is no longer that one (unregistered, evicted, taken over). `recent`:
   * authenticated on the agent's row as this hub read it lately, not as it is now (D86): the
   * call's decision checks that caller again in its own transaction (checkCaller).
   */
  | { kind: "agent"; agentId: string; agentName: string; project: string; keyHash?: string; token?: TokenGrant; untilClosed?: true; recent?: true }
  /**
   * A project token (or the admin token standing in for a project without its own). `proven`:
   * the bearer it presented was checked against a secret (a project without tokens on a hub
   * without an admin token checks none), so it may key the caller's rate budget (D40).
   * `untilClosed` (on an agent caller too): let in only because its project has no token of its
   * own (the admin token stood in, or the hub is open); its streams end once the project gets one.
   */
  | { kind: "project"; project: string; token?: TokenGrant; proven?: true; untilClosed?: true }
  | { kind: "admin"; proven?: true }
  /** Nobody in particular: only for methods whose rule is "public". */
  | { kind: "public" };

export type AgentCaller = Extract<Caller, { kind: "agent" }>;

/**
 * Checks an agent's call again as its decision reads the store: the agent's row (`agent`), and
 * whether its project has, or ever had, a managed token (`projectHasTokens`, asked only when it
 * matters). Throws invalid_agent_identity when the row no longer carries the key the call
 * presented (unregistered, evicted, taken over: D26), and invalid_auth when the call was
 * authenticated on a row read lately (`recent`), let in because its project had no token of its
 * own (`untilClosed`), and the project has one now: what authenticating it at its decision would
 * have answered.
 * @NOTE decision D86.
 */
export function checkCaller(caller: { keyHash?: string; recent?: true; untilClosed?: true }, agent: AgentRow | undefined, projectHasTokens: () => boolean): void {
  if (!holdsKey(agent, caller.keyHash)) throw errors.invalidAgentIdentity();
  if (caller.recent && caller.untilClosed && projectHasTokens()) throw errors.invalidAuth();
}
