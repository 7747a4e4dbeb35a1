import type { ChangeOf } from "./change-feed.js";
import type { LeaseWaiter, NamedWaiter } from "./lease-store.js";
import type { MessageDecision } from "./message-store.js";
import type { AgentRow, AuditRow, InboxEventKind, LeaseRow, MessageRow, ProjectTokenRow, RuntimeRow, SyncRunView, TokenScope } from "../domain.js";

/**
 * Row shapes both stores keep (the same columns on SQLite and PostgreSQL) and their mapping to
 * the store's rows, so the two backends differ only in their SQL.
 */

export interface AgentDb {
  id: string;
  project: string;
  name: string;
  purpose: string;
  model: string | null;
  host: string | null;
  key_hash: string;
  connected_at: number;
  last_seen_at: number;
  /** 0/1 on SQLite, a boolean on PostgreSQL. */
  online: number | boolean;
}

export const agentFromDb = (r: AgentDb): AgentRow => ({
  id: r.id,
  project: r.project,
  name: r.name,
  purpose: r.purpose,
  ...(r.model !== null && { model: r.model }),
  ...(r.host !== null && { host: r.host }),
  keyHash: r.key_hash,
  connectedAtMs: r.connected_at,
  lastSeenAtMs: r.last_seen_at,
  online: r.online === true || r.online === 1,
});

/** Whether two rows of one agent say the same, column for column. */
export const sameAgentRow = (a: AgentRow, b: AgentRow): boolean =>
  a.id === b.id &&
  a.project === b.project &&
  a.name === b.name &&
  a.purpose === b.purpose &&
  a.model === b.model &&
  a.host === b.host &&
  a.keyHash === b.keyHash &&
  a.connectedAtMs === b.connectedAtMs &&
  a.lastSeenAtMs === b.lastSeenAtMs &&
  a.online === b.online;

/** Rows a bulk update returned, in registration order (`reg`: the agent's registration number). */
export const byRegistration = <R extends { reg: number }>(rows: R[]): R[] => rows.sort((a, b) => a.reg - b.reg);

export interface LeaseDb {
  project: string;
  name: string;
  holder_agent_id: string | null;
  holder_agent_name: string | null;
  fencing_token: number;
  acquired_at: number;
  expires_at: number;
  handed_to: string | null;
  /** The fencing token written with handed_to: another token means an older release wrote the holder. */
  handed_token: number | null;
}

export function leaseFromDb(r: LeaseDb): LeaseRow {
  // What the row records of the hand-over that made its holder (D64); every row read has the
  // same fields, set or undefined, so that the rules reading them see one shape.
  const stamped = r.holder_agent_id === null || (r.handed_token !== null && r.handed_token !== undefined && Number(r.handed_token) === Number(r.fencing_token));
  return {
    project: r.project,
    name: r.name,
    holderAgentId: r.holder_agent_id,
    holderAgentName: r.holder_agent_name,
    fencingToken: r.fencing_token,
    acquiredAtMs: r.acquired_at,
    expiresAtMs: r.expires_at,
    handedTo: (stamped && r.holder_agent_id !== null && r.handed_to) || undefined,
    handOverUnknown: stamped ? undefined : true,
  };
}

export const leaseToDb = (l: LeaseRow): LeaseDb => ({
  project: l.project,
  name: l.name,
  holder_agent_id: l.holderAgentId,
  holder_agent_name: l.holderAgentName,
  fencing_token: l.fencingToken,
  acquired_at: l.acquiredAtMs,
  expires_at: l.expiresAtMs,
  handed_to: l.handedTo ?? null,
  handed_token: l.holderAgentId !== null && !l.handOverUnknown ? l.fencingToken : null,
});

/**
 * What every store checks of `decideAgent` told the agent's project (`known`): the agent's row,
 * when there is one, is of that project. One of another is a bug, never a decision: it throws.
 */
export function checkAgentProject(id: string, row: { project: string } | undefined, known: string | undefined): void {
  if (known !== undefined && row !== undefined && row.project !== known) throw new Error(`agent ${id} is not of project ${JSON.stringify(known)}`);
}

/**
 * What every store checks of a lease decision's write on `key`, shown `current`: it writes the
 * row it was shown, never another key (that is the isolation), and never lowers the fence. A
 * decision that breaks either is a bug, never a write: it throws.
 */
