import { errors } from "../errors.js";
import type { Decision } from "../store/change-feed.js";
import type { LeaseDecision, LeaseWaiter } from "../store/lease-store.js";
import type { LeaseRow, LeaseView, WaiterView } from "../domain.js";

/**
 * The lease decisions, pure: given the resource's current row, the caller and the hub time,
 * what to write and what to answer. Fencing tokens only grow: a grant on a free or released
 * resource is floor + 1, a takeover of a lapsed lease is token + 1, and renewals (including the
 * holder re-acquiring its own live lease) keep the token.
 *
 * Waiting (AcquireLease with waitMs): a call that finds the lease held joins the resource's
 * queue. A resource that is free when a decision looks at it (released, lapsed, never leased)
 * goes to the first waiter whose wait has not run out and whose hub is not gone (D79), in that
 * same decision: the handover is
 * one transaction, so nobody can take the lease between the release and the next in line, and a
 * caller that does not wait never jumps the queue. Every lease decision records what it changed
 * for watchers (the handover too).
 */

export interface LeaseHolder {
  agentId: string;
  agentName: string;
  project: string;
}

export type LeaseEventKind = "granted" | "renewed" | "released" | "taken_over" | "queue_changed" | "force_released";

export interface LeaseOutcome {
  kind: LeaseEventKind;
  lease: LeaseView;
}

/**
 * What a lease decision answers its caller: an outcome it holds (or released); `queued` behind
 * `lease` (waiting); `held`: the resource went to a waiter ahead of a caller that does not wait
 * (the caller is refused with lease_held once that handover is committed).
 */
export type LeaseAnswer = LeaseOutcome | { kind: "queued" | "held"; lease: LeaseView };

/** The change a lease decision records for watchers. */
const recorded = (o: LeaseOutcome) => ({ stream: "leases" as const, body: o });

/**
 * The display form `<project>/<name>` that REST clients (and the logs) know as `resource`. It is
 * only ever shown, never looked up: two different leases may display alike (decision D44).
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

const toRow = ({ resource: _display, waiters: _queue, ...row }: LeaseView): LeaseRow => row;

/**
 * Whether a waiter can still take the lease: its wait has not run out, and the hub that holds
 * its call is not gone (D79).
 */
const stillWaiting = (w: LeaseWaiter, nowMs: number) => w.deadlineMs > nowMs && w.orphaned !== true;

/** The queue as views show it: the waiters still waiting, first in line first. */
export const queueOf = (waiters: LeaseWaiter[], nowMs: number): WaiterView[] =>
  waiters
    .filter((w) => stillWaiting(w, nowMs))
    .map((w) => ({ agentId: w.agentId, agentName: w.agentName, sinceMs: w.sinceMs, deadlineMs: w.deadlineMs }));

/** The queue after a decision's changes to it. */
const queueAfter = (waiters: LeaseWaiter[], change: { add?: LeaseWaiter; remove?: string[] }, nowMs: number): WaiterView[] =>
  queueOf([...waiters.filter((w) => !change.remove?.includes(w.id)), ...(change.add ? [change.add] : [])], nowMs);

/** A lease with its queue as it stands after the decision. */
const queued = (lease: LeaseView, queue: WaiterView[]): LeaseView => ({ ...lease, waiters: queue });

/**
 * The resource as it stands for a handover: a free or lapsed resource goes to the first waiter
 * still waiting (its lease on the next token), and the waiters whose wait ran out, or whose hub
 * is gone (nobody will answer their calls, D79), leave the queue. `from` is the row the new lease builds on; a live-looking holder in it is being
 * replaced (a takeover). `write` is the new lease's row, naming the call it went to (`handedTo`):
 * a waiting call takes the lease for its own only when it is named there (decideWaiting).
 */
