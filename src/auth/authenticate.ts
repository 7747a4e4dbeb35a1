import type { Caller, TokenGrant } from "../caller.js";
import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
import { secretEquals, secretMatchesHash } from "../ids.js";
import type { Presence } from "../presence/presence.js";
import type { AgentStore } from "../store/agent-store.js";
import type { TokenStore } from "../store/token-store.js";
import { hasNul, projectName } from "../validate.js";
import { neededScope, type AuthRule } from "./rules.js";
import { scopeAllows, tokenIdOfSecret, tokenState } from "./tokens.js";
import type { AgentRow, ProjectTokenRow, TokenScope } from "../domain.js";

/** What a request presents. */
export interface Credentials {
  /** The `Authorization` header value. */
  authorization: string | null;
  agentId: string | null;
  agentKey: string | null;
}

export interface AuthenticatorDeps {
  store: { agents: AgentStore; tokens: TokenStore };
  presence: Presence;
  adminToken: string | undefined;
  projectTokens: Record<string, string>;
  /** True when the hub listens on loopback only (then an unset admin token trusts callers). */
  loopback: boolean;
  /** Managed token expiry is read on it. */
  clock: Clock;
}

const bearer = (authorization: string | null) =>
  authorization?.startsWith("Bearer ") ? authorization.slice("Bearer ".length) : null;

/**
 * The agent row an agent caller was authenticated on, for `admitted`: on the caller itself, under
 * a key of this module's, not in a WeakMap, where an entry a call costs about 0.3 us on its own
 * (more in a busy hub) and is an ephemeron the young collections trace besides.
 */
const seenRow = Symbol("authenticated on");
type Seen = { [seenRow]?: AgentRow };

/**
 * Decides who a request is. Refusals are invalid_auth, invalid_agent_identity or
 * admin_auth_not_configured.
 * @NOTE decision D38: nothing is written until both the agent key and the project token are
 * good; only then is the agent's activity recorded.
 */
