import type { AgentStore, PeekedCaller } from "../agent-store.js";
import { changesOf, type ChangeOf } from "../change-feed.js";
import type { HeldResource } from "../lease-store.js";
import { agentFromDb, byRegistration, checkAgentProject, leaseFromDb, runtimeFromDb, type AgentDb, type LeaseDb, type RuntimeDb } from "../rows.js";
import type { createPostgresLeases } from "./leases.js";
import { CoalescedReads } from "./coalesce.js";
import { keyLists } from "./key-list.js";
import { agentColumns, agentColumnsOf, leaseColumns, runtimeColumns, runtimeColumnsOf } from "./rows.js";
import type { PgAccess, PgTx } from "./transaction.js";
import type { AgentRow, RuntimeRow } from "../../domain.js";

/** How long, in hub time, and for how many agents a caller's row read lately serves (D86). */
const latelyMs = 1_000;
const latelyMax = 10_000;

const upsertAgent = `INSERT INTO agents (id, project, name, name_key, purpose, model, host, key_hash, connected_at, last_seen_at, online)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
  ON CONFLICT (id) DO UPDATE SET project = excluded.project, name = excluded.name, name_key = excluded.name_key,
    purpose = excluded.purpose, model = excluded.model, host = excluded.host, key_hash = excluded.key_hash,
    connected_at = excluded.connected_at, last_seen_at = excluded.last_seen_at, online = excluded.online`;

/**
 * An agent's row written only if it still has every column as read (`$12`-`$20`, the nullable
 * ones compared as values), in one statement: an optimistic decision (decideAgentAsRead).
 */
const updateAsRead = `UPDATE agents SET project = $2, name = $3, name_key = $4, purpose = $5, model = $6, host = $7,
    key_hash = $8, connected_at = $9, last_seen_at = $10, online = $11
  WHERE id = $1 AND (project, name, purpose, model, host, key_hash, connected_at, last_seen_at, online)
    IS NOT DISTINCT FROM ($12::text, $13::text, $14::text, $15::text, $16::text, $17::text, $18::bigint, $19::bigint, $20::boolean)
  RETURNING id`;

/** A project's runtimes by id, as `t` sees them (the run snapshot's too: sync.ts). */
export const runtimesOfProject = `SELECT ${runtimeColumns} FROM runtime_presence WHERE project = $1 ORDER BY runtime_id`;

/**
 * The presence concern of the PostgreSQL store, the same decisions as on SQLite (sqlite/agents.ts).
 * A decision locks the agent it decides on (`FOR UPDATE`); ending an instance also locks, in name
 * order, every lease it holds or waits for, and writes them through the lease concern (leases.ts).
 */
