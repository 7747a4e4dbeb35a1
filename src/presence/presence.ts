import type { AgentCaller } from "../caller.js";
import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
import { newId, sha256Hex } from "../ids.js";
import type { Observer } from "../observe.js";
import { reportForceRelease } from "../lease/report.js";
import { decideDropWaiters, decideInstanceEnds } from "../lease/rules.js";
import type { AgentStore } from "../store/agent-store.js";
import type { ChangeFeed, ChangeRead, Decision, StreamChange } from "../store/change-feed.js";
import type { HeldResource } from "../store/lease-store.js";
import { agentName, isOpaqueId, optionalString, projectName, requireString } from "../validate.js";
import { holdsKey, type AgentRow, type LeaseView, type RuntimeRow } from "../domain.js";

export type PresenceState = "online" | "stale" | "offline";

/** An agent as others see it: no key; presence computed on the hub clock. */
export interface AgentView extends Omit<AgentRow, "keyHash"> {
  presence: PresenceState;
  leaseExpiresAtMs: number;
}

export interface RuntimeView extends Omit<RuntimeRow, "project"> {
  leaseExpiresAtMs: number;
  presence: "online" | "expired";
}

/** What a presence change stores: the agent or runtime as the decision left it. */
export interface PresenceChangeBody {
  agent?: AgentView;
  runtime?: RuntimeView;
  /** An agent retention forgot: it leaves every view of the project. */
  forgotten?: { id: string; name: string };
}

/**
 * A stored presence change: `seq` numbers the project's presence changes without gaps, the same
 * on every hub sharing the store (WatchPresence's cursor).
 */
export interface PresenceChange extends PresenceChangeBody {
  seq: number;
  project: string;
}

/** The change as watchers and streams get it, from the store's row. */
export const presenceChangeOf = (c: StreamChange): PresenceChange => ({ seq: c.seq, project: c.project, ...(c.body as PresenceChangeBody) });

const change = (body: PresenceChangeBody) => ({ stream: "presence" as const, body });

export interface PresenceDeps {
  store: { agents: AgentStore; changes: ChangeFeed };
  clock: Clock;
  observer: Observer;
  staleAfterMs: number;
}

const defaultPurpose = "General-purpose agent";

/**
 * An instance of an agent ends (takeover, eviction): every lease it holds is released the way an
 * operator releases one (its token stays as the floor; the first waiter of another agent gets the
 * next token), and its waiting acquires leave their queues, all in the decision that ends it.
 */
function releaseHeld(agentId: string, resources: HeldResource[], nowMs: number) {
  const released: LeaseView[] = [];
  const leases = resources.map(({ lease, waiters }) => {
    const decision = decideInstanceEnds(lease, { agentId, nowMs }, waiters);
    if (decision.result.released) released.push(decision.result.released);
    return { key: { project: lease.project, name: lease.name }, decision };
  });
  return { leases, released };
}

/**
 * An agent's instance ends and its leases stay (UnregisterAgent; RegisterAgent resuming it): its
 * waiting acquires, which no key answers for any more, leave their queues in that decision.
 */
function dropWaiters(agentId: string, resources: HeldResource[], nowMs: number) {
  return resources.map(({ lease, waiters }) => ({
    key: { project: lease.project, name: lease.name },
    decision: decideDropWaiters(lease, { agentId, nowMs }, waiters),
  }));
}

/**
 * Authenticated calls refresh last_seen_at at most this often (heartbeats always do), so a
 * burst of calls costs one write, not one per call. Far below any stale-after interval.
 */
export const activityWriteIntervalMs = 1_000;

/**
 * Agents and runtimes: registration, activity, heartbeats, staleness. Every change watchers see
 * (an agent registered, resumed, unregistered, stale or back; a runtime's heartbeat or lapse) is
 * recorded by the decision that makes it, in its transaction.
 */
