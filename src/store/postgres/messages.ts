import { agentFromDb, expiryDecision, messageFromDb, messageToDb, type AgentDb, type MessageDb } from "../rows.js";
import type { ChangeOf, Listening } from "../change-feed.js";
import type { InboxState, ListMessagesQuery, MessageDecision, MessageStore, SendContext } from "../message-store.js";
import type { SegmentKind } from "./batches.js";
import type { PgAccess, PgRecordChange, PgTx, Statement } from "./transaction.js";
import { agentColumns, messageColumns, messageColumnsOf } from "./rows.js";
import type { createTail } from "./tail.js";
import type { AgentRow, InboxEvent, InboxEventKind, InboxNotice, MessageRow } from "../../domain.js";
import { ChangeListeners } from "../change-listeners.js";

/** When an ended message ended: replied, else cancelled, else expired (its expiry), for retention. */
const endedAt = "COALESCE(replied_at, cancelled_at, expires_at, created_at)";

const columns = Object.keys(messageToDb({} as MessageRow));
const upsertMessage = `INSERT INTO messages (${columns.join(", ")})
  VALUES (${columns.map((_, i) => `$${i + 1}`).join(", ")})
  ON CONFLICT (id) DO UPDATE SET delivered_at = excluded.delivered_at, replied_at = excluded.replied_at,
    cancelled_at = excluded.cancelled_at, status = excluded.status, reply_content = excluded.reply_content,
    reply_created_at = excluded.reply_created_at, error = excluded.error`;

/**
 * The message concern of the PostgreSQL store, the same decisions as on SQLite. Numbering an event
 * locks its agent's stream row until the decision commits, so an agent's events are numbered in
 * commit order whichever replica decides them; a message a decision changes is locked the same
 * way (`FOR UPDATE`). Two replicas sending with one idempotency key race on the unique index:
 * the loser's decision runs again and sees the winner's message (postgres/transaction.ts).
 */
/** The messages an expiry sweep may end. */
const due = "status IN ('queued', 'delivered')";

/**
 * What a run of sends of one project is shown (sendSegment), in one statement: the senders'
 * earlier messages with the same idempotency keys, the agents of the project that a target
 * names (by id, or by name case-insensitively), and those agents' inbox streams, locked until
 * the batch commits; and the senders' own rows, whose keys a send checks (D26: a takeover, an
 * eviction or an unregister, which update the row, either committed before this reads it or waits
 * for the batch). The batch holds the project's heads, and every decision that numbers an
 * event of its agents' streams or writes a message of it holds them too (changes.ts lockHeads),
 * so what this reads stays the latest until the batch commits. The agents are locked too (shared):
 * a statement that changes one on its own (an online agent's activity, agent-store.ts
 * decideAgentAsRead) waits for the batch; the sweep that forgets agents nothing open names holds
 * the heads like any decision that records, and also skips the agents a decision has locked
 * (agents.ts forgetAgents). And whether the project has managed tokens, which a token
 * decision writes holding the heads too.
 */
const loadSends = `WITH c AS (SELECT ${agentColumns}, name_key, reg_seq FROM agents
        WHERE project = $1 AND (id = ANY($4::text[]) OR name_key = ANY($5::text[]) OR id = ANY($6::text[])) ORDER BY id FOR SHARE),
    t AS (SELECT * FROM c WHERE id = ANY($4::text[]) OR name_key = ANY($5::text[])),
    s AS (SELECT agent_id, next_seq FROM inbox_streams WHERE agent_id IN (SELECT id FROM t) ORDER BY agent_id FOR UPDATE)
  SELECT (SELECT coalesce(json_agg(m), '[]') FROM (SELECT ${messageColumns} FROM messages
            WHERE (from_id, idempotency_key) IN (SELECT * FROM unnest($2::text[], $3::text[]))) m) AS existing,
    (SELECT coalesce(json_agg(t ORDER BY t.reg_seq), '[]') FROM t) AS candidates,
    (SELECT coalesce(json_agg(c), '[]') FROM c WHERE id = ANY($6::text[])) AS senders,
    (SELECT coalesce(json_agg(s), '[]') FROM s) AS streams,
    EXISTS (SELECT 1 FROM project_tokens WHERE project = $1) AS has_tokens`;

/** What a run of sends wrote: the streams' next numbers, the messages, their events (each its own table: see together). */
const moveStreams = `INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through) SELECT *, 0, 0 FROM unnest($1::text[], $2::bigint[])
  ON CONFLICT (agent_id) DO UPDATE SET next_seq = excluded.next_seq`;
