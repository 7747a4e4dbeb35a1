import type { Caller } from "../caller.js";
import { errors } from "../errors.js";
import { secretEquals, secretMatchesHash } from "../ids.js";
import type { Presence } from "../presence/presence.js";
import type { AgentRow, HubStore } from "../store/store.js";
import { projectName } from "../validate.js";
import type { AuthRule } from "./rules.js";

/** What a request presents. */
export interface Credentials {
  /** The `Authorization` header value. */
  authorization: string | null;
  agentId: string | null;
  agentKey: string | null;
}

export interface AuthenticatorDeps {
  store: HubStore;
  presence: Presence;
  adminToken: string | undefined;
  projectTokens: Record<string, string>;
  /** True when the hub listens on loopback only (then an unset admin token trusts callers). */
  loopback: boolean;
}

const bearer = (authorization: string | null) =>
  authorization?.startsWith("Bearer ") ? authorization.slice("Bearer ".length) : null;

/**
 * Decides who a request is. Refusals are invalid_auth, invalid_agent_identity or
 * admin_auth_not_configured.
 * @NOTE README §3.1: nothing is written until both the agent key and the project token are
 * good; only then is the agent's activity recorded.
 */
export function createAuthenticator({ store, presence, adminToken, projectTokens, loopback }: AuthenticatorDeps) {
  /**
   * The project's own token, else the admin token; neither configured means open. Only the
   * table's own entries count: a project called `constructor` or `__proto__` is a project like
   * any other, not a member of Object.prototype.
   */
  function checkProjectToken(project: string, creds: Credentials): void {
    const own = Object.hasOwn(projectTokens, project) ? projectTokens[project] : undefined;
    const expected = own || adminToken;
    if (expected === undefined) return;
    if (!secretEquals(bearer(creds.authorization), expected)) throw errors.invalidAuth();
  }

  /** True when the bearer is the admin token, or no admin token exists on a loopback hub. */
  function isAdmin(creds: Credentials): boolean {
    if (adminToken === undefined) return loopback;
    return secretEquals(bearer(creds.authorization), adminToken);
  }

  async function agentCaller(agentId: string | null, creds: Credentials): Promise<Caller> {
    const id = agentId?.trim();
    if (!id) throw errors.invalidAgentIdentity();
    const known = (a: AgentRow | undefined): a is AgentRow => a !== undefined && secretMatchesHash(creds.agentKey, a.keyHash);
    // The latest row serves a success (what the call answers waits for durability anyway); a
    // refusal is an answer, so it comes only from the durable row.
    let agent = await store.peekAgent(id);
    if (!known(agent)) {
      agent = await store.getAgent(id);
      if (!known(agent)) throw errors.invalidAgentIdentity();
    }
    checkProjectToken(agent.project, creds);
    await presence.recordActivity(agent.id, agent);
    return { kind: "agent", agentId: agent.id, agentName: agent.name, project: agent.project, keyHash: agent.keyHash };
  }

  return {
    /**
     * `field(name)` reads a request field named by the rule (the project, or the agent id of
     * heartbeat/unregister).
     */
    async authenticate(rule: AuthRule, creds: Credentials, field: (name: string) => unknown): Promise<Caller> {
      switch (rule.kind) {
        case "agent":
          return agentCaller(rule.idField ? String(field(rule.idField) ?? "") : creds.agentId, creds);
        case "project": {
          const project = projectName("project", field(rule.projectField) as string | undefined);
          checkProjectToken(project, creds);
          return { kind: "project", project };
        }
        case "agentOrProject": {
          if (creds.agentId !== null) return agentCaller(creds.agentId, creds);
          const project = projectName("project", field(rule.projectField) as string | undefined);
          if (isAdmin(creds) && adminToken !== undefined) return { kind: "project", project };
          checkProjectToken(project, creds);
          return { kind: "project", project };
        }
        case "agentOrOperator": {
          const named = field(rule.projectField);
          if (creds.agentId !== null || named === undefined || named === "") return agentCaller(creds.agentId, creds);
          const project = projectName("project", named as string);
          // @NOTE spec §5.3: operators read a named project without an agent identity.
          if (!isAdmin(creds)) checkProjectToken(project, creds);
          return { kind: "project", project };
        }
        case "operator": {
          const project = projectName("project", field(rule.projectField) as string | undefined);
          if (!isAdmin(creds)) checkProjectToken(project, creds);
          return { kind: "project", project };
        }
        case "public":
          return { kind: "public" };
        case "adminConfigured":
          // @NOTE spec §5.3: a loopback hub without an admin token trusts its callers as admin,
          // for every admin-only call, as its start-up warning says.
          if (adminToken === undefined && !loopback) throw errors.adminAuthNotConfigured();
          if (!isAdmin(creds)) throw errors.invalidAuth();
          return { kind: "admin" };
      }
    },

    /** The /metrics check: the admin token, or open on a loopback hub without one. */
    isAdmin,
  };
}

export type Authenticator = ReturnType<typeof createAuthenticator>;