export function checkLeaseWrite(key: { project: string; name: string }, current: LeaseDb | undefined, write: LeaseRow | undefined): void {
  if (!write) return;
  if (write.project !== key.project || write.name !== key.name) {
    throw new Error(`a lease decision on ${JSON.stringify(key)} tried to write another lease`);
  }
  if (current && write.fencingToken < current.fencing_token) {
    throw new Error(`fencing token for ${JSON.stringify(key)} would go down from ${current.fencing_token}`);
  }
}

/** An unleased resource's row: no holder, the fence base as its token. */
export const floorRow = (key: { project: string; name: string }, base: number): LeaseDb => ({
  project: key.project,
  name: key.name,
  holder_agent_id: null,
  holder_agent_name: null,
  fencing_token: base,
  acquired_at: 0,
  expires_at: 0,
  handed_to: null,
  handed_token: null,
});

export interface RuntimeDb {
  project: string;
  runtime_id: string;
  host: string | null;
  registered_at: number;
  heartbeat_at: number;
}

export const runtimeFromDb = (r: RuntimeDb): RuntimeRow => ({
  project: r.project,
  runtimeId: r.runtime_id,
  ...(r.host !== null && { host: r.host }),
  registeredAtMs: r.registered_at,
  heartbeatAtMs: r.heartbeat_at,
});

export interface MessageDb {
  id: string;
  project: string;
  from_id: string;
  from_name: string;
  to_id: string;
  to_name: string;
  content: string;
  delivery: string;
  hops: number;
  max_hops: number;
  seq: number;
  correlation_id: string | null;
  reply_to: string | null;
  idempotency_key: string | null;
  created_at: number;
  expires_at: number;
  delivered_at: number | null;
  replied_at: number | null;
  cancelled_at: number | null;
  status: string;
  reply_content: string | null;
  reply_created_at: number | null;
  error: string | null;
}

const opt = <K extends string, V>(key: K, v: V | null) => (v === null ? {} : ({ [key]: v } as Record<K, V>));

export const messageFromDb = (r: MessageDb): MessageRow => ({
  id: r.id,
  project: r.project,
  fromId: r.from_id,
  fromName: r.from_name,
  toId: r.to_id,
  toName: r.to_name,
  content: r.content,
  delivery: r.delivery as MessageRow["delivery"],
  hops: r.hops,
  maxHops: r.max_hops,
  seq: r.seq,
  ...opt("correlationId", r.correlation_id),
  ...opt("replyTo", r.reply_to),
  ...opt("idempotencyKey", r.idempotency_key),
  createdAtMs: r.created_at,
  expiresAtMs: r.expires_at,
  ...opt("deliveredAtMs", r.delivered_at),
  ...opt("repliedAtMs", r.replied_at),
  ...opt("cancelledAtMs", r.cancelled_at),
  status: r.status as MessageRow["status"],
  ...(r.reply_content !== null && { reply: { content: r.reply_content, createdAtMs: r.reply_created_at ?? r.created_at } }),
  ...opt("error", r.error),
});

export const messageToDb = (m: MessageRow) => ({
  id: m.id,
  project: m.project,
  from_id: m.fromId,
  from_name: m.fromName,
  to_id: m.toId,
  to_name: m.toName,
  content: m.content,
  delivery: m.delivery,
  hops: m.hops,
  max_hops: m.maxHops,
  seq: m.seq,
  correlation_id: m.correlationId ?? null,
  reply_to: m.replyTo ?? null,
  idempotency_key: m.idempotencyKey ?? null,
  created_at: m.createdAtMs,
  expires_at: m.expiresAtMs,
  delivered_at: m.deliveredAtMs ?? null,
  replied_at: m.repliedAtMs ?? null,
  cancelled_at: m.cancelledAtMs ?? null,
  status: m.status,
  reply_content: m.reply?.content ?? null,
  reply_created_at: m.reply?.createdAtMs ?? null,
  error: m.error ?? null,
});


/** The decision that expires an open message: status expired, `error` set, an event to both parties. */
export function expiryDecision(m: MessageRow, nowMs: number, error: string, change: ChangeOf<MessageRow>): MessageDecision<undefined> {
  const kind: InboxEventKind = "expired";
  const write: MessageRow = { ...m, status: "expired", error };
  return {
    atMs: nowMs,
    write,
    change: change(write, nowMs),
    events: [
      { agentId: m.fromId, kind },
      { agentId: m.toId, kind },
    ],
    result: undefined,
  };
}