export function createPostgresAgents(
  { changeTx, rows, alone, now, hubNow, snapshot, head }: PgAccess,
  leases: Pick<ReturnType<typeof createPostgresLeases>, "apply" | "waitersOf">,
): AgentStore {
  /**
   * The callers' rows this hub read lately (D86), for the calls whose decisions check their
   * caller again (peekCaller's `lately`), for at most `latelyMs` of hub time and `latelyMax`
   * agents. Nothing here is ever an answer: a row this hub writes, or finds stale or gone, is
   * dropped so that the next call reads it.
   */
  const recentRows = new Map<string, { caller: PeekedCaller; atMs: number }>();
  const readLately = (id: string): PeekedCaller | undefined => {
    const r = recentRows.get(id);
    if (r === undefined) return undefined;
    if (hubNow() - r.atMs < latelyMs) return r.caller;
    recentRows.delete(id);
    return undefined;
  };
  const keepLately = (id: string, caller: PeekedCaller | undefined): void => {
    recentRows.delete(id);
    if (caller === undefined) return;
    if (recentRows.size >= latelyMax) recentRows.delete(recentRows.keys().next().value!);
    recentRows.set(id, { caller: { ...caller, recent: true }, atMs: hubNow() });
  };
  /**
   * The row a decision on agent `a.id` left committed, in place of the one read lately, if any
   * (its age, and what it says of the project's tokens, stay). A read answered after a write it
   * began before puts the row from before the write back (writeAgent dropped it): its agent's next
   * decision mends that, so a stale `lastSeenAtMs` costs one activity decision that writes
   * nothing, not one at every call until the row is a second old.
   */
  const settleLately = (a: AgentRow): void => {
    const r = recentRows.get(a.id);
    if (r !== undefined) r.caller = { ...r.caller, agent: a };
  };

  /** The parameters $1-$11 of upsertAgent and updateAsRead. */
  const agentValues = (a: AgentRow): unknown[] => [
    a.id,
    a.project,
    a.name,
    a.name.toLowerCase(),
    a.purpose,
    a.model ?? null,
    a.host ?? null,
    a.keyHash,
    a.connectedAtMs,
    a.lastSeenAtMs,
    a.online,
  ];

  async function writeAgent(t: PgTx, a: AgentRow): Promise<void> {
    recentRows.delete(a.id);
    await t.query(upsertAgent, agentValues(a));
  }

  /**
   * Marks offline the agents `where` selects (locked in registration order), recording a change
   * for each. The projects they are in are read first, and their heads locked before the agents;
   * an agent of another project that goes stale meanwhile is left to the next sweep.
   */
  async function offline(where: string, staleAfterMs: number | undefined, change: ChangeOf<AgentRow>): Promise<AgentRow[]> {
    const params = (nowMs: number) => (staleAfterMs === undefined ? [] : [nowMs - staleAfterMs]);
    const projects = (await rows<{ project: string }>(`SELECT DISTINCT project FROM agents WHERE ${where}`, params(hubNow()))).map((r) => r.project);
    if (projects.length === 0) return [];
    return changeTx(projects, async (t, record) => {
      const nowMs = await now(t);
      const found = (
        await t.query<AgentDb & { reg: number }>(
          `WITH locked AS (SELECT id FROM agents WHERE ${where} AND project = ANY($${params(0).length + 1}::text[]) ORDER BY reg_seq FOR UPDATE)
           UPDATE agents a SET online = false FROM locked WHERE a.id = locked.id RETURNING a.reg_seq AS reg, ${agentColumnsOf("a")}`,
          [...params(nowMs), projects],
        )
      ).rows;
      const swept = byRegistration(found).map(agentFromDb);
      for (const a of swept) recentRows.delete(a.id);
      for (const a of swept) {
        const c = change(a, nowMs);
        await record(a.project, c.stream, c.body, nowMs);
      }
      return swept;
    });
  }

  /**
   * The project of agent `id`, which never changes: the project its decisions declare (none for
   * an unknown agent, whose decision records nothing).
   */
  const projectOf = async (id: string): Promise<string[]> => (await rows<{ project: string }>("SELECT project FROM agents WHERE id = $1", [id])).map((r) => r.project);

  const getAgent = async (id: string): Promise<AgentRow | undefined> => {
    const [r] = await rows<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE id = $1`, [id]);
    return r && agentFromDb(r);
  };

  const callerReads = keyLists(
    (ids) => `SELECT ${agentColumns}, EXISTS (SELECT 1 FROM project_tokens t WHERE t.project = agents.project) AS has_tokens
       FROM agents WHERE id IN (${ids})`,
  );
  const callers = new CoalescedReads(async (ids: string[]) => {
    const { text, params } = callerReads(ids);
    const found = await rows<AgentDb & { has_tokens: boolean }>(text, params);
    return new Map(found.map((r) => [r.id, { agent: agentFromDb(r), projectHasTokens: r.has_tokens }]));
  });

  return {
    getAgent,
    /**
     * Committed in PostgreSQL means durable: the latest row is the durable one. Every call's
     * authentication reads this: the reads that arrive together go as one statement, and a call
     * whose decision checks its caller again takes the row read lately, if any (D86).
     */
    async peekCaller(id, lately) {
      const kept = lately ? readLately(id) : undefined;
      if (kept) return kept;
      const read = await callers.read(id);
      keepLately(id, read);
      return read;
    },

    async listAgents(project) {
      return (await rows<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE project = $1 ORDER BY reg_seq`, [project])).map(agentFromDb);
    },

    async countOnlineAgents() {
      return (await rows<{ n: number }>("SELECT count(*)::int AS n FROM agents WHERE online"))[0]!.n;
    },

    async decideAgent(id, decide, known) {
      /** The agent's row as the decision's last run left it. */
      let left: AgentRow | undefined;
      const result = await changeTx(known === undefined ? await projectOf(id) : [known], async (t, record) => {
        const [r] = (await t.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE id = $1 FOR UPDATE`, [id])).rows;
        checkAgentProject(id, r, known);
        const nowMs = await now(t);
        const cur = r && agentFromDb(r);
        const d = decide(cur, nowMs);
        if (d.write) await writeAgent(t, d.write);
        const project = d.write?.project ?? r?.project;
        for (const c of changesOf(d)) {
          if (project === undefined) throw new Error(`a decision on unknown agent ${id} recorded a change`);
          await record(project, c.stream, c.body, nowMs);
        }
        left = d.write ?? cur;
        return d.result;
      });
      // Committed (the row was locked from its read to the commit).
      if (left !== undefined) settleLately(left);
      return result;
    },

    async decideAgentAsRead(read, decide) {
      // Its time as this hub follows the database's clock: it reads nothing first.
      const d = decide(read, hubNow());
      if (changesOf(d).length > 0) return undefined;
      const a = d.write;
      if (a === undefined) return { result: d.result };
      if (a.id !== read.id) throw new Error(`a decision on agent ${read.id} wrote agent ${a.id}`);
      const written = await alone<{ id: string }>(updateAsRead, [
        ...agentValues(a),
        read.project,
        read.name,
        read.purpose,
        read.model ?? null,
        read.host ?? null,
        read.keyHash,
        read.connectedAtMs,
        read.lastSeenAtMs,
        read.online,
      ]);
      if (written.length === 0) return undefined;
      settleLately(a);
      return { result: d.result };
    },

    async decideAgentLeases(find, decide) {
      return changeTx("agentId" in find ? await projectOf(find.agentId) : find.project, async (t, record) => {
        const [r] = (
          "agentId" in find
            ? await t.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE id = $1 FOR UPDATE`, [find.agentId])
            : await t.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE project = $1 AND name_key = $2 FOR UPDATE`, [find.project, find.nameKey])
        ).rows;
        // The leases it holds or waits for, locked in name order, then their queues.
        const held = r
          ? (
              await t.query<LeaseDb>(
                `SELECT ${leaseColumns} FROM leases WHERE project = $1 AND (holder_agent_id = $2
                   OR name IN (SELECT name FROM lease_waiters WHERE project = $1 AND agent_id = $2)) ORDER BY name FOR UPDATE`,
                [r.project, r.id],
              )
            ).rows
          : [];
        const nowMs = await now(t);
        const shown: HeldResource[] = [];
        for (const l of held) shown.push({ lease: leaseFromDb(l), waiters: await leases.waitersOf(t, l) });
        const d = decide(r && agentFromDb(r), shown, nowMs);
        if (d.write) await writeAgent(t, d.write);
        const project = d.write?.project ?? r?.project;
        if (project === undefined && (changesOf(d).length > 0 || d.leases?.length)) throw new Error("a decision on an unknown agent wrote leases or changes");
        for (const c of changesOf(d)) await record(project!, c.stream, c.body, nowMs);
        for (const { key, decision } of d.leases ?? []) {
          const row = held.find((l) => l.project === key.project && l.name === key.name);
          if (!row) throw new Error(`an agent decision tried to decide lease ${JSON.stringify(key)}, which it was not shown`);
          await leases.apply(t, key, row, row, decision, record, nowMs);
        }
        return d.result;
      });
    },

    async forgetAgents(retainMs, change) {
      // The projects first: their presence heads are locked by the decision that records each
      // forgotten agent's change (as the offline sweeps do), and it forgets only in them.
      const projects = (await rows<{ project: string }>("SELECT DISTINCT project FROM agents WHERE online = false AND last_seen_at <= $1", [hubNow() - retainMs])).map((r) => r.project);
      if (projects.length === 0) return [];
      return changeTx(projects, async (t, record) => {
        const nowMs = await now(t);
        const gone = byRegistration(
          (
            await t.query<AgentDb & { reg: number }>(
              `DELETE FROM agents a WHERE a.id IN (
                 SELECT id FROM agents c WHERE c.online = false AND c.last_seen_at <= $1 AND c.project = ANY($3::text[])
                   AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.status IN ('queued', 'delivered') AND (m.to_id = c.id OR m.from_id = c.id))
                   AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.project = c.project AND l.holder_agent_id = c.id AND l.expires_at > $2)
                   AND NOT EXISTS (SELECT 1 FROM lease_waiters w WHERE w.project = c.project AND w.agent_id = c.id)
                 ORDER BY c.reg_seq FOR UPDATE SKIP LOCKED)
               RETURNING a.reg_seq AS reg, ${agentColumnsOf("a")}`,
              [nowMs - retainMs, nowMs, projects],
            )
          ).rows,
        ).map(agentFromDb);
        const ids = gone.map((a) => a.id);
        for (const id of ids) recentRows.delete(id);
        if (ids.length > 0) {
          await t.query("DELETE FROM inbox_events WHERE agent_id = ANY($1)", [ids]);
          await t.query("DELETE FROM inbox_streams WHERE agent_id = ANY($1)", [ids]);
        }
        for (const a of gone) {
          const c = change(a, nowMs);
          await record(a.project, c.stream, c.body, nowMs);
        }
        return gone;
      });
    },

    async markAllAgentsOffline(change) {
      await offline("online", undefined, change);
    },

    sweepStaleAgents: (staleAfterMs, change) => offline("online AND last_seen_at < $1", staleAfterMs, change),

    decideRuntime(project, runtimeId, decide) {
      return changeTx(project, async (t, record) => {
        const [r] = (await t.query<RuntimeDb>(`SELECT ${runtimeColumns} FROM runtime_presence WHERE project = $1 AND runtime_id = $2 FOR UPDATE`, [project, runtimeId])).rows;
        const nowMs = await now(t);
        const d = decide(r && runtimeFromDb(r), nowMs);
        if (d.write) {
          await t.query(
            `INSERT INTO runtime_presence (project, runtime_id, host, registered_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (project, runtime_id) DO UPDATE SET host = excluded.host,
               registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at, expiry_noted = false`,
            [d.write.project, d.write.runtimeId, d.write.host ?? null, d.write.registeredAtMs, d.write.heartbeatAtMs],
          );
        }
        for (const c of changesOf(d)) await record(project, c.stream, c.body, nowMs);
        return d.result;
      });
    },

    async listRuntimes(project): Promise<RuntimeRow[]> {
      return (await rows<RuntimeDb>(runtimesOfProject, [project])).map(runtimeFromDb);
    },

    async sweepExpiredRuntimes(staleAfterMs, change) {
      // Their projects first, whose heads are locked before the runtimes (as for agents, above).
      const stale = "NOT expiry_noted AND heartbeat_at <= $1";
      const projects = (await rows<{ project: string }>(`SELECT DISTINCT project FROM runtime_presence WHERE ${stale}`, [hubNow() - staleAfterMs])).map((r) => r.project);
      if (projects.length === 0) return [];
      return changeTx(projects, async (t, record) => {
        const nowMs = await now(t);
        // Locked in key order, and skipped when another replica's sweep holds them: that sweep
        // records their lapse.
        const expired = (
          await t.query<RuntimeDb>(
            `WITH due AS (SELECT project, runtime_id FROM runtime_presence WHERE ${stale} AND project = ANY($2::text[])
               ORDER BY project, runtime_id FOR UPDATE SKIP LOCKED)
             UPDATE runtime_presence r SET expiry_noted = true FROM due WHERE r.project = due.project AND r.runtime_id = due.runtime_id
             RETURNING ${runtimeColumnsOf("r")}`,
            [nowMs - staleAfterMs, projects],
          )
        ).rows
          .map(runtimeFromDb)
          .sort((a, b) => (a.project === b.project ? cmp(a.runtimeId, b.runtimeId) : cmp(a.project, b.project)));
        for (const r of expired) {
          const c = change(r, nowMs);
          await record(r.project, c.stream, c.body, nowMs);
        }
        return expired;
      });
    },

    presenceSnapshot(project) {
      return snapshot(async (t) => ({
        agents: (await t.query<AgentDb>(`SELECT ${agentColumns} FROM agents WHERE project = $1 ORDER BY reg_seq`, [project])).rows.map(agentFromDb),
        runtimes: (await t.query<RuntimeDb>(runtimesOfProject, [project])).rows.map(runtimeFromDb),
        head: await head(t, project, "presence"),
      }));
    },
  };
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
