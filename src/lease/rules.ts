import { errors, type LeaseView } from "../errors.js";
import type { Decision, LeaseRow } from "../store/store.js";

/**
 * The lease decisions, pure: given the resource's current row, the caller and the hub time,
 * what to write and what to answer. Fencing tokens only grow: a grant on a free or released
 * resource is floor + 1, a takeover of a lapsed lease is token + 1, and renewals (including the
 * holder re-acquiring its own live lease) keep the token.
 */

export interface LeaseHolder {
  agentId: string;
  agentName: string;
  project: string;
}

export type LeaseEventKind = "granted" | "renewed" | "released" | "taken_over";

export interface LeaseOutcome {
  kind: LeaseEventKind;
  lease: LeaseView;
}

/**
 * The display form `<project>/<name>` that REST clients (and the logs) know as `resource`. It is
 * only ever shown, never looked up: two different leases may display alike (README §5.1).
 */
export const displayResource = (project: string, name: string) => `${project}/${name}`;

/** A row with a holder is a lease; a row without one is only the resource's token floor. */
export function heldLease(row: LeaseRow | undefined): LeaseView | undefined {
  if (!row || row.holderAgentId === null) return undefined;
  return {
    resource: displayResource(row.project, row.name),
    project: row.project,
    name: row.name,
    holderAgentId: row.holderAgentId,
    holderAgentName: row.holderAgentName ?? "",
    fencingToken: row.fencingToken,
    acquiredAtMs: row.acquiredAtMs,
    expiresAtMs: row.expiresAtMs,
  };
}

export const isLapsed = (lease: LeaseView, nowMs: number) => lease.expiresAtMs <= nowMs;

const toRow = ({ resource: _display, ...row }: LeaseView): LeaseRow => row;

export function decideAcquire(
  current: LeaseRow | undefined,
  req: { name: string; holder: LeaseHolder; ttlMs: number; nowMs: number },
): Decision<LeaseRow, LeaseOutcome> {
  const held = heldLease(current);
  const expiresAtMs = req.nowMs + req.ttlMs;
  if (held && !isLapsed(held, req.nowMs)) {
    if (held.holderAgentId !== req.holder.agentId) throw errors.leaseHeld(held);
    const lease = { ...held, expiresAtMs };
    return { write: toRow(lease), result: { kind: "renewed", lease } };
  }
  // @NOTE README §3.7: the fence never restarts; a released resource keeps its token as floor.
  const lease: LeaseView = {
    resource: displayResource(req.holder.project, req.name),
    project: req.holder.project,
    name: req.name,
    holderAgentId: req.holder.agentId,
    holderAgentName: req.holder.agentName,
    fencingToken: (current?.fencingToken ?? 0) + 1,
    acquiredAtMs: req.nowMs,
    expiresAtMs,
  };
  return { write: toRow(lease), result: { kind: held ? "taken_over" : "granted", lease } };
}

/** The caller's lease on the resource, or the refusal that says why not. */
function ownLease(
  current: LeaseRow | undefined,
  req: { name: string; holder: LeaseHolder; fencingToken: number },
): LeaseView {
  const held = heldLease(current);
  if (!held) throw errors.leaseNotFound(req.name);
  if (held.holderAgentId !== req.holder.agentId || held.fencingToken !== req.fencingToken) {
    throw errors.leaseSuperseded(req.name, held);
  }
  return held;
}

export function decideRenew(
  current: LeaseRow | undefined,
  req: { name: string; holder: LeaseHolder; fencingToken: number; ttlMs: number; nowMs: number },
): Decision<LeaseRow, LeaseOutcome> {
  const held = ownLease(current, req);
  if (isLapsed(held, req.nowMs)) throw errors.leaseExpired(held);
  const lease = { ...held, expiresAtMs: req.nowMs + req.ttlMs };
  return { write: toRow(lease), result: { kind: "renewed", lease } };
}

/** Releases even a lapsed lease of the caller; the row stays as the token floor. */
export function decideRelease(
  current: LeaseRow | undefined,
  req: { name: string; holder: LeaseHolder; fencingToken: number },
): Decision<LeaseRow, LeaseOutcome> {
  const held = ownLease(current, req);
  return {
    write: { ...toRow(held), holderAgentId: null, holderAgentName: null },
    result: { kind: "released", lease: held },
  };
}
