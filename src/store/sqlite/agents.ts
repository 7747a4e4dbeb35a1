import type Database from "better-sqlite3";
import type { AgentStore } from "../agent-store.js";
import { changesOf, type ChangeOf } from "../change-feed.js";
import { agentFromDb, byRegistration, checkAgentProject, leaseFromDb, runtimeFromDb, sameAgentRow, type AgentDb, type RuntimeDb } from "../rows.js";
import type { StoreAccess } from "./batch.js";
import type { createSqliteLeases } from "./leases.js";
import type { AgentRow, RuntimeRow } from "../../domain.js";

/**
 * The presence concern of the SQLite store: agents and runtimes, each decision one savepoint of
 * a batch. Ending an agent's instance decides on the agent and every lease it holds or waits for
 * in that same savepoint, through the lease concern's own writes (leases.ts).
 */
export function createSqliteAgents(
  db: Database.Database,
  { tx, changeTx, read, peek, now, head }: StoreAccess,
  leases: Pick<ReturnType<typeof createSqliteLeases>, "apply" | "waitersOf" | "heldBy">,
  /** Whether a project has managed tokens as committed (sqlite/tokens.ts), inside a peek. */
  projectHasTokens: (project: string) => boolean,
) {
  const q = {
    agentById: db.prepare<[string], AgentDb>("SELECT * FROM agents WHERE id = ?"),
    agentByName: db.prepare<[string, string], AgentDb>("SELECT * FROM agents WHERE project = ? AND name_key = ?"),
    agentsOfProject: db.prepare<[string], AgentDb>("SELECT * FROM agents WHERE project = ? ORDER BY rowid"),
    onlineCount: db.prepare<[], { n: number }>("SELECT count(*) AS n FROM agents WHERE online = 1"),
    upsertAgent: db.prepare(
      `INSERT INTO agents (id, project, name, name_key, purpose, model, host, key_hash, connected_at, last_seen_at, online)
       VALUES (@id, @project, @name, @name_key, @purpose, @model, @host, @key_hash, @connected_at, @last_seen_at, @online)
       ON CONFLICT (id) DO UPDATE SET project = excluded.project, name = excluded.name, name_key = excluded.name_key,
         purpose = excluded.purpose, model = excluded.model, host = excluded.host, key_hash = excluded.key_hash,
         connected_at = excluded.connected_at, last_seen_at = excluded.last_seen_at, online = excluded.online`,
    ),
    allOffline: db.prepare<[], AgentDb & { reg: number }>("UPDATE agents SET online = 0 WHERE online = 1 RETURNING rowid AS reg, *"),
    staleAgents: db.prepare<[number], AgentDb & { reg: number }>(
      "UPDATE agents SET online = 0 WHERE online = 1 AND last_seen_at < ? RETURNING rowid AS reg, *",
    ),
    forgettable: db.prepare<[number, number], AgentDb>(
      `SELECT * FROM agents a WHERE online = 0 AND last_seen_at <= ?
         AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.status IN ('queued', 'delivered') AND (m.to_id = a.id OR m.from_id = a.id))
         AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.project = a.project AND l.holder_agent_id = a.id AND l.expires_at > ?)
         AND NOT EXISTS (SELECT 1 FROM lease_waiters w WHERE w.project = a.project AND w.agent_id = a.id)
       ORDER BY rowid`,
    ),
    deleteAgent: db.prepare("DELETE FROM agents WHERE id = ?"),
    deleteInboxStream: db.prepare("DELETE FROM inbox_streams WHERE agent_id = ?"),
    deleteInboxEvents: db.prepare("DELETE FROM inbox_events WHERE agent_id = ?"),
    runtime: db.prepare<[string, string], RuntimeDb>("SELECT * FROM runtime_presence WHERE project = ? AND runtime_id = ?"),
    runtimesOfProject: db.prepare<[string], RuntimeDb>("SELECT * FROM runtime_presence WHERE project = ? ORDER BY runtime_id"),
    expiredRuntimes: db.prepare<[number], RuntimeDb>(
      "UPDATE runtime_presence SET expiry_noted = 1 WHERE expiry_noted = 0 AND heartbeat_at <= ? RETURNING *",
    ),
    upsertRuntime: db.prepare(
      `INSERT INTO runtime_presence (project, runtime_id, host, registered_at, heartbeat_at)
       VALUES (@project, @runtime_id, @host, @registered_at, @heartbeat_at)
       ON CONFLICT (project, runtime_id) DO UPDATE SET host = excluded.host,
         registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at, expiry_noted = 0`,
    ),
  };

  const agentRow = (id: string): AgentRow | undefined => {
    const r = q.agentById.get(id);
    return r && agentFromDb(r);
  };

  /**
   * Rows `peekAgent` read, by id, so that an authenticated call (a peek of its agent) reads
   * nothing. Filled only by peeks, which run outside any batch (a batch goes from BEGIN to COMMIT
   * without yielding), and an id is dropped by every statement that writes its row, in the same
   * batch: so an entry is always the row as last committed. Only this store writes the file.
   * Emptied past `peekedMax` entries.
   */
  const peeked = new Map<string, AgentRow>();
  const peekedMax = 65_536;
  const peekRow = (id: string): AgentRow | undefined => {
    const hit = peeked.get(id);
    if (hit) return hit;
    const row = agentRow(id);
    if (row) {
      if (peeked.size >= peekedMax) peeked.clear();
      peeked.set(id, row);
    }
    return row;
  };
  /** The rows a statement wrote or is about to write leave `peeked`. */
  const unpeek = <R extends { id: string }>(rows: R[]): R[] => {
    for (const r of rows) peeked.delete(r.id);
    return rows;
  };

  /** A project's runtimes by id, inside the caller's read (the run snapshot's too: sync.ts). */
  const runtimesNow = (project: string): RuntimeRow[] => q.runtimesOfProject.all(project).map(runtimeFromDb);

  function writeAgent(a: AgentRow): void {
    unpeek([a]);
    q.upsertAgent.run({
      id: a.id,
      project: a.project,
      name: a.name,
      name_key: a.name.toLowerCase(),
      purpose: a.purpose,
      model: a.model ?? null,
      host: a.host ?? null,
      key_hash: a.keyHash,
      connected_at: a.connectedAtMs,
      last_seen_at: a.lastSeenAtMs,
      online: a.online ? 1 : 0,
    });
  }

  /** One sweep decision: the rows `update` changes at the store's time, each recorded with its change. */
  function sweep<R extends { project: string }>(update: (nowMs: number) => R[], change: ChangeOf<R>): Promise<R[]> {
    return changeTx((record) => {
      const nowMs = now();
      const rows = update(nowMs);
      for (const row of rows) {
        const c = change(row, nowMs);
        record(row.project, c.stream, c.body, nowMs);
      }
      return rows;
    });
  }

  const store: AgentStore = {
    getAgent: (id) => read(() => agentRow(id)),
    // async: a statement that throws (the file closed) rejects, as the durable read would.
    peekCaller: async (id) =>
      peek(() => {
        const agent = peekRow(id);
        return agent && { agent, projectHasTokens: projectHasTokens(agent.project) };
      }),
    listAgents: (project) => read(() => q.agentsOfProject.all(project).map(agentFromDb)),
    countOnlineAgents: () => read(() => q.onlineCount.get()!.n),

    decideAgent(id, decide, known) {
      return changeTx((record) => {
        const r = q.agentById.get(id);
        checkAgentProject(id, r, known);
        const nowMs = now();
        const d = decide(r && agentFromDb(r), nowMs);
        if (d.write) writeAgent(d.write);
        const project = d.write?.project ?? r?.project;
        for (const c of changesOf(d)) {
          if (project === undefined) throw new Error(`a decision on unknown agent ${id} recorded a change`);
          record(project, c.stream, c.body, nowMs);
        }
        return d.result;
      });
    },

    decideAgentAsRead(read, decide) {
      return changeTx(() => {
        const r = q.agentById.get(read.id);
        const cur = r && agentFromDb(r);
        if (cur === undefined || !sameAgentRow(cur, read)) return undefined;
        const d = decide(cur, now());
        if (changesOf(d).length > 0) return undefined;
        if (d.write) {
          if (d.write.id !== cur.id) throw new Error(`a decision on agent ${cur.id} wrote agent ${d.write.id}`);
          writeAgent(d.write);
        }
        return { result: d.result };
      });
    },

    decideAgentLeases(find, decide) {
      return changeTx((record) => {
        const r = "agentId" in find ? q.agentById.get(find.agentId) : q.agentByName.get(find.project, find.nameKey);
        const nowMs = now();
        const rows = r ? leases.heldBy(r.project, r.id) : [];
        const held = rows.map((l) => ({ lease: leaseFromDb(l), waiters: leases.waitersOf(l.project, l.name) }));
        const d = decide(r && agentFromDb(r), held, nowMs);
        if (d.write) writeAgent(d.write);
        const project = d.write?.project ?? r?.project;
        if (project === undefined && (changesOf(d).length > 0 || d.leases?.length)) throw new Error("a decision on an unknown agent wrote leases or changes");
        for (const c of changesOf(d)) record(project!, c.stream, c.body, nowMs);
        for (const { key, decision } of d.leases ?? []) {
          const row = rows.find((l) => l.project === key.project && l.name === key.name);
          if (!row) throw new Error(`an agent decision tried to decide lease ${JSON.stringify(key)}, which it was not shown`);
          leases.apply(key, row, decision, record, nowMs);
        }
        return d.result;
      });
    },

    forgetAgents(retainMs, change) {
      return sweep((nowMs) => {
        const gone = q.forgettable.all(nowMs - retainMs, nowMs).map(agentFromDb);
        for (const a of gone) {
          q.deleteInboxEvents.run(a.id);
          q.deleteInboxStream.run(a.id);
          unpeek([a]);
          q.deleteAgent.run(a.id);
        }
        return gone;
      }, change);
    },

    async markAllAgentsOffline(change) {
      await sweep(() => unpeek(byRegistration(q.allOffline.all()).map(agentFromDb)), change);
    },

    sweepStaleAgents: (staleAfterMs, change) =>
      sweep((nowMs) => unpeek(byRegistration(q.staleAgents.all(nowMs - staleAfterMs)).map(agentFromDb)), change),

    decideRuntime(project, runtimeId, decide) {
      return changeTx((record) => {
        const r = q.runtime.get(project, runtimeId);
        const nowMs = now();
        const d = decide(r && runtimeFromDb(r), nowMs);
        if (d.write) {
          q.upsertRuntime.run({
            project: d.write.project,
            runtime_id: d.write.runtimeId,
            host: d.write.host ?? null,
            registered_at: d.write.registeredAtMs,
            heartbeat_at: d.write.heartbeatAtMs,
          });
        }
        for (const c of changesOf(d)) record(project, c.stream, c.body, nowMs);
        return d.result;
      });
    },

    listRuntimes: (project) => read(() => runtimesNow(project)),

    sweepExpiredRuntimes: (staleAfterMs, change) =>
      sweep(
        (nowMs) =>
          q.expiredRuntimes
            .all(nowMs - staleAfterMs)
            .map(runtimeFromDb)
            .sort((a, b) => (a.project === b.project ? cmp(a.runtimeId, b.runtimeId) : cmp(a.project, b.project))),
        change,
      ),

    presenceSnapshot: (project) =>
      read(() => ({
        agents: q.agentsOfProject.all(project).map(agentFromDb),
        runtimes: runtimesNow(project),
        head: head(project, "presence"),
      })),
  };

  /**
   * An agent's row as the running batch sees it, inside a decision: a peeked row is the row as
   * last committed, and none is left for an id this batch wrote, so either it or the file's row
   * is current. The peeked map is not filled here: a row read inside a batch may be rolled back.
   */
  const current = (id: string): AgentRow | undefined => peeked.get(id) ?? agentRow(id);

  return { store, runtimesNow, current, forget: () => peeked.clear() };
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