/** The type of each message column that is not text (migration 002). */
const numeric: Record<string, string> = { hops: "integer", max_hops: "integer", seq: "bigint", created_at: "bigint", expires_at: "bigint", delivered_at: "bigint", replied_at: "bigint", cancelled_at: "bigint", reply_created_at: "bigint" };
/**
 * One array per column, as the other segment writes: a string goes to the server as the driver
 * encodes it (a lone surrogate as U+FFFD), as when each send wrote its own row.
 */
const insertMessages = `INSERT INTO messages (${columns.join(", ")})
  SELECT * FROM unnest(${columns.map((c, i) => `$${i + 1}::${numeric[c] ?? "text"}[]`).join(", ")})`;
const insertEvents = `INSERT INTO inbox_events (agent_id, seq, kind, message_id, created_at) SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[])`;

/** What a decision on one message reads: the deciding agent (shared) and the message (for update), locked in that order. */
const decisionRows = `SELECT (SELECT row_to_json(a) FROM (SELECT ${agentColumns} FROM agents WHERE id = $2 FOR SHARE) a) AS actor,
    (SELECT row_to_json(m) FROM (SELECT ${messageColumns} FROM messages WHERE id = $1 FOR UPDATE) m) AS message`;

/** One send of a batch: what `decideSend` was given. */
interface SendItem {
  query: { senderId: string; idempotencyKey?: string; project: string; target: string };
  decide: (ctx: SendContext, nowMs: number, projectHasTokens: () => boolean) => MessageDecision<unknown>;
}

/**
 * Sends run together in a batch (batches.ts): what they decide on read in one statement, each
 * decided in order (a later send sees an earlier one's message under its idempotency key, and
 * the stream numbers it took), and what they decided written in one statement with the batch's
 * changes. A send writes a new message and its recipient's `message` event, nothing else.
 */
const sendSegment: SegmentKind<SendItem> = {
  open(project) {
    const byKey = new Map<string, MessageRow>();
    const candidates: (AgentDb & { name_key: string })[] = [];
    /** The senders' rows, by id, as the batch read them (locked until it commits). */
    const senders = new Map<string, AgentRow>();
    let hasTokens = false;
    const projectHasTokens = () => hasTokens;
    /** Each loaded candidate's next stream number (1 for a stream without a row yet). */
    const next = new Map<string, number>();
    const moved = new Set<string>();
    const written: MessageRow[] = [];
    const events: { agent_id: string; seq: number; kind: InboxEventKind; message_id: string; created_at: number }[] = [];
    const keyOf = (senderId: string, key: string) => `${senderId}\0${key}`;
    return {
      async load(tx, items) {
        const keyed = items.filter((i) => i.query.idempotencyKey !== undefined);
        const targets = [...new Set(items.map((i) => i.query.target))];
        const found = (
          await tx.query<{
            existing: MessageDb[];
            candidates: (AgentDb & { name_key: string })[];
            senders: AgentDb[];
            streams: { agent_id: string; next_seq: number }[];
            has_tokens: boolean;
          }>(loadSends, [
            project,
            keyed.map((i) => i.query.senderId),
            keyed.map((i) => i.query.idempotencyKey),
            targets,
            targets.map((t) => t.toLowerCase()),
            [...new Set(items.map((i) => i.query.senderId))],
          ])
        ).rows[0]!;
        for (const m of found.existing) byKey.set(keyOf(m.from_id, m.idempotency_key!), messageFromDb(m));
        for (const a of found.senders) senders.set(a.id, agentFromDb(a));
        candidates.push(...found.candidates);
        for (const c of found.candidates) next.set(c.id, 1);
        for (const st of found.streams) next.set(st.agent_id, st.next_seq);
        hasTokens = found.has_tokens;
      },
      decide({ query, decide }, nowMs, record) {
        const key = query.idempotencyKey;
        const existing = key === undefined ? undefined : byKey.get(keyOf(query.senderId, key));
        const nameKey = query.target.toLowerCase();
        const sender = senders.get(query.senderId);
        const ctx: SendContext = {
          ...(existing && { existing }),
          candidates: candidates.filter((c) => c.id === query.target || c.name_key === nameKey).map(agentFromDb),
          ...(sender && { sender }),
        };
        const d = decide(ctx, nowMs, projectHasTokens);
        // Everything that may throw comes first: a refusal changes nothing.
        const numbered = (d.events ?? []).map((e) => {
          const seq = next.get(e.agentId);
          if (seq === undefined) throw new Error(`a send numbered an event of agent ${JSON.stringify(e.agentId)}, whose stream it was not shown`);
          return { ...e, seq };
        });
        if (d.ack || (numbered.length > 0 && !d.write)) throw new Error("a send decided what only a decision on a message may");
        const out: InboxEvent[] = [];
        if (d.write) {
          if (d.write.project !== project) throw new Error(`a send of project ${JSON.stringify(project)} wrote a message of another`);
          const first = numbered.find((e) => e.kind === "message");
          const row = first ? { ...d.write, seq: first.seq } : d.write;
          for (const e of numbered) {
            next.set(e.agentId, e.seq + 1);
            moved.add(e.agentId);
            events.push({ agent_id: e.agentId, seq: e.seq, kind: e.kind, message_id: row.id, created_at: d.atMs });
            out.push({ agentId: e.agentId, seq: e.seq, kind: e.kind, message: row });
          }
          written.push(row);
          if (row.idempotencyKey !== undefined) byKey.set(keyOf(row.fromId, row.idempotencyKey), row);
          if (d.change) record(d.change.stream, d.change.body, d.atMs);
        }
        return { result: d.result, events: out };
      },
      flush() {
        const together: Statement[] = [];
        if (moved.size > 0) together.push({ text: moveStreams, values: [[...moved], [...moved].map((id) => next.get(id)!)] });
        if (written.length > 0) {
          const rows = written.map((m) => messageToDb(m) as Record<string, unknown>);
          together.push({ text: insertMessages, values: columns.map((c) => rows.map((r) => r[c])) });
        }
        if (events.length > 0) {
          together.push({
            text: insertEvents,
            values: [events.map((e) => e.agent_id), events.map((e) => e.seq), events.map((e) => e.kind), events.map((e) => e.message_id), events.map((e) => e.created_at)],
          });
        }
        return { together, after: [] };
      },
    };
  },
};