function handOver(from: LeaseRow | undefined, key: { project: string; name: string }, waiters: LeaseWaiter[], nowMs: number) {
  const expired = waiters.filter((w) => !stillWaiting(w, nowMs)).map((w) => w.id);
  const next = waiters.find((w) => stillWaiting(w, nowMs));
  if (!next) return { remove: expired };
  const lease: LeaseView = {
    resource: displayResource(key.project, key.name),
    project: key.project,
    name: key.name,
    holderAgentId: next.agentId,
    holderAgentName: next.agentName,
    fencingToken: (from?.fencingToken ?? 0) + 1,
    acquiredAtMs: nowMs,
    expiresAtMs: nowMs + next.ttlMs,
  };
  const remove = [...expired, next.id];
  const outcome: LeaseOutcome = { kind: heldLease(from) ? "taken_over" : "granted", lease: queued(lease, queueAfter(waiters, { remove }, nowMs)) };
  return { remove, next, outcome, write: { ...toRow(lease), handedTo: next.id } };
}

/**
 * A renewal's row: the lease extended, with what its row records of the hand-over as it was (the
 * call it was handed to, or that an older release wrote it and recorded nothing).
 */
const renewedRow = (lease: LeaseView, current: LeaseRow | undefined): LeaseRow => ({
  ...toRow(lease),
  ...(current?.handedTo !== undefined && { handedTo: current.handedTo }),
  ...(current?.handOverUnknown && { handOverUnknown: true as const }),
});

/** The most waiting calls one lease queues (lease_queue_full past it). */
export const maxWaitersPerLease = 64;

export function decideAcquire(
  current: LeaseRow | undefined,
  req: { name: string; holder: LeaseHolder; ttlMs: number; nowMs: number; wait?: { id: string; deadlineMs: number } },
  waiters: LeaseWaiter[] = [],
): LeaseDecision<LeaseAnswer> {
  const held = heldLease(current);
  const expiresAtMs = req.nowMs + req.ttlMs;
  const me: LeaseWaiter | undefined = req.wait && {
    id: req.wait.id,
    agentId: req.holder.agentId,
    agentName: req.holder.agentName,
    ttlMs: req.ttlMs,
    sinceMs: req.nowMs,
    deadlineMs: req.wait.deadlineMs,
  };
  if (held && !isLapsed(held, req.nowMs)) {
    if (held.holderAgentId === req.holder.agentId) {
      const lease = queued({ ...held, expiresAtMs }, queueOf(waiters, req.nowMs));
      const outcome: LeaseOutcome = { kind: "renewed", lease };
      return { write: renewedRow(lease, current), change: recorded(outcome), result: outcome };
    }
    if (me) {
      // A queue is bounded: each join stores the whole queue as a change, and every decision on
      // the lease reads it. A hand-over (below) takes one out for each it lets in, so only a
      // join here can grow it.
      if (queueOf(waiters, req.nowMs).length >= maxWaitersPerLease) throw errors.leaseQueueFull(held, maxWaitersPerLease);
      // Joining the queue is a change watchers see (who waits, since when).
      const lease = queued(held, queueAfter(waiters, { add: me }, req.nowMs));
      return { queue: { add: me }, change: recorded({ kind: "queue_changed", lease }), result: { kind: "queued", lease: held } };
    }
    throw errors.leaseHeld(held);
  }
  // Free or lapsed: the queue comes first, even when the first in line is a call of the caller's
  // own agent: a place in the queue is a call's (D64), and the caller is refused or queued.
  const key = { project: req.holder.project, name: req.name };
  const h = handOver(current, key, waiters, req.nowMs);
  if (h.outcome) {
    const lease = me ? queued(h.outcome.lease, queueAfter(waiters, { remove: h.remove, add: me }, req.nowMs)) : h.outcome.lease;
    if (me) h.outcome.lease = lease;
    return {
      write: h.write,
      change: recorded(h.outcome),
      queue: { remove: h.remove, ...(me && { add: me }) },
      result: { kind: me ? "queued" : "held", lease },
    };
  }
  // @NOTE decision D43: the fence never restarts; a released resource keeps its token as floor.
  const lease: LeaseView = {
    resource: displayResource(req.holder.project, req.name),
    project: req.holder.project,
    name: req.name,
    holderAgentId: req.holder.agentId,
    holderAgentName: req.holder.agentName,
    fencingToken: (current?.fencingToken ?? 0) + 1,
    acquiredAtMs: req.nowMs,
    expiresAtMs,
    waiters: queueAfter(waiters, { remove: h.remove }, req.nowMs),
  };
  const outcome: LeaseOutcome = { kind: held ? "taken_over" : "granted", lease };
  return { write: toRow(lease), change: recorded(outcome), ...(h.remove.length > 0 && { queue: { remove: h.remove } }), result: outcome };
}

