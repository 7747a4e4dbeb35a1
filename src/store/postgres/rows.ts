import { replicaLockClass } from "./inbox-notify.js";
import type { AgentDb, AuditDb, LeaseDb, MessageDb, RuntimeDb, TokenDb, WaiterDb } from "../rows.js";

/**
 * The columns a statement reads, named, never `*`. The store's reads and its batches' statements
 * are prepared once per connection (transaction.ts `namedStatement`), and PostgreSQL refuses to
 * run a prepared statement whose `*` now means more columns ("cached plan must not change result
 * type", 0A000): one additive migration by a newer hub failed every such read of an older hub
 * still serving (an internal error, for the rest of its connections' lives), as a rolling upgrade
 * runs them side by side. The statements of single decisions run unnamed; they name their
 * columns all the same. `fields` names every field of the row type and nothing else (the
 * compiler holds it to that); `alias` prefixes each column.
 */
function columns<T>(fields: Record<keyof T & string, true>, alias?: string): string {
  return Object.keys(fields)
    .map((c) => (alias ? `${alias}.${c}` : c))
    .join(", ");
}

const agent: Record<keyof AgentDb, true> = {
  id: true,
  project: true,
  name: true,
  purpose: true,
  model: true,
  host: true,
  key_hash: true,
  connected_at: true,
  last_seen_at: true,
  online: true,
};
/** The columns of an AgentDb (../rows.ts); agents also has name_key and reg_seq, which rows never carry. */
export const agentColumns = columns<AgentDb>(agent);
export const agentColumnsOf = (alias: string) => columns<AgentDb>(agent, alias);

const lease: Record<keyof LeaseDb, true> = {
  project: true,
  name: true,
  holder_agent_id: true,
  holder_agent_name: true,
  fencing_token: true,
  acquired_at: true,
  expires_at: true,
  handed_to: true,
  handed_token: true,
};
export const leaseColumns = columns<LeaseDb>(lease);

/**
 * Whether a waiter row's replica is gone (D79): it names one (an older hub's rows name none), and
 * that replica's liveness lock (inbox-notify.ts) is held by no backend of this database. pg_locks
 * is read at most once per statement (a hashed subplan), and only for a statement that reads a
 * waiter: a lease decision on a resource nobody waits for never reads it.
 */
export const orphanedWaiter = `(replica IS NOT NULL AND replica NOT IN (SELECT objid::int FROM pg_locks WHERE locktype = 'advisory'
  AND classid = ${replicaLockClass} AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())))`;

/**
 * A waiter's columns and its lease's name (the queues of a whole project are read by name), and
 * whether its replica is gone.
 */
export const waiterColumns = `${columns<Omit<WaiterDb, "orphaned"> & { name: string }>({
  name: true,
  seq: true,
  id: true,
  agent_id: true,
  agent_name: true,
  ttl_ms: true,
  deadline_ms: true,
  since_ms: true,
})}, ${orphanedWaiter} AS orphaned`;

const runtime: Record<keyof RuntimeDb, true> = { project: true, runtime_id: true, host: true, registered_at: true, heartbeat_at: true };
export const runtimeColumns = columns<RuntimeDb>(runtime);
export const runtimeColumnsOf = (alias: string) => columns<RuntimeDb>(runtime, alias);

const message: Record<keyof MessageDb, true> = {
  id: true,
  project: true,
  from_id: true,
  from_name: true,
  to_id: true,
  to_name: true,
  content: true,
  delivery: true,
  hops: true,
  max_hops: true,
  seq: true,
  correlation_id: true,
  reply_to: true,
  idempotency_key: true,
  created_at: true,
  expires_at: true,
  delivered_at: true,
  replied_at: true,
  cancelled_at: true,
  status: true,
  reply_content: true,
  reply_created_at: true,
  error: true,
};
export const messageColumns = columns<MessageDb>(message);
export const messageColumnsOf = (alias: string) => columns<MessageDb>(message, alias);

export const tokenColumns = columns<TokenDb>({
  id: true,
  project: true,
  scope: true,
  label: true,
  hash: true,
  created_at: true,
  expires_at: true,
  revoked_at: true,
  expiry_noted: true,
});

export const auditColumns = columns<AuditDb>({ seq: true, at_ms: true, project: true, kind: true, detail: true });