export function createPresence({ store, clock, observer, staleAfterMs }: PresenceDeps) {
  const view = (a: AgentRow, nowMs: number): AgentView => {
    const { keyHash: _secret, ...rest } = a;
    const leaseExpiresAtMs = a.lastSeenAtMs + staleAfterMs;
    const presence: PresenceState = !a.online ? "offline" : nowMs < leaseExpiresAtMs ? "online" : "stale";
    return { ...rest, presence, leaseExpiresAtMs };
  };

  /** Runtimes as views see them now (online or expired). */
  const runtimeViews = (rows: RuntimeRow[]): RuntimeView[] => {
    const nowMs = clock.now();
    return rows.map((r) => runtimeView(r, nowMs));
  };
  const runtimeView = (r: RuntimeRow, nowMs: number): RuntimeView => {
    const { project: _p, ...rest } = r;
    const leaseExpiresAtMs = r.heartbeatAtMs + staleAfterMs;
    return { ...rest, leaseExpiresAtMs, presence: leaseExpiresAtMs > nowMs ? "online" : "expired" };
  };

  const logFields = (a: AgentRow) => ({
    agentId: a.id,
    name: a.name,
    project: a.project,
    ...(a.host !== undefined && { host: a.host }),
  });

  /**
   * Marks `caller`'s agent online now; the write is skipped while last_seen_at is fresh, and a
   * revival is a change. Only for the instance that holds the caller's key (when it has one): a
   * call authenticated just before its agent was unregistered, evicted or taken over must not
   * bring it back online (its streams' keep-alives included). The decision is in the caller's
   * project, which an agent never changes.
   */
  async function touch(caller: AgentCaller, force: boolean): Promise<AgentRow> {
    return store.agents.decideAgent(caller.agentId, (cur, nowMs) => {
      if (!holdsKey(cur, caller.keyHash)) throw errors.invalidAgentIdentity();
      return seen(cur, nowMs, force);
    }, caller.project);
  }

  /** `cur` seen now: online, last seen `nowMs` (the write skipped while that is fresh); a revival is a change. */
  function seen(cur: AgentRow, nowMs: number, force: boolean): Decision<AgentRow, AgentRow> {
    if (!force && cur.online && nowMs - cur.lastSeenAtMs < activityWriteIntervalMs) return { result: cur };
    const next = { ...cur, online: true, lastSeenAtMs: nowMs };
    return { write: next, ...(!cur.online && { change: change({ agent: view(next, nowMs) }) }), result: next };
  }

  return {
    view,

    /**
     * Registers a new agent or resumes the offline one holding the name (case-insensitive).
     * Issues a new key either way. Throws protocol_error, duplicate_agent_name.
     */
    async register(input: { name: string; purpose?: string; project: string; model?: string; host?: string; takeover?: boolean }) {
      const name = agentName(input.name);
      const purpose = optionalString("purpose", input.purpose, 256) || defaultPurpose;
      const project = projectName("project", input.project);
      const model = optionalString("model", input.model, 128);
      const host = optionalString("host", input.host, 64);
      const agentKey = newId("key");
      const registered = (existing: AgentRow | undefined, nowMs: number): AgentRow => ({
        id: existing?.id ?? newId("agt"),
        project,
        name,
        purpose,
        ...(model !== undefined && { model }),
        ...(host !== undefined && { host }),
        keyHash: sha256Hex(agentKey),
        connectedAtMs: nowMs,
        lastSeenAtMs: nowMs,
        online: true,
      });
      const { agent, resumed, nowMs, takenOver, released } = input.takeover
        ? // The old instance's key, leases and queued acquires end in the registration's transaction.
          await store.agents.decideAgentLeases({ project, nameKey: name.toLowerCase() }, (existing, held, nowMs) => {
            const agent = registered(existing, nowMs);
            const { leases, released } = releaseHeld(agent.id, held, nowMs);
            return {
              write: agent,
              change: change({ agent: view(agent, nowMs) }),
              leases,
              result: { agent, resumed: existing !== undefined, nowMs, takenOver: existing?.online === true, released },
            };
          })
        : // A resumed agent keeps its leases (it releases them with their tokens); the waiting
          // acquires of its old instance, which no key answers for any more, leave their queues
          // in the same decision, as at UnregisterAgent, so that no lease is handed to them.
          await store.agents.decideAgentLeases({ project, nameKey: name.toLowerCase() }, (existing, held, nowMs) => {
            if (existing?.online) throw errors.duplicateAgentName(name);
            const agent = registered(existing, nowMs);
            return {
              write: agent,
              change: change({ agent: view(agent, nowMs) }),
              leases: dropWaiters(agent.id, held, nowMs),
              result: { agent, resumed: existing !== undefined, nowMs, takenOver: false, released: [] as LeaseView[] },
            };
          });
      observer.count("registrations");
      if (takenOver) observer.log("agent_taken_over", { ...logFields(agent), releasedLeases: released.length });
      observer.log(resumed ? "agent_resumed" : "agent_registered", logFields(agent));
      for (const l of released) reportForceRelease(observer, l, takenOver ? "takeover" : "resume");
      return { agent: view(agent, nowMs), agentKey, resumed, takenOver, releasedLeases: released };
    },

    /**
     * An operator evicts an agent of `project`: offline, its key rotated away (its streams end),
     * its leases released (floors kept), its queued acquires dropped, in one transaction. Its
     * messages stay. Throws target_not_found (no such agent in the project).
     */
    async evict(project: string, agentId: string): Promise<{ agent: AgentView; releasedLeases: LeaseView[] }> {
      const id = requireString("agentId", agentId, 64);
      const { agent, released, nowMs } = await store.agents.decideAgentLeases({ agentId: id }, (cur, held, nowMs) => {
        // Another project's agent is as unknown here as one that never was.
        if (!cur || cur.project !== project) throw errors.targetNotFound(id);
        const agent: AgentRow = { ...cur, online: false, keyHash: sha256Hex(newId("key")) };
        const { leases, released } = releaseHeld(agent.id, held, nowMs);
        return { write: agent, change: change({ agent: view(agent, nowMs) }), leases, result: { agent, released, nowMs } };
      });
      observer.log("agent_evicted", { ...logFields(agent), releasedLeases: released.length });
      for (const l of released) reportForceRelease(observer, l, "eviction");
      return { agent: view(agent, nowMs), releasedLeases: released };
    },

    /**
     * Forgets the agents offline for `retainMs` or more that nothing open names (no open message
     * to or from them, no live lease): a fleet's short-lived agents do not pile up forever.
     */
    async forgetOffline(retainMs: number): Promise<number> {
      const gone = await store.agents.forgetAgents(retainMs, (a) => change({ forgotten: { id: a.id, name: a.name } }));
      for (const a of gone) observer.log("agent_forgotten", logFields(a));
      return gone.length;
    },

    /**
     * Records authenticated activity of an agent (any agent call, a keep-alive of its streams) for
     * the instance `caller` was authenticated as (its key); `seen` is its row as just read. Throws
     * invalid_agent_identity when the key changed since (unregistered, evicted, taken over): the
     * agent stays as that left it.
     */
    async recordActivity(caller: AgentCaller, read?: AgentRow): Promise<AgentRow> {
      // The row the caller just read says nothing is due: spare the store a decision (the one
      // below would write nothing either), so an authenticated call costs one read.
      if (read?.online && clock.now() - read.lastSeenAtMs < activityWriteIntervalMs) return read;
      // An online agent's activity records no change: it is decided on the row as read, outside
      // the project's batches. A row that moved on since, or an agent coming back online (a
      // change), is decided on the latest row; a refusal comes only from that decision.
      if (read?.online && holdsKey(read, caller.keyHash)) {
        const quick = await store.agents.decideAgentAsRead(read, (cur, nowMs) => seen(cur, nowMs, false));
        if (quick) return quick.result;
      }
      return touch(caller, false);
    },

    /** Explicit heartbeat: always renews the presence lease. */
    async heartbeat(caller: AgentCaller): Promise<AgentView> {
      const agent = await touch(caller, true);
      return view(agent, agent.lastSeenAtMs);
    },

    /**
     * Marks the agent offline and rotates its key to one nobody holds.
     * @NOTE decision D39: the old key is refused afterwards; RegisterAgent resumes the agent.
     */
    async unregister(caller: AgentCaller): Promise<void> {
      // Its leases stay (a resumed agent releases them with their tokens); its waiting acquires,
      // which no key can answer for any more, leave their queues in the same decision, so that
      // no lease is handed to them.
      const agent = await store.agents.decideAgentLeases({ agentId: caller.agentId }, (cur, held, nowMs) => {
        // Only the instance that holds the key: an unregister authenticated just before a takeover
        // (or an eviction and a resume) must not end the instance that replaced it.
        if (!cur || (caller.keyHash !== undefined && cur.keyHash !== caller.keyHash)) throw errors.invalidAgentIdentity();
        const next = { ...cur, online: false, lastSeenAtMs: nowMs, keyHash: sha256Hex(newId("key")) };
        return { write: next, change: change({ agent: view(next, nowMs) }), leases: dropWaiters(cur.id, held, nowMs), result: next };
      });
      observer.log("agent_unregistered", logFields(agent));
    },

    /**
     * Throws invalid_agent_identity unless the agent still exists with the key `caller` was
     * authenticated with: what a stream checks when its agent changes, so the streams of an
     * instance that was unregistered, evicted or taken over end. Answers the agent's view.
     */
    async requireKey(caller: AgentCaller): Promise<AgentView> {
      const agent = await store.agents.getAgent(caller.agentId);
      if (!agent || (caller.keyHash !== undefined && agent.keyHash !== caller.keyHash)) throw errors.invalidAgentIdentity();
      return view(agent, clock.now());
    },

    /** One agent's public view. Throws invalid_agent_identity when unknown. */
    async get(agentId: string): Promise<AgentView> {
      const agent = await store.agents.getAgent(agentId);
      if (!agent) throw errors.invalidAgentIdentity();
      return view(agent, clock.now());
    },

    /** Agents and runtimes of a project, and the number of the last change they reflect (WatchPresence). */
    async snapshot(project: string) {
      const nowMs = clock.now();
      const { agents, runtimes, head } = await store.agents.presenceSnapshot(project);
      return {
        cursor: head,
        snapshot: { agents: agents.map((a) => view(a, nowMs)), runtimes: runtimes.map((r) => runtimeView(r, nowMs)) },
      };
    },

    /** The project's presence changes after `afterSeq` (a watcher catching up or resuming), and the head. */
    async changes(project: string, afterSeq: number, limit: number): Promise<{ changes: PresenceChange[]; head: number }> {
      const r: ChangeRead = await store.changes.readChanges(project, "presence", afterSeq, limit);
      return { changes: r.changes.map(presenceChangeOf), head: r.head };
    },

    /** Marks every agent offline (a single hub's start: nobody is connected yet). */
    async markAllOffline(): Promise<void> {
      await store.agents.markAllAgentsOffline((a, nowMs) => change({ agent: view(a, nowMs) }));
    },

    /** Agents of the caller's project in registration order. */
    async list(caller: { project: string }, input: { includeOffline: boolean }): Promise<AgentView[]> {
      const nowMs = clock.now();
      const rows = await store.agents.listAgents(caller.project);
      return rows.filter((a) => input.includeOffline || a.online).map((a) => view(a, nowMs));
    },

    /** The runtimes that heartbeated in a project, by runtime id. */
    async runtimes(project: string): Promise<RuntimeView[]> {
      return runtimeViews(await store.agents.listRuntimes(project));
    },

    runtimeViews,

    /** Records a runtime heartbeat. Throws protocol_error, invalid_runtime_id. */
    async reportRuntime(input: { project: string; runtimeId: string; host?: string }) {
      const project = projectName("project", input.project);
      const runtimeId = (input.runtimeId ?? "").trim();
      if (!isOpaqueId(runtimeId)) throw errors.invalidRuntimeId();
      const host = optionalString("host", input.host, 64);
      const { row, first, nowMs } = await store.agents.decideRuntime(project, runtimeId, (cur, nowMs) => {
        const row: RuntimeRow = {
          project,
          runtimeId,
          ...(host !== undefined && { host }),
          registeredAtMs: cur?.registeredAtMs ?? nowMs,
          heartbeatAtMs: nowMs,
        };
        return { write: row, change: change({ runtime: runtimeView(row, nowMs) }), result: { row, first: cur === undefined, nowMs } };
      });
      observer.count("runtimeHeartbeats");
      if (first) observer.log("runtime_registered", { project, runtimeId, ...(host !== undefined && { host }) });
      return { presence: runtimeView(row, nowMs), first };
    },

    /**
     * Marks offline every online agent whose presence lease passed (agent_stale), and records
     * the lapse of every runtime whose presence expired, once each (on the store's time, so
     * replicas sweeping together agree).
     */
    async sweepStale(): Promise<number> {
      const stale = await store.agents.sweepStaleAgents(staleAfterMs, (a, nowMs) => change({ agent: view(a, nowMs) }));
      for (const a of stale) observer.log("agent_stale", logFields(a));
      await store.agents.sweepExpiredRuntimes(staleAfterMs, (r, nowMs) => change({ runtime: runtimeView(r, nowMs) }));
      return stale.length;
    },
  };
}

export type Presence = ReturnType<typeof createPresence>;
