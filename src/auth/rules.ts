import type { TokenScope } from "../domain.js";

/**
 * How each RPC authenticates, keyed by `<service type name>/<method name>`. One table, read by
 * the RPC interceptor for both faces (REST calls run through the same interceptor). `scope` is
 * what a managed project token must allow to make the call as an operator (neededScope); an
 * agent's own calls always need `agent`.
 */
export type AuthRule = (

  /**
   * Agent key + project token; the agent id comes from the header, or from `idField`.
   * `checkedAgain`: the call's decision checks its caller again in its own transaction (caller.ts
   * checkCaller), so the agent may be authenticated on its row as this hub read it lately (D86).
   */
  | { kind: "agent"; idField?: string; checkedAgain?: true }
  /** Project token for the project named in `projectField`. */
  | { kind: "project"; projectField: string }
  /** An agent, or a project/admin token for the project named in `projectField`. */
  | { kind: "agentOrProject"; projectField: string }
  /**
   * An operator read: with agent headers, or without a project named in `projectField`, the
   * agent (its own project); else the admin token or that project's own token (a loopback hub
   * without an admin token trusts its callers as admin).
   */
  | { kind: "agentOrOperator"; projectField: string }
  /**
   * An operator of the project named in `projectField`: the admin token or that project's own
   * token (a loopback hub without an admin token trusts its callers as admin). Never an agent.
   */
  | { kind: "operator"; projectField: string }
  /** Admin token; a hub without one trusts loopback callers, else refuses (admin_auth_not_configured). */
  | { kind: "adminConfigured" }
  /** No credentials (discovery services such as server reflection). */
  | { kind: "public" }
) & { scope?: TokenScope };

/**
 * The scope a managed token needs for a call under `rule`: the rule's own, else `read` for the
 * reads and watches an operator makes without an agent, `agent` for the rest.
 */
export function neededScope(rule: AuthRule): TokenScope {
  if (rule.scope) return rule.scope;
  return rule.kind === "agentOrProject" || rule.kind === "agentOrOperator" ? "read" : "agent";
}

const agent: AuthRule = { kind: "agent" };
const agentPath: AuthRule = { kind: "agent", idField: "agentId" };
/** An agent's call whose decision checks its caller again (lease decisions and sends). */
const deciding: AuthRule = { kind: "agent", checkedAgain: true };
const project: AuthRule = { kind: "project", projectField: "project" };
const watcher: AuthRule = { kind: "agentOrProject", projectField: "project" };
const reader: AuthRule = { kind: "agentOrOperator", projectField: "project" };
const operator: AuthRule = { kind: "operator", projectField: "project" };
const operatorRead: AuthRule = { kind: "operator", projectField: "project", scope: "read" };
const admin: AuthRule = { kind: "adminConfigured" };

export const authRules: Record<string, AuthRule> = {
  "kxm.hub.v1.PresenceService/RegisterAgent": project,
  "kxm.hub.v1.PresenceService/Heartbeat": agentPath,
  "kxm.hub.v1.PresenceService/UnregisterAgent": agentPath,
  "kxm.hub.v1.PresenceService/ListAgents": reader,
  "kxm.hub.v1.PresenceService/ReportRuntimePresence": project,
  "kxm.hub.v1.PresenceService/WatchPresence": watcher,
  "kxm.hub.v1.LeaseService/AcquireLease": deciding,
  "kxm.hub.v1.LeaseService/RenewLease": deciding,
  "kxm.hub.v1.LeaseService/ReleaseLease": deciding,
  "kxm.hub.v1.LeaseService/GetLease": reader,
  "kxm.hub.v1.LeaseService/CheckFence": { ...reader, scope: "check" },
  "kxm.hub.v1.LeaseService/ListLeases": reader,
  "kxm.hub.v1.LeaseService/WatchLeases": watcher,
  "kxm.hub.v1.PeerService/SendMessage": deciding,
  "kxm.hub.v1.PeerService/AckMessage": agent,
  "kxm.hub.v1.PeerService/ReplyMessage": agent,
  "kxm.hub.v1.PeerService/CancelMessage": agent,
  "kxm.hub.v1.PeerService/GetMessage": agent,
  "kxm.hub.v1.PeerService/ListMessages": agent,
  "kxm.hub.v1.PeerService/Subscribe": agent,
  "kxm.hub.v1.PeerService/ReadInbox": agent,
  "kxm.hub.v1.SyncService/PushEvents": project,
  "kxm.hub.v1.SyncService/GetCursor": project,
  "kxm.hub.v1.OpsService/GetSnapshot": admin,
  "kxm.hub.v1.OpsService/ListProjects": admin,
  "kxm.hub.v1.OpsService/WatchProjects": admin,
  "kxm.hub.v1.OpsService/WatchOpenMessages": operatorRead,
  "kxm.hub.v1.OpsService/WatchRuns": operatorRead,
  "kxm.hub.v1.OpsService/WatchProject": operatorRead,
  "kxm.hub.v1.OpsService/ForceReleaseLease": operator,
  "kxm.hub.v1.OpsService/EvictAgent": operator,
  "kxm.hub.v1.OpsService/CreateProjectToken": admin,
  "kxm.hub.v1.OpsService/ListProjectTokens": admin,
  "kxm.hub.v1.OpsService/RevokeProjectToken": admin,
  "kxm.hub.v1.OpsService/ListAuditEvents": admin,
  "grpc.reflection.v1.ServerReflection/ServerReflectionInfo": { kind: "public" },
};
