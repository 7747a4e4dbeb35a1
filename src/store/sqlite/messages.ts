import type Database from "better-sqlite3";
import type { RecordChange, StoreAccess } from "./batch.js";
import { agentFromDb, byRegistration, expiryDecision, messageFromDb, messageToDb, type AgentDb, type MessageDb } from "../rows.js";
import type { ChangeOf } from "../change-feed.js";
import type { InboxState, ListMessagesQuery, MessageDecision, MessageStore, SendContext } from "../message-store.js";
import type { AgentRow, InboxEvent, InboxEventKind, InboxNotice, MessageRow } from "../../domain.js";
import { ChangeListeners } from "../change-listeners.js";

/** When an ended message ended: replied, else cancelled, else expired (its expiry), for retention. */
const endedAt = "COALESCE(replied_at, cancelled_at, expires_at, created_at)";

/**
 * The message concern of the SQLite store. `tx` runs one decision (one savepoint of a batch's
 * transaction); every decision writes the message, appends its stream events and advances
 * cursors in it, all or nothing.
 */
export function createSqliteMessages(
  db: Database.Database,
  { tx, changeTx, read, now, head }: StoreAccess,
  /** Whether a project has managed tokens, inside a decision (tokens.ts hasTokensInDecision). */
  projectHasTokens: (project: string) => boolean,
): MessageStore {
  const q = {
    byId: db.prepare<[string], MessageDb>("SELECT * FROM messages WHERE id = ?"),
    byKey: db.prepare<[string, string], MessageDb>("SELECT * FROM messages WHERE from_id = ? AND idempotency_key = ?"),
    // The agents a target may name, by id and by name: two point reads. One statement with
    // `(id = ? OR name_key = ?) ORDER BY rowid` cost ~10x as much, re-planned at every binding;
    // so did `id = ? AND project = ?` (4x), where the planner weighed the project's index: the
    // project is compared below.
    candidateById: db.prepare<[string], AgentDb & { reg: number }>("SELECT rowid AS reg, * FROM agents WHERE id = ?"),
    agent: db.prepare<[string], AgentDb>("SELECT * FROM agents WHERE id = ?"),
    candidateByName: db.prepare<[string, string], AgentDb & { reg: number }>(
      "SELECT rowid AS reg, * FROM agents WHERE project = ? AND name_key = ?",
    ),
    upsert: db.prepare(
      `INSERT INTO messages (id, project, from_id, from_name, to_id, to_name, content, delivery, hops, max_hops, seq,
         correlation_id, reply_to, idempotency_key, created_at, expires_at, delivered_at, replied_at, cancelled_at,
         status, reply_content, reply_created_at, error)
       VALUES (@id, @project, @from_id, @from_name, @to_id, @to_name, @content, @delivery, @hops, @max_hops, @seq,
         @correlation_id, @reply_to, @idempotency_key, @created_at, @expires_at, @delivered_at, @replied_at,
         @cancelled_at, @status, @reply_content, @reply_created_at, @error)
       ON CONFLICT (id) DO UPDATE SET delivered_at = excluded.delivered_at, replied_at = excluded.replied_at,
         cancelled_at = excluded.cancelled_at, status = excluded.status, reply_content = excluded.reply_content,
         reply_created_at = excluded.reply_created_at, error = excluded.error`,
    ),
    stream: db.prepare<[string], { next_seq: number; acked_cursor: number; purged_through: number }>(
      "SELECT next_seq, acked_cursor, purged_through FROM inbox_streams WHERE agent_id = ?",
    ),
    takeSeq: db.prepare<[string], { seq: number }>(
      `INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through) VALUES (?, 2, 0, 0)
       ON CONFLICT (agent_id) DO UPDATE SET next_seq = next_seq + 1 RETURNING next_seq - 1 AS seq`,
    ),
    appendEvent: db.prepare("INSERT INTO inbox_events (agent_id, seq, kind, message_id, created_at) VALUES (?, ?, ?, ?, ?)"),
    ack: db.prepare(
      `INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through) VALUES (@agent, 1, @seq, 0)
       ON CONFLICT (agent_id) DO UPDATE SET acked_cursor = max(acked_cursor, @seq)`,
    ),
    due: db.prepare<[number, number], MessageDb>(
      "SELECT * FROM messages WHERE status IN ('queued', 'delivered') AND expires_at <= ? ORDER BY expires_at, id LIMIT ?",
    ),
    ended: db.prepare<[number, number], MessageDb>(
      `SELECT * FROM messages WHERE status IN ('replied', 'cancelled', 'expired', 'error') AND ${endedAt} <= ? LIMIT ?`,
    ),
    eventsOf: db.prepare<[string], { agent_id: string; seq: number }>("SELECT agent_id, seq FROM inbox_events WHERE message_id = ?"),
    deleteEvents: db.prepare("DELETE FROM inbox_events WHERE message_id = ?"),
    deleteMessage: db.prepare("DELETE FROM messages WHERE id = ?"),
    purgedThrough: db.prepare(
      `INSERT INTO inbox_streams (agent_id, next_seq, acked_cursor, purged_through) VALUES (@agent, @seq + 1, 0, @seq)
       ON CONFLICT (agent_id) DO UPDATE SET purged_through = max(purged_through, @seq)`,
    ),
    read: db.prepare<[string, number, number], MessageDb & { ev_agent: string; ev_seq: number; ev_kind: string }>(
      `SELECT e.agent_id AS ev_agent, e.seq AS ev_seq, e.kind AS ev_kind, m.* FROM inbox_events e
       JOIN messages m ON m.id = e.message_id WHERE e.agent_id = ? AND e.seq > ? ORDER BY e.seq LIMIT ?`,
    ),
    pending: db.prepare<[string, number, number, number], MessageDb>(
      `SELECT * FROM messages WHERE to_id = ? AND status IN ('queued', 'delivered') AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?`,
    ),
    count: db.prepare<[], { n: number }>("SELECT count(*) AS n FROM messages"),
    openCount: db.prepare<[string], { n: number }>(
      "SELECT count(*) AS n FROM messages WHERE project = ? AND status IN ('queued', 'delivered')",
    ),
    open: db.prepare<[string, number], MessageDb>(
      "SELECT * FROM messages WHERE project = ? AND status IN ('queued', 'delivered') ORDER BY created_at DESC, id DESC LIMIT ?",
    ),
  };

  /** The project's agents whose id is `target` or whose name is, in registration order. */
  const candidatesOf = (project: string, target: string): AgentRow[] => {
    const found = q.candidateById.get(target);
    const byId = found?.project === project ? found : undefined;
    const byName = q.candidateByName.get(project, target.toLowerCase());
    const rows = byId && byName && byId.id !== byName.id ? byRegistration([byId, byName]) : byId ? [byId] : byName ? [byName] : [];
    return rows.map(agentFromDb);
  };

  /**
   * Writes a decision: numbers its events, sets a new message's seq, advances the acked cursor,
   * records its change.
   */
  function apply<T>(d: MessageDecision<T>, record: RecordChange): InboxEvent[] {
    const events: InboxEvent[] = [];
    const numbered = (d.events ?? []).map((e) => ({ ...e, seq: q.takeSeq.get(e.agentId)!.seq }));
    if (d.write) {
      const first = numbered.find((e) => e.kind === "message");
      const row = first ? { ...d.write, seq: first.seq } : d.write;
      q.upsert.run(messageToDb(row));
      for (const e of numbered) {
        q.appendEvent.run(e.agentId, e.seq, e.kind, row.id, d.atMs);
        events.push({ agentId: e.agentId, seq: e.seq, kind: e.kind, message: row });
      }
      if (d.change) record(row.project, d.change.stream, d.change.body, d.atMs);
    }
    if (d.ack) q.ack.run({ agent: d.ack.agentId, seq: d.ack.seq });
    return events;
  }

  /** Who hears of each inbox event once its decision is durable (tailInbox). */
  const inbox = new ChangeListeners<InboxNotice>();
  const notices = (events: InboxEvent[]) => events.map((event) => ({ agentId: event.agentId, seq: event.seq, event }));
  /** `decided`, handed to the inbox listeners once it resolved (durable), then returned. */
  async function handedOver<R extends { events: InboxEvent[] }>(decided: Promise<R>): Promise<R> {
    const out = await decided;
    inbox.emit(notices(out.events));
    return out;
  }

  function openNow(project: string, limit: number) {
    return { messages: q.open.all(project, limit).map(messageFromDb), total: q.openCount.get(project)!.n };
  }

  return {
    async decideSend<T>(
      query: { senderId: string; idempotencyKey?: string; project: string; target: string },
      decide: (ctx: SendContext, nowMs: number, projectHasTokens: () => boolean) => MessageDecision<T>,
    ) {
      return handedOver(changeTx((record) => {
        const existing = query.idempotencyKey ? q.byKey.get(query.senderId, query.idempotencyKey) : undefined;
        const candidates = candidatesOf(query.project, query.target);
        const sender = q.agent.get(query.senderId);
        const d = decide({ ...(existing && { existing: messageFromDb(existing) }), candidates, ...(sender && { sender: agentFromDb(sender) }) }, now(), () =>
          projectHasTokens(query.project),
        );
        return { result: d.result, events: apply(d, record) };
      }));
    },

    async decideMessage<T>(id: string, decide: (current: MessageRow | undefined, nowMs: number, actor: AgentRow | undefined) => MessageDecision<T>, actorId?: string) {
      return handedOver(changeTx((record) => {
        const r = q.byId.get(id);
        const actor = actorId === undefined ? undefined : q.agent.get(actorId);
        const d = decide(r && messageFromDb(r), now(), actor && agentFromDb(actor));
        return { result: d.result, events: apply(d, record) };
      }));
    },

    getMessage(id: string) {
      return read(() => {
        const r = q.byId.get(id);
        return r && messageFromDb(r);
      });
    },

    listMessages(query: ListMessagesQuery) {
      const column = query.box === "inbox" ? "to_id" : "from_id";
      const where = [`${column} = ?`];
      const args: (string | number)[] = [query.agentId];
      if (query.statuses.length > 0) {
        where.push(`status IN (${query.statuses.map(() => "?").join(", ")})`);
        args.push(...query.statuses);
      }
      if (query.before) {
        where.push("(created_at < ? OR (created_at = ? AND id < ?))");
        args.push(query.before.createdAtMs, query.before.createdAtMs, query.before.id);
      }
      const sql = `SELECT * FROM messages WHERE ${where.join(" AND ")} ORDER BY created_at DESC, id DESC LIMIT ?`;
      return read(() => db.prepare<(string | number)[], MessageDb>(sql).all(...args, query.limit).map(messageFromDb));
    },

    countMessages() {
      return read(() => q.count.get()!.n);
    },

    listOpenMessages(project: string, limit: number) {
      return read(() => openNow(project, limit));
    },

    openMessagesSnapshot(project: string, limit: number) {
      return read(() => ({ ...openNow(project, limit), head: head(project, "messages") }));
    },

    async expireMessages(error: string, change: ChangeOf<MessageRow>, limit: number) {
      const { events } = await handedOver(
        changeTx((record) => {
          const nowMs = now();
          return { events: q.due.all(nowMs, limit).flatMap((r) => apply(expiryDecision(messageFromDb(r), nowMs, error, change), record)) };
        }),
      );
      return events;
    },

    async purgeMessages(retainMs: number, limit: number) {
      return tx(() =>
        q.ended.all(now() - retainMs, limit).map((r) => {
          for (const e of q.eventsOf.all(r.id)) q.purgedThrough.run({ agent: e.agent_id, seq: e.seq });
          q.deleteEvents.run(r.id);
          q.deleteMessage.run(r.id);
          return messageFromDb(r);
        }),
      );
    },

    inboxState(agentId: string): Promise<InboxState> {
      return read(() => {
        const r = q.stream.get(agentId);
        return r
          ? { head: r.next_seq - 1, ackedCursor: r.acked_cursor, purgedThrough: r.purged_through }
          : { head: 0, ackedCursor: 0, purgedThrough: 0 };
      });
    },

    readInbox(agentId: string, afterSeq: number, limit: number) {
      return read(() =>
        q.read.all(agentId, afterSeq, limit).map((r) => ({
          agentId: r.ev_agent,
          seq: r.ev_seq,
          kind: r.ev_kind as InboxEventKind,
          message: messageFromDb(r),
        })),
      );
    },

    pendingMessages(agentId: string, afterSeq: number, uptoSeq: number, limit: number) {
      return read(() => q.pending.all(agentId, afterSeq, uptoSeq, limit).map(messageFromDb));
    },

    tailInbox(onNotice: (notice: InboxNotice) => void): () => void {
      return inbox.add(onNotice);
    },
  };
}
