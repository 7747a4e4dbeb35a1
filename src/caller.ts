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
   * the agent's key is no longer that one (unregistered, evicted, taken over).
   */
  | { kind: "agent"; agentId: string; agentName: string; project: string; keyHash?: string; token?: TokenGrant; untilClosed?: true }
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