export function createAuthenticator({ store, presence, adminToken, projectTokens, loopback, clock }: AuthenticatorDeps) {
  /** Projects known to have had a managed token: a fact that never becomes false. */
  const withTokens = new Set<string>();

  /** `committed`: what projectHasTokens(project, false) answers, when it was read already (peekCaller). */
  async function hasOwnTokens(project: string, committed?: boolean): Promise<boolean> {
    if (withTokens.has(project)) return true;
    // What is committed says no: nothing durable says yes. A yes refuses, so it must be durable.
    const has = (committed ?? (await store.tokens.projectHasTokens(project, false))) && (await store.tokens.projectHasTokens(project, true));
    if (has) withTokens.add(project);
    return has;
  }

  /** The managed token `secret` names, when it is live and the secret is its own. */
  async function managedToken(id: string, secret: string): Promise<ProjectTokenRow | undefined> {
    const good = (t: ProjectTokenRow | undefined): t is ProjectTokenRow =>
      t !== undefined && tokenState(t, clock.now()) === "live" && secretMatchesHash(secret, t.hash);
    const peeked = await store.tokens.peekToken(id);
    if (good(peeked)) return peeked;
    // A refusal is an answer: it comes only from the durable row.
    const durable = await store.tokens.getToken(id);
    return good(durable) ? durable : undefined;
  }

  /**
   * The project's own token (KXM_PROJECT_TOKENS, or a managed one whose scope allows `need`),
   * else, for a project that never had one, the admin token; none of them configured means
   * open. Only the table's own entries count: a project called `constructor` or `__proto__` is
   * a project like any other, not a member of Object.prototype. Returns the managed token used
   * (`grant`), whether the bearer was checked against any secret (`proven`: not on an open
   * project), and whether the project was let in only for having no token of its own
   * (`untilClosed`: the admin token, or no token at all).
   */
  async function checkProjectToken(
    project: string,
    creds: Credentials,
    need: TokenScope,
    committedHasTokens?: boolean,
  ): Promise<{ grant?: TokenGrant; proven: boolean; untilClosed?: true }> {
    const presented = bearer(creds.authorization);
    const own = Object.hasOwn(projectTokens, project) ? projectTokens[project] : undefined;
    if (own && secretEquals(presented, own)) return { proven: true };
    const id = presented === null ? undefined : tokenIdOfSecret(presented);
    if (id !== undefined) {
      const t = await managedToken(id, presented!);
      if (!t || t.project !== project) throw errors.invalidAuth();
      if (!scopeAllows(t.scope, need)) throw errors.tokenScopeInsufficient(t.scope, need);
      return { grant: { id: t.id, project: t.project, ...(t.expiresAtMs !== undefined && { expiresAtMs: t.expiresAtMs }) }, proven: true };
    }
    if (own || (await hasOwnTokens(project, committedHasTokens))) throw errors.invalidAuth();
    if (adminToken === undefined) return { proven: false, untilClosed: true };
    if (!secretEquals(presented, adminToken)) throw errors.invalidAuth();
    return { proven: true, untilClosed: true };
  }

  /** True when the bearer is the admin token, or no admin token exists on a loopback hub. */
  function isAdmin(creds: Credentials): boolean {
    if (adminToken === undefined) return loopback;
    return secretEquals(bearer(creds.authorization), adminToken);
  }

  /** `lately`: the call's decision checks its caller again (AuthRule `checkedAgain`). */
  async function agentCaller(agentId: string | null, creds: Credentials, lately = false): Promise<Caller> {
    const id = agentId?.trim();
    // An id no agent can have (NUL) is as unknown as any other: not a question for the store.
    if (!id || hasNul(id)) throw errors.invalidAgentIdentity();
    const known = (a: AgentRow | undefined): a is AgentRow => a !== undefined && secretMatchesHash(creds.agentKey, a.keyHash);
    // The latest row serves a success (what the call answers waits for durability anyway); a
    // refusal is an answer, so it comes only from the durable row.
    let peeked = await store.agents.peekCaller(id, lately);
    // A row read lately that does not know the key (a new instance's) is read again.
    if (peeked?.recent && !known(peeked.agent)) peeked = await store.agents.peekCaller(id);
    let agent = peeked?.agent;
    let committedHasTokens = peeked?.projectHasTokens;
    let recent = peeked?.recent;
    if (!known(agent)) {
      agent = await store.agents.getAgent(id);
      committedHasTokens = undefined;
      recent = undefined;
      if (!known(agent)) throw errors.invalidAgentIdentity();
    }
    const { grant: token, untilClosed } = await checkProjectToken(agent.project, creds, "agent", committedHasTokens);
    const caller: Caller & Seen = {
      kind: "agent",
      agentId: agent.id,
      agentName: agent.name,
      project: agent.project,
      keyHash: agent.keyHash,
      ...(token && { token }),
      ...(untilClosed && { untilClosed }),
      ...(recent && { recent }),
      [seenRow]: agent,
    };
    return caller;
  }

  return {
    /**
     * `field(name)` reads a request field named by the rule (the project, or the agent id of
     * heartbeat/unregister).
     */
    async authenticate(rule: AuthRule, creds: Credentials, field: (name: string) => unknown): Promise<Caller> {
      const need = neededScope(rule);
      const projectCaller = async (project: string): Promise<Caller> => {
        const { grant, proven, untilClosed } = await checkProjectToken(project, creds, need);
        return { kind: "project", project, ...(grant && { token: grant }), ...(proven && { proven }), ...(untilClosed && { untilClosed }) };
      };
      /** An admin standing in for a project: proven when the admin token was checked (not on an open loopback hub). */
      const adminFor = (project: string): Caller => ({ kind: "project", project, ...(adminToken !== undefined && { proven: true }) });
      switch (rule.kind) {
        case "agent":
          return agentCaller(rule.idField ? String(field(rule.idField) ?? "") : creds.agentId, creds, rule.checkedAgain === true);
        case "project":
          return projectCaller(projectName("project", field(rule.projectField) as string | undefined));
        case "agentOrProject": {
          if (creds.agentId !== null) return agentCaller(creds.agentId, creds);
          const project = projectName("project", field(rule.projectField) as string | undefined);
          if (isAdmin(creds) && adminToken !== undefined) return adminFor(project);
          return projectCaller(project);
        }
        case "agentOrOperator": {
          const named = field(rule.projectField);
          if (creds.agentId !== null || named === undefined || named === "") return agentCaller(creds.agentId, creds);
          const project = projectName("project", named as string);
          // @NOTE decision D46: operators read a named project without an agent identity.
          return isAdmin(creds) ? adminFor(project) : projectCaller(project);
        }
        case "operator": {
          const project = projectName("project", field(rule.projectField) as string | undefined);
          return isAdmin(creds) ? adminFor(project) : projectCaller(project);
        }
        case "public":
          return { kind: "public" };
        case "adminConfigured":
          // @NOTE decision D46: a loopback hub without an admin token trusts its callers as admin,
          // for every admin-only call, as its start-up warning says.
          if (adminToken === undefined && !loopback) throw errors.adminAuthNotConfigured();
          if (!isAdmin(creds)) throw errors.invalidAuth();
          return adminToken === undefined ? { kind: "admin" } : { kind: "admin", proven: true };
      }
    },

    /**
     * A call of `caller` the rate limit admitted: an agent's is its activity (online, last seen),
     * recorded for the instance it was authenticated as. Throws invalid_agent_identity when its key
     * changed since (unregistered, evicted, taken over). A call refused before this (its budget
     * spent) changes nothing.
     */
    async admitted(caller: Caller): Promise<void> {
      if (caller.kind !== "agent") return;
      await presence.recordActivity(caller, (caller as Seen)[seenRow]);
    },

    /**
     * Whether `project` is closed: it has a token of its own (configured, or managed, ever), so the
     * admin token no longer stands in for it and it is no longer open.
     */
    async projectClosed(project: string): Promise<boolean> {
      return Object.hasOwn(projectTokens, project) || (await hasOwnTokens(project));
    },

    /** Whether the managed token `id` is still live (not revoked, not expired) as committed so far. */
    async tokenLive(id: string): Promise<boolean> {
      const t = await store.tokens.peekToken(id);
      return t !== undefined && tokenState(t, clock.now()) === "live";
    },
  };
}

export type Authenticator = ReturnType<typeof createAuthenticator>;