/** A run as the run views read it (runViewColumns, the same SQL on both backends). */
export interface RunDb {
  project_id: string;
  run_id: string;
  home_runtime_id: string;
  cursor: number;
  stored: number;
  updated_at: string | null;
  status: string | null;
  workflow_id: string | null;
  display_title: string | null;
}

export const runFromDb = (r: RunDb): SyncRunView => ({
  projectId: r.project_id,
  runId: r.run_id,
  homeRuntimeId: r.home_runtime_id,
  cursor: r.cursor,
  stored: r.stored,
  ...(r.updated_at !== null && { updatedAt: r.updated_at }),
  ...(r.status !== null && { status: r.status }),
  ...(r.workflow_id !== null && { workflowId: r.workflow_id }),
  ...(r.display_title !== null && { displayTitle: r.display_title }),
});

/**
 * The columns of a run's view, from `sync_runs r`: each field's last value in the gapless
 * prefix, found walking back from the cursor on the events' key (a run status is stored for
 * run.* events only).
 */
export const runViewColumns = `r.project_id, r.run_id, r.home_runtime_id, r.cursor, r.stored,
  (SELECT occurred_at FROM sync_events e WHERE e.project_id = r.project_id AND e.run_id = r.run_id AND e.sequence = r.cursor) AS updated_at,
  (SELECT run_status FROM sync_events e WHERE e.project_id = r.project_id AND e.run_id = r.run_id AND e.sequence <= r.cursor
     AND e.run_status IS NOT NULL ORDER BY e.sequence DESC LIMIT 1) AS status,
  (SELECT workflow_id FROM sync_events e WHERE e.project_id = r.project_id AND e.run_id = r.run_id AND e.sequence <= r.cursor
     AND e.workflow_id IS NOT NULL ORDER BY e.sequence DESC LIMIT 1) AS workflow_id,
  (SELECT display_title FROM sync_events e WHERE e.project_id = r.project_id AND e.run_id = r.run_id AND e.sequence <= r.cursor
     AND e.display_title IS NOT NULL ORDER BY e.sequence DESC LIMIT 1) AS display_title`;

export interface WaiterDb {
  /** Queue order within the resource. */
  seq: number;
  id: string;
  agent_id: string;
  agent_name: string;
  ttl_ms: number;
  deadline_ms: number;
  since_ms: number;
  /** Read, never written (PostgreSQL): the replica that holds the waiting call is gone (D79). */
  orphaned?: boolean;
}

export const waiterFromDb = (r: WaiterDb): LeaseWaiter => ({
  id: r.id,
  agentId: r.agent_id,
  agentName: r.agent_name,
  ttlMs: r.ttl_ms,
  deadlineMs: r.deadline_ms,
  sinceMs: Number(r.since_ms),
  ...(r.orphaned === true && { orphaned: true as const }),
});

/** A waiter row read with the name of its lease (a project's queues). */
export const namedWaiterFromDb = (r: WaiterDb & { name: string }): NamedWaiter => ({ ...waiterFromDb(r), name: r.name });

export interface TokenDb {
  id: string;
  project: string;
  scope: string;
  label: string;
  hash: string;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  /** 0/1 on SQLite, a boolean on PostgreSQL. */
  expiry_noted: number | boolean;
}

export interface AuditDb {
  seq: number;
  at_ms: number;
  project: string;
  kind: string;
  detail: string;
}

export const tokenFromDb = (r: TokenDb): ProjectTokenRow => ({
  id: r.id,
  project: r.project,
  scope: r.scope as TokenScope,
  label: r.label,
  hash: r.hash,
  createdAtMs: r.created_at,
  ...(r.expires_at !== null && { expiresAtMs: r.expires_at }),
  ...(r.revoked_at !== null && { revokedAtMs: r.revoked_at }),
  expiryNoted: Boolean(r.expiry_noted),
});

export const auditFromDb = (r: AuditDb): AuditRow => ({
  seq: Number(r.seq),
  atMs: Number(r.at_ms),
  project: r.project,
  kind: r.kind as AuditRow["kind"],
  detail: JSON.parse(r.detail) as Record<string, unknown>,
});

/** A token row's columns (expiry_noted as 0/1; PostgreSQL takes it as a boolean). */
export const tokenToDb = (t: ProjectTokenRow) => ({
  id: t.id,
  project: t.project,
  scope: t.scope,
  label: t.label,
  hash: t.hash,
  created_at: t.createdAtMs,
  expires_at: t.expiresAtMs ?? null,
  revoked_at: t.revokedAtMs ?? null,
  expiry_noted: t.expiryNoted ? 1 : 0,
});