/**
 * A waiting call looks again (its resource changed, or the lease it waits behind lapsed): it has
 * the lease when the queue handed it over (its entry is gone, and the live lease's row names it
 * as the call it was handed to), or when the resource is free now and it is first in line;
 * otherwise it stays queued behind the current lease, and a free resource goes to whoever is
 * first. `gone`: its entry is not in the queue and the lease was not handed to it (its wait ran
 * out and a decision passed it over; its agent may hold the lease through another call).
 */
export function decideWaiting(
  current: LeaseRow | undefined,
  req: { id: string; holder: LeaseHolder; name: string; nowMs: number },
  waiters: LeaseWaiter[],
): LeaseDecision<LeaseAnswer | { kind: "gone" }> {
  const held = heldLease(current);
  const inQueue = waiters.some((w) => w.id === req.id);
  const live = held && !isLapsed(held, req.nowMs);
  if (!inQueue) {
    if (live && handedTo(current, req)) return { result: { kind: "granted", lease: queued(held, queueOf(waiters, req.nowMs)) } };
    return { result: { kind: "gone" } };
  }
  if (live) return { result: { kind: "queued", lease: held } };
  const h = handOver(current, { project: req.holder.project, name: req.name }, waiters, req.nowMs);
  if (!h.outcome) return { queue: { remove: h.remove }, result: { kind: "gone" } };
  return {
    write: h.write,
    change: recorded(h.outcome),
    queue: { remove: h.remove },
    result: h.next.id === req.id ? h.outcome : { kind: "queued", lease: h.outcome.lease },
  };
}

/**
 * Whether the queue handed the lease in `current` to the waiting call `req`: its agent holds it,
 * and the row names the call, or (a holder an older release wrote, which recorded no hand-over)
 * any call of the holder may take it, as before D64.
 */
const handedTo = (current: LeaseRow | undefined, req: { id: string; holder: LeaseHolder }) =>
  current !== undefined && current.holderAgentId === req.holder.agentId && (current.handOverUnknown === true || current.handedTo === req.id);

/**
 * A waiting call ends without the lease (its wait ran out, or its client went away): it leaves
 * the queue. If the queue handed it the lease in the meantime (the row names it), a wait that ran
 * out keeps it (the answer is the grant), and a call whose client is gone gives it on to the next
 * in line; a lease its agent holds through another call is not its own to keep or give on. A call
 * whose agent's instance ended (`instanceEnded`: evicted, unregistered, taken over) only leaves
 * the queue: the decision that ended the instance dealt with its leases, and a lease its agent
 * holds now may be a later instance's (D65). `gaveOn`: the lease the queue had handed it, which it
 * released (a grant and a release nobody else reports).
 */