export function createPostgresMessages({ tx, changeTx, batched, rows, now, hubNow, snapshot, head }: PgAccess, tail: ReturnType<typeof createTail>): MessageStore {
  /**
   * Writes a decision: numbers its events, sets a new message's seq, advances the acked cursor;
   * records its change last.
   */
  async function apply<T>(t: PgTx, d: MessageDecision<T>, record: PgRecordChange): Promise<InboxEvent[]> {
    const events: InboxEvent[] = [];
    const numbered: { agentId: string; kind: InboxEventKind; seq: number }[] = [];
    for (const e of d.events ?? []) {
      const r = await t.query<{ seq: number }>(
        `INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through) VALUES ($1, 2, 0, 0)
         ON CONFLICT (agent_id) DO UPDATE SET next_seq = inbox_streams.next_seq + 1 RETURNING next_seq - 1 AS seq`,
        [e.agentId],
      );
      numbered.push({ ...e, seq: r.rows[0]!.seq });
    }
    if (d.write) {
      const first = numbered.find((e) => e.kind === "message");
      const row = first ? { ...d.write, seq: first.seq } : d.write;
      await t.query(upsertMessage, Object.values(messageToDb(row)));
      for (const e of numbered) {
        await t.query("INSERT INTO inbox_events (agent_id, seq, kind, message_id, created_at) VALUES ($1, $2, $3, $4, $5)", [
          e.agentId,
          e.seq,
          e.kind,
          row.id,
          d.atMs,
        ]);
        events.push({ agentId: e.agentId, seq: e.seq, kind: e.kind, message: row });
      }
    }
    if (d.ack) {
      await t.query(
        `INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through) VALUES ($1, 1, $2, 0)
         ON CONFLICT (agent_id) DO UPDATE SET acked_cursor = greatest(inbox_streams.acked_cursor, excluded.acked_cursor)`,
        [d.ack.agentId, d.ack.seq],
      );
    }
    if (d.write && d.change) await record(d.write.project, d.change.stream, d.change.body, d.atMs);
    return events;
  }

  /** Who hears of this store's own inbox events once their decision has committed (tailInbox). */
  const inbox = new ChangeListeners<InboxNotice>();
  /** `decided`, handed to the inbox listeners once it resolved (committed), then returned. */
  async function handedOver<R extends { events: InboxEvent[] }>(decided: Promise<R>): Promise<R> {
    const out = await decided;
    inbox.emit(out.events.map((event) => ({ agentId: event.agentId, seq: event.seq, event })));
    return out;
  }

  return {
    decideSend<T>(query: SendItem["query"], decide: (ctx: SendContext, nowMs: number, projectHasTokens: () => boolean) => MessageDecision<T>) {
      return handedOver(batched<SendItem, { result: T; events: InboxEvent[] }>(query.project, sendSegment, { query, decide }));
    },

    async decideMessage<T>(id: string, decide: (current: MessageRow | undefined, nowMs: number, actor: AgentRow | undefined) => MessageDecision<T>, actorId?: string) {
      // A message's project never changes: read first, it is the project the decision declares.
      const [of] = await rows<{ project: string }>("SELECT project FROM messages WHERE id = $1", [id]);
      return handedOver(changeTx(of ? of.project : [], async (t, record) => {
        // The deciding agent's row and the message in one statement: the agent share-locked first
        // (a takeover, an eviction or an unregister either committed before, or waits), then the message.
        const [r] = (await t.query<{ message: MessageDb | null; actor: AgentDb | null }>(decisionRows, [id, actorId ?? null])).rows;
        const d = decide(r?.message ? messageFromDb(r.message) : undefined, await now(t), r?.actor ? agentFromDb(r.actor) : undefined);
        return { result: d.result, events: await apply(t, d, record) };
      }));
    },

    async getMessage(id: string) {
      const [r] = await rows<MessageDb>(`SELECT ${messageColumns} FROM messages WHERE id = $1`, [id]);
      return r && messageFromDb(r);
    },

    async listMessages(query: ListMessagesQuery) {
      const params: unknown[] = [query.agentId];
      const where = [`${query.box === "inbox" ? "to_id" : "from_id"} = $1`];
      if (query.statuses.length > 0) {
        params.push(query.statuses);
        where.push(`status = ANY($${params.length})`);
      }
      if (query.before) {
        params.push(query.before.createdAtMs, query.before.id);
        where.push(`(created_at < $${params.length - 1} OR (created_at = $${params.length - 1} AND id < $${params.length}))`);
      }
      params.push(query.limit);
      const sql = `SELECT ${messageColumns} FROM messages WHERE ${where.join(" AND ")} ORDER BY created_at DESC, id DESC LIMIT $${params.length}`;
      return (await rows<MessageDb>(sql, params)).map(messageFromDb);
    },

    async countMessages() {
      return (await rows<{ n: number }>("SELECT count(*)::int AS n FROM messages"))[0]!.n;
    },

    async listOpenMessages(project: string, limit: number) {
      const open = "project = $1 AND status IN ('queued', 'delivered')";
      const [messages, [count]] = await Promise.all([
        rows<MessageDb>(`SELECT ${messageColumns} FROM messages WHERE ${open} ORDER BY created_at DESC, id DESC LIMIT $2`, [project, limit]),
        rows<{ n: number }>(`SELECT count(*)::int AS n FROM messages WHERE ${open}`, [project]),
      ]);
      return { messages: messages.map(messageFromDb), total: count!.n };
    },

    openMessagesSnapshot(project: string, limit: number) {
      const open = "project = $1 AND status IN ('queued', 'delivered')";
      return snapshot(async (t) => ({
        messages: (await t.query<MessageDb>(`SELECT ${messageColumns} FROM messages WHERE ${open} ORDER BY created_at DESC, id DESC LIMIT $2`, [project, limit])).rows.map(messageFromDb),
        total: (await t.query<{ n: number }>(`SELECT count(*)::int AS n FROM messages WHERE ${open}`, [project])).rows[0]!.n,
        head: await head(t, project, "messages"),
      }));
    },

    async expireMessages(error: string, change: ChangeOf<MessageRow>, limit: number) {
      // The projects with messages due, whose heads the sweep locks first; messages of other
      // projects that fall due meanwhile are left to the next sweep.
      const projects = (await rows<{ project: string }>(`SELECT DISTINCT project FROM messages WHERE ${due} AND expires_at <= $1`, [hubNow()])).map((r) => r.project);
      if (projects.length === 0) return [];
      const { events } = await handedOver(changeTx(projects, async (t, record) => {
        const nowMs = await now(t);
        // Locked, and re-checked after a wait: a message another replica expired meanwhile drops out.
        const found = (
          await t.query<MessageDb>(
            `SELECT ${messageColumns} FROM messages WHERE ${due} AND expires_at <= $1 AND project = ANY($2::text[]) ORDER BY expires_at, id LIMIT $3 FOR UPDATE`,
            [nowMs, projects, limit],
          )
        ).rows;
        const events: InboxEvent[] = [];
        for (const r of found) events.push(...(await apply(t, expiryDecision(messageFromDb(r), nowMs, error, change), record)));
        return { events };
      }));
      return events;
    },

    purgeMessages(retainMs: number, limit: number) {
      return tx(async (t) => {
        const cutoffMs = (await now(t)) - retainMs;
        // A message a decision holds is skipped, not waited for: the next purge takes it.
        const ended = (
          await t.query<MessageDb>(
            `SELECT ${messageColumns} FROM messages WHERE status IN ('replied', 'cancelled', 'expired', 'error') AND ${endedAt} <= $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`,
            [cutoffMs, limit],
          )
        ).rows;
        if (ended.length === 0) return [];
        const ids = ended.map((r) => r.id);
        // Their events first, then the streams they leave behind in agent order, the order a batch
        // of sends locks them in (loadSends): streams taken in message order (random ids) made a
        // cycle with such a batch, which PostgreSQL broke by failing one of the two (40P01).
        const evs = (await t.query<{ agent_id: string; seq: number }>("DELETE FROM inbox_events WHERE message_id = ANY($1::text[]) RETURNING agent_id, seq", [ids])).rows;
        const purgedThrough = new Map<string, number>();
        for (const e of evs) purgedThrough.set(e.agent_id, Math.max(purgedThrough.get(e.agent_id) ?? 0, Number(e.seq)));
        const agents = [...purgedThrough.keys()].sort();
        if (agents.length > 0) {
          await t.query("SELECT 1 FROM inbox_streams WHERE agent_id = ANY($1::text[]) ORDER BY agent_id FOR UPDATE", [agents]);
          await t.query(
            `INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through)
             SELECT agent_id, seq + 1, 0, seq FROM unnest($1::text[], $2::bigint[]) AS p (agent_id, seq) ORDER BY agent_id
             ON CONFLICT (agent_id) DO UPDATE SET purged_through = greatest(inbox_streams.purged_through, excluded.purged_through)`,
            [agents, agents.map((a) => purgedThrough.get(a)!)],
          );
        }
        await t.query("DELETE FROM messages WHERE id = ANY($1::text[])", [ids]);
        return ended.map(messageFromDb);
      });
    },

    async inboxState(agentId: string): Promise<InboxState> {
      const [r] = await rows<{ next_seq: number; acked_cursor: number; purged_through: number }>(
        "SELECT next_seq, acked_cursor, purged_through FROM inbox_streams WHERE agent_id = $1",
        [agentId],
      );
      return r ? { head: r.next_seq - 1, ackedCursor: r.acked_cursor, purgedThrough: r.purged_through } : { head: 0, ackedCursor: 0, purgedThrough: 0 };
    },

    async readInbox(agentId: string, afterSeq: number, limit: number) {
      return (
        await rows<MessageDb & { ev_agent: string; ev_seq: number; ev_kind: string }>(
          `SELECT e.agent_id AS ev_agent, e.seq AS ev_seq, e.kind AS ev_kind, ${messageColumnsOf("m")} FROM inbox_events e
           JOIN messages m ON m.id = e.message_id WHERE e.agent_id = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3`,
          [agentId, afterSeq, limit],
        )
      ).map((r) => ({ agentId: r.ev_agent, seq: r.ev_seq, kind: r.ev_kind as InboxEventKind, message: messageFromDb(r) }));
    },

    /** This store's own inbox events at commit, with the event; every hub's from the tail, by agent and sequence. */
    tailInbox(onNotice: (notice: InboxNotice) => void, listening?: Listening): () => void {
      const removeOwn = inbox.add(onNotice);
      const removeTail = tail.add<{ agent_id: string; seq: number }>({
        sql: `SELECT coalesce(json_agg(json_build_object('agent_id', agent_id, 'seq', seq) ORDER BY xid, agent_id, seq), '[]')
              FROM inbox_events WHERE xid >= $1::xid8 AND xid < window_end`,
        params: [],
        listening,
        deliver: (events) => {
          for (const e of events) onNotice({ agentId: e.agent_id, seq: e.seq });
        },
      });
      return () => {
        removeOwn();
        removeTail();
      };
    },

    async pendingMessages(agentId: string, afterSeq: number, uptoSeq: number, limit: number) {
      return (
        await rows<MessageDb>(
          `SELECT ${messageColumns} FROM messages WHERE to_id = $1 AND status IN ('queued', 'delivered') AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4`,
          [agentId, afterSeq, uptoSeq, limit],
        )
      ).map(messageFromDb);
    },
  };
}
