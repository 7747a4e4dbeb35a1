import type { ChangeOf, Decision } from "./change-feed.js";
import type { HeldResource, LeaseDecision } from "./lease-store.js";
import type { AgentRow, LeaseKey, RuntimeRow } from "../domain.js";

/**
 * The presence concern of the store: agents, their instances' leases as one decision, and
 * runtimes. Each backend implements it in one file (sqlite/agents.ts, postgres/agents.ts); the
 * presence domain takes this interface (and authentication reads agents through it).
 */

/**
 * A decision on an agent and every lease it holds, in one transaction (an eviction, a takeover
 * at registration): the agent's row, and one lease decision per resource it was shown.
 */
export interface AgentLeasesDecision<T> extends Decision<AgentRow, T> {
  /** Each on a lease it was shown (checked), with its queue changes and its changes for watchers. */
  leases?: { key: LeaseKey; decision: LeaseDecision<unknown> }[];
}

/** What peekCaller reads. */
export interface PeekedCaller {
  agent: AgentRow;
  projectHasTokens: boolean;
  /** Read lately, not at this call (asked with `lately`). */
  recent?: true;
}

export interface AgentStore {
  getAgent(id: string): Promise<AgentRow | undefined>;
  /**
   * The agent as the latest commit left it, without waiting for that commit to be durable, and,
   * read with it, whether its project has managed tokens as committed (what
   * TokenStore.projectHasTokens(project, false) answers): what authenticating an agent's call
   * reads, in one read. For authentication only, whose success is never an answer by itself
   * (the call's own decision or read comes after it, and waits). A refusal must come from
   * getAgent.
   * `lately`: the call's decision checks its caller again in its own transaction, so what this
   * store read a moment ago will do (marked `recent`); a store that has nothing recent reads.
   */
  peekCaller(id: string, lately?: boolean): Promise<PeekedCaller | undefined>;
  /** Agents of a project in registration order. */
  listAgents(project: string): Promise<AgentRow[]>;
  countOnlineAgents(): Promise<number>;
  /**
   * One decision on an agent, found by id or by (project, case-folded name), and on every lease
   * naming it as holder or in its queue (each with its queue), all in one transaction: nobody can
   * renew, be granted or queue behind those leases in between.
   */
  decideAgentLeases<T>(
    find: { agentId: string } | { project: string; nameKey: string },
    decide: (agent: AgentRow | undefined, held: HeldResource[], nowMs: number) => AgentLeasesDecision<T>,
  ): Promise<T>;
  /**
   * Deletes every agent offline and last seen `retainMs` or more before the store's time that no
   * open message (to or from it) and no live lease names, with its stream. Returns them.
   */
  forgetAgents(retainMs: number, change: ChangeOf<AgentRow>): Promise<AgentRow[]>;
  /**
   * Any other change to one agent (activity, heartbeat, unregister). `project`, when the caller
   * knows it (an authenticated agent's: an agent's project never changes), spares a store that
   * must know a decision's project before it begins (PostgreSQL's) a read; a decision on an
   * agent of another project is then a bug, and throws.
   */
  decideAgent<T>(id: string, decide: (current: AgentRow | undefined, nowMs: number) => Decision<AgentRow, T>, project?: string): Promise<T>;
  /**
   * A decision on one agent made on `read`, its row as the caller read it (perhaps lately, D86),
   * for a decision that records no change (an online agent's activity): it holds none of the
   * project's heads, so it joins no batch. What it writes is written only if the row is still
   * `read` (every column), in one statement of its own. Answers undefined, having written
   * nothing, when the row moved on or the decision records a change: the caller then decides
   * with decideAgent.
   */
  decideAgentAsRead<T>(read: AgentRow, decide: (current: AgentRow, nowMs: number) => Decision<AgentRow, T>): Promise<{ result: T } | undefined>;
  /** Marks every online agent offline (hub start), recording `change` for each. */
  markAllAgentsOffline(change: ChangeOf<AgentRow>): Promise<void>;
  /**
   * Marks offline every online agent last seen more than `staleAfterMs` before the sweep's time
   * (the store's, as for decisions), recording `change` for each; returns them as updated.
   */
  sweepStaleAgents(staleAfterMs: number, change: ChangeOf<AgentRow>): Promise<AgentRow[]>;

  decideRuntime<T>(
    project: string,
    runtimeId: string,
    decide: (current: RuntimeRow | undefined, nowMs: number) => Decision<RuntimeRow, T>,
  ): Promise<T>;
  listRuntimes(project: string): Promise<RuntimeRow[]>;
  /**
   * Runtimes whose last heartbeat is more than `staleAfterMs` before the sweep's time and whose
   * expiry is not recorded yet: records `change` for each, once per lapse (a heartbeat after it
   * makes the next lapse count again). Returns them.
   */
  sweepExpiredRuntimes(staleAfterMs: number, change: ChangeOf<RuntimeRow>): Promise<RuntimeRow[]>;

  /** The agents and runtimes of a project, and the head of its presence changes they reflect. */
  presenceSnapshot(project: string): Promise<{ agents: AgentRow[]; runtimes: RuntimeRow[]; head: number }>;
}