export function decideLeaving(
  current: LeaseRow | undefined,
  req: { id: string; holder: LeaseHolder; name: string; nowMs: number; clientGone: boolean; instanceEnded?: boolean },
  waiters: LeaseWaiter[],
): LeaseDecision<LeaseAnswer | { kind: "left"; gaveOn?: LeaseView }> {
  const held = heldLease(current);
  if (waiters.some((w) => w.id === req.id)) {
    const queue = { remove: [req.id] };
    if (!held || isLapsed(held, req.nowMs)) return { queue, result: { kind: "left" } };
    return { queue, change: recorded({ kind: "queue_changed", lease: queued(held, queueAfter(waiters, queue, req.nowMs)) }), result: { kind: "left" } };
  }
  if (req.instanceEnded || !held || !handedTo(current, req) || isLapsed(held, req.nowMs)) return { result: { kind: "left" } };
  if (!req.clientGone) return { result: { kind: "granted", lease: queued(held, queueOf(waiters, req.nowMs)) } };
  const d = decideRelease(current, { name: req.name, holder: req.holder, fencingToken: held.fencingToken }, waiters, req.nowMs);
  return { ...d, result: { kind: "left", gaveOn: held } };
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
  waiters: LeaseWaiter[] = [],
): Decision<LeaseRow, LeaseOutcome> {
  const held = ownLease(current, req);
  if (isLapsed(held, req.nowMs)) throw errors.leaseExpired(held);
  const lease = queued({ ...held, expiresAtMs: req.nowMs + req.ttlMs }, queueOf(waiters, req.nowMs));
  const outcome: LeaseOutcome = { kind: "renewed", lease };
  return { write: renewedRow(lease, current), change: recorded(outcome), result: outcome };
}

/**
 * Releases even a lapsed lease of the caller; the row stays as the token floor, or goes at once
 * to the first waiter (on the next token).
 */
export function decideRelease(
  current: LeaseRow | undefined,
  req: { name: string; holder: LeaseHolder; fencingToken: number },
  waiters: LeaseWaiter[] = [],
  nowMs = 0,
): LeaseDecision<LeaseOutcome> {
  return releasing(ownLease(current, req), "released", waiters, nowMs).decision;
}

/**
 * The lease ends for its holder (`released` by it, `force_released` by an operator or an
 * eviction): the row stays as the token floor, or goes at once to the first waiter (on the next
 * token), in the same decision. Both changes are recorded, the release first.
 */
function releasing(held: LeaseView, kind: "released" | "force_released", waiters: LeaseWaiter[], nowMs: number) {
  const released: LeaseOutcome = { kind, lease: queued(held, []) };
  const floor: LeaseRow = { ...toRow(held), holderAgentId: null, holderAgentName: null };
  const h = handOver(floor, held, waiters, nowMs);
  if (!h.outcome) {
    const decision: LeaseDecision<LeaseOutcome> = { write: floor, change: recorded(released), ...(h.remove.length > 0 && { queue: { remove: h.remove } }), result: released };
    return { decision, next: undefined };
  }
  const decision: LeaseDecision<LeaseOutcome> = { write: h.write, change: [recorded(released), recorded(h.outcome)], queue: { remove: h.remove }, result: released };
  return { decision, next: h.outcome.lease };
}

/**
 * An operator releases the lease whoever holds it (OpsService.ForceReleaseLease), or an eviction
 * releases its holder's: like a release, the token stays as the floor and the first waiter gets
 * the next one. With `fencingToken`, only while that is still the current token. A lapsed lease
 * that still names its holder is released too: the row becomes a plain floor.
 * Throws lease_not_found (no holder), lease_superseded (another token than the one given).
 */
export function decideForceRelease(
  current: LeaseRow | undefined,
  req: { name: string; fencingToken?: number; nowMs: number },
  waiters: LeaseWaiter[],
): LeaseDecision<{ released: LeaseView; next?: LeaseView }> {
  const held = heldLease(current);
  if (!held) throw errors.leaseNotFound(req.name);
  if (req.fencingToken !== undefined && held.fencingToken !== req.fencingToken) throw errors.leaseSuperseded(req.name, held);
  const { decision, next } = releasing(held, "force_released", waiters, req.nowMs);
  return { ...decision, result: { released: decision.result.lease, ...(next && { next }) } };
}

/**
 * An agent's instance ends (eviction, takeover) while it waits for a lease another agent holds:
 * its calls leave the queue, and watchers (and the waiting calls themselves, which then find
 * their agent's key changed) are told.
 */
export function decideDropWaiters(current: LeaseRow | undefined, req: { agentId: string; nowMs: number }, waiters: LeaseWaiter[]): LeaseDecision<undefined> {
  return dropping(current, waiters.filter((w) => w.agentId === req.agentId).map((w) => w.id), req.nowMs, waiters);
}

/**
 * A replica starts (PostgreSQL): the calls of hubs that are gone (LeaseWaiter `orphaned`: killed,
 * or cut off from the database) leave the queue, and watchers of a held lease are told. Nothing
 * else changes: a free lease's live waiters take it when they look again (D79).
 */
export function decideDropOrphans(current: LeaseRow | undefined, req: { nowMs: number }, waiters: LeaseWaiter[]): LeaseDecision<undefined> {
  return dropping(current, waiters.filter((w) => w.orphaned === true).map((w) => w.id), req.nowMs, waiters);
}

/** The waiters `remove` leave the queue; watchers of a live lease see its queue change. */
function dropping(current: LeaseRow | undefined, remove: string[], nowMs: number, waiters: LeaseWaiter[]): LeaseDecision<undefined> {
  if (remove.length === 0) return { result: undefined };
  const held = heldLease(current);
  const queue = { remove };
  if (!held || isLapsed(held, nowMs)) return { queue, result: undefined };
  return { queue, change: recorded({ kind: "queue_changed", lease: queued(held, queueAfter(waiters, queue, nowMs)) }), result: undefined };
}

/**
 * An agent's instance ends (eviction, takeover) on a resource that names it, as holder or in its
 * queue: its waiting calls leave the queue, and a lease it holds (lapsed too) is released as an
 * operator releases one, going to the first waiter of another agent. Its own waiting call is
 * never that waiter: a lease the ending instance gave up must not come back to it.
 */
export function decideInstanceEnds(
  current: LeaseRow | undefined,
  req: { agentId: string; nowMs: number },
  waiters: LeaseWaiter[],
): LeaseDecision<{ released?: LeaseView }> {
  const held = heldLease(current);
  if (held?.holderAgentId !== req.agentId) return { ...decideDropWaiters(current, req, waiters), result: {} };
  const own = waiters.filter((w) => w.agentId === req.agentId).map((w) => w.id);
  const others = waiters.filter((w) => w.agentId !== req.agentId);
  const d = decideForceRelease(current, { name: held.name, nowMs: req.nowMs }, others);
  const remove = [...own, ...(d.queue?.remove ?? [])];
  return { ...d, ...(remove.length > 0 && { queue: { ...d.queue, remove } }), result: { released: d.result.released } };
}

/** What a fencing token is for a lease: `current` is the only one a resource may accept. */
export type FenceReason = "current" | "superseded" | "expired" | "released" | "unknown";

export interface FenceVerdict {
  valid: boolean;
  reason: FenceReason;
  /** The lease as it stands, when the answer concerns one a holder has (not for released, unknown). */
  lease?: LeaseView;
}

/**
 * Whether `fencingToken` is the live holder's current token, from the resource's row at `nowMs`.
 * The row's token is the highest ever granted for the resource (a released row keeps it as the
 * floor, a restore raises it), so: no row, or a token above it, was never issued (unknown); one
 * below it was followed by a later grant (superseded, with the lease if someone holds it); the
 * row's own token is current while its holder has it and it has not lapsed, expired once it
 * lapsed, released once the holder was cleared. Decides only; reads and writes nothing.
 */
export function decideFence(current: LeaseRow | undefined, fencingToken: number, nowMs: number): FenceVerdict {
  if (!current || fencingToken > current.fencingToken) return { valid: false, reason: "unknown" };
  const held = heldLease(current);
  if (fencingToken < current.fencingToken) return { valid: false, reason: "superseded", ...(held && { lease: held }) };
  if (!held) return { valid: false, reason: "released" };
  if (isLapsed(held, nowMs)) return { valid: false, reason: "expired", lease: held };
  return { valid: true, reason: "current", lease: held };
}
