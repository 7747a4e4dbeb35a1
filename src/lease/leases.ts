import { checkCaller, type AgentCaller } from "../caller.js";
import { isoOfMs, type Clock } from "../clock.js";
import { errors, isHubError, type HubError } from "../errors.js";
import type { Observer } from "../observe.js";
import type { Bus } from "../events/bus.js";
import { createKeepOnline, createWaker } from "../events/wait.js";
import { newId } from "../ids.js";
import type { ChangeFeed, StreamChange } from "../store/change-feed.js";
import type { LeaseStore, LeaseWaiter, NamedWaiter } from "../store/lease-store.js";
import { hasNul, intInRange, requireString } from "../validate.js";
import { reportForceRelease } from "./report.js";
import {
  decideAcquire,
  decideDropOrphans,
  decideFence,
  decideForceRelease,
  queueOf,
  decideLeaving,
  decideRelease,
  decideRenew,
  decideWaiting,
  displayResource,
  heldLease,
  isLapsed,
  type FenceVerdict,
  type LeaseAnswer,
  type LeaseHolder,
  type LeaseOutcome,
} from "./rules.js";
import { holdsKey, type AgentRow, type LeaseKey, type LeaseRow, type LeaseView } from "../domain.js";

export const leaseTtl = { minMs: 5_000, maxMs: 600_000, defaultMs: 300_000 } as const;
/** How long an acquire may wait for a held lease (waitMs); 0, the default, does not wait. */
export const leaseWait = { maxMs: 600_000 } as const;
/** Leases lapsed longer than this lose their holder in the purge (the token floor stays). */
export const leasePurgeAfterMs = 7 * 24 * 3_600_000;
const maxFencingToken = Number.MAX_SAFE_INTEGER;

/**
 * A stored lease change: `seq` numbers the project's lease changes without gaps, the same on every
 * hub sharing the store (WatchLeases' cursor). The body is the decision's outcome.
 */
export interface LeaseChange extends LeaseOutcome {
  seq: number;
  project: string;
}

/** The change as watchers get it, from the store's row. */
export const leaseChangeOf = (c: StreamChange): LeaseChange => ({ seq: c.seq, project: c.project, ...(c.body as LeaseOutcome) });

export interface LeasesDeps {
  store: { leases: LeaseStore; changes: ChangeFeed };
  clock: Clock;
  observer: Observer;
  /** Lease changes as they commit, on this hub and the others: what wakes a waiting acquire. */
  bus: Bus<LeaseChange>;
  /** Ends every waiting acquire (hub shutdown). */
  shutdown?: AbortSignal;
  /**
   * Keeps a waiting acquire's agent online (its activity recorded every `everyMs` of hub time, as
   * an open stream's keep-alive does): a wait may last longer than the presence lease.
   */
  keepOnline?: { everyMs: number; record: (caller: AgentCaller) => Promise<unknown> };
}

const holderOf = (c: AgentCaller): LeaseHolder => ({ agentId: c.agentId, agentName: c.agentName, project: c.project });

/**
 * An agent's lease decision (acquire, renew, release) decides only for the instance that was
 * authenticated: the agent's row as the decision's transaction reads it must still carry the key
 * the call presented. A call already in flight when its agent was evicted or taken over is refused
 * instead of granted a lease under the id the new instance carries (which would then renew it as
 * its own, on the same token), or ending the new instance's. A caller authenticated on a row read
 * lately is checked again in full (checkCaller, D86).
 */
function asCaller<T>(caller: AgentCaller, decide: (cur: LeaseRow | undefined, nowMs: number, waiters: LeaseWaiter[]) => T) {
  return (cur: LeaseRow | undefined, nowMs: number, waiters: LeaseWaiter[], agent: AgentRow | undefined, projectHasTokens: () => boolean): T => {
    checkCaller(caller, agent, projectHasTokens);
    return decide(cur, nowMs, waiters);
  };
}

/** Whether the agent's row, as a decision reads it, still carries the key the call presented. */
const sameInstance = (caller: AgentCaller, agent: AgentRow | undefined) => holdsKey(agent, caller.keyHash);

/** What a caller that does not wait makes of an answer: a lease it holds, or lease_held. */
function held(a: LeaseAnswer): LeaseOutcome {
  if (a.kind === "queued" || a.kind === "held") throw errors.leaseHeld(a.lease);
  return a as LeaseOutcome;
}
/**
 * A lease's name, trimmed, up to 200 characters. `.` and `..` are refused: a URL's path takes
 * them for its own dot segments (every HTTP client and the URL standard remove them), so no REST
 * call, the CLI's included, could ever name such a lease again to renew or release it.
 */
function leaseName(name: string | undefined): string {
  const v = requireString("resource", name, 200);
  if (v === "." || v === "..") throw errors.protocol(`resource ${JSON.stringify(v)} cannot name a lease: a URL path takes it for a dot segment`, "resource");
  return v;
}

function fencingToken(value: bigint | number | undefined): number {
  if (value === undefined) throw errors.leaseTokenRequired();
  return intInRange("fencingToken", value, 1, maxFencingToken, 0);
}

const denialReason: Partial<Record<HubError["code"], string>> = {
  lease_held: "held",
  lease_queue_full: "queue_full",
  lease_superseded: "superseded",
  lease_expired: "expired",
  lease_not_found: "missing",
};

/** Fenced leases: validates, reads the hub clock once, and makes one store decision per call. */
export function createLeases({ store, clock, observer, bus, shutdown, keepOnline }: LeasesDeps) {
  /** One lease outcome of `agentId`'s, counted and logged the way the reference does. */
  function report(kind: LeaseOutcome["kind"], lease: LeaseView, agentId: string): void {
    const fields = {
      resource: lease.resource,
      project: lease.project,
      agentId,
      fencingToken: lease.fencingToken,
      expiresAt: isoOfMs(lease.expiresAtMs),
    };
    if (kind === "released") {
      observer.count("leasesReleased");
      observer.log("lease_released", fields);
    } else if (kind === "renewed") {
      observer.count("leasesRenewed");
      observer.log("lease_renewed", fields);
    } else {
      observer.count("leasesGranted");
      observer.log("lease_acquired", fields);
    }
  }

  /**
   * Runs one decision on the caller's (project, name), counting and logging grants and refusals
   * the way the reference does. The key is the pair itself; `resource` is only the log's form.
   */
  async function decide(
    caller: AgentCaller,
    name: string,
    run: (key: LeaseKey) => Promise<LeaseOutcome>,
  ): Promise<LeaseOutcome> {
    const resource = displayResource(caller.project, name);
    try {
      const outcome = await run({ project: caller.project, name });
      report(outcome.kind, outcome.lease, caller.agentId);
      return outcome;
    } catch (e) {
      if (isHubError(e) && denialReason[e.code]) {
        observer.count("leasesRefused");
        observer.log("lease_denied", {
          resource,
          project: caller.project,
          agentId: caller.agentId,
          reason: denialReason[e.code],
          ...(e.lease && (e.code === "lease_held" || e.code === "lease_queue_full")
            ? { heldBy: e.lease.holderAgentName }
            : e.lease && { fencingToken: e.lease.fencingToken }),
        });
      }
      throw e;
    }
  }

  /**
   * An acquire that waits: queued behind the holder, it looks again when its resource changes
   * (a release, a renewal: the bus, fed by this hub's commits and the other hubs' through the
   * store) and when the lease it waits behind lapses, never on a poll. The queue hands the lease
   * over inside the decision that frees it (rules.ts); the wait only finds out. It ends granted;
   * with lease_held when `waitMs` runs out; or, when its client goes away (or the hub stops),
   * by leaving the queue (giving the lease on if it was just handed over). While it waits its
   * agent stays online (keepOnline), as with an open stream.
   */
  async function waitFor(caller: AgentCaller, key: LeaseKey, ttlMs: number, waitMs: number, signal: AbortSignal | undefined): Promise<LeaseOutcome> {
    const holder = holderOf(caller);
    const id = newId("wtr");
    const deadlineMs = clock.now() + waitMs;
    // What is left of the wait: by the hub clock (its queue entry's deadline) and by a clock
    // that never steps, so that the hub clock stepping back does not make a call wait longer.
    const startedAt = clock.monotonicNow();
    const waitLeft = (nowMs: number) => Math.min(deadlineMs - nowMs, waitMs - (clock.monotonicNow() - startedAt));
    const waker = createWaker(clock);
    const online = keepOnline && createKeepOnline(clock, keepOnline.everyMs, () => keepOnline.record(caller));
    // Subscribed before the first look, so no change after it is missed.
    const unsubscribe = bus.subscribe(key.project, (c) => {
      if (c.lease.name === key.name) waker.wake();
    });
    const stop = linked(signal, shutdown);
    /**
     * A look made once the call has ended for good neither queues nor grants: it is refused before
     * it writes, with what ended the call (the hub stopping; a call signal aborted with a hub error
     * as its reason: the token the call was made with ended, token-guard.ts watchToken). The call
     * may have ended before its first look ran: that look, on a lease free by then, would grant
     * it to a caller its answer no longer reaches as one.
     */
    const unlessEnded =
      <A extends unknown[], T>(look: (...args: A) => T) =>
      (...args: A): T => {
        if (shutdown?.aborted) throw errors.hubShuttingDown();
        const ended = endedByHub();
        if (ended) throw ended;
        return look(...args);
      };
    /** The hub's end of the call, when that is what aborted its signal (its token ended, its project closed). */
    const endedByHub = (): HubError | undefined => (signal?.aborted && isHubError(signal.reason) ? signal.reason : undefined);
    /**
     * What a wait its call ended is answered: the hub's end of the call (invalid_auth, not a
     * refusal of the lease), else lease_held for a client gone.
     */
    const endedWith = (behind: LeaseView) => endedByHub() ?? errors.leaseHeld(behind);
    /**
     * Leaves the queue: a lease handed over meanwhile is kept, or given on when the client is
     * gone. A lease given on was granted to this call and released by it, and nothing else
     * reports either: both are counted and logged here, as a grant and a release are elsewhere.
     */
    const leave = async (clientGone: boolean) => {
      const left = await store.leases.decideLease(
        key,
        (cur, now, waiters, agent) =>
          decideLeaving(cur, { id, holder, name: key.name, nowMs: now, clientGone, instanceEnded: !sameInstance(caller, agent) }, waiters),
        caller.agentId,
      );
      if (left.kind === "left" && left.gaveOn) {
        report("granted", left.gaveOn, caller.agentId);
        report("released", left.gaveOn, caller.agentId);
      }
      return left;
    };
    /**
     * Leaves the queue for a call that ends without the lease: now, or, when the store cannot
     * take it (a database away), again and again in the background until it can or the entry's
     * wait has run out (after which no hand-over looks at it). Left there, the entry would be
     * handed the lease that nobody waits for any more.
     */
    const leaveForGood = async () => {
      try {
        await leave(true);
      } catch {
        void (async () => {
          for (let backoffMs = 100; clock.now() < deadlineMs && !shutdown?.aborted; backoffMs = Math.min(backoffMs * 2, 5_000)) {
            await clock.sleep(backoffMs, shutdown);
            try {
              await leave(true);
              return;
            } catch {
              // still away: again after the back-off
            }
          }
        })();
      }
    };
    // Set while the call's entry may be in the queue, or the lease handed to it: a look that
    // fails (the agent's key changed, the store) must not leave it there for the lease to go to.
    let entered = false;
    try {
      let a: LeaseAnswer | { kind: "gone" } = await store.leases.decideLease(
        key,
        unlessEnded(asCaller(caller, (cur, nowMs, waiters) => decideAcquire(cur, { name: key.name, holder, ttlMs, nowMs, wait: { id, deadlineMs } }, waiters))),
        caller.agentId,
      );
      let behind = a.lease;
      entered = a.kind === "queued";
      while (a.kind === "queued") {
        behind = a.lease;
        const nowMs = clock.now();
        if (waitLeft(nowMs) > 0 && !stop.signal.aborted) {
          const forMs = Math.max(0, Math.min(waitLeft(nowMs), behind.expiresAtMs - nowMs));
          await (online ? online.wait(waker, forMs, stop.signal) : waker.wait(forMs, stop.signal));
        }
        if (stop.signal.aborted || waitLeft(clock.now()) <= 0) {
          const clientGone = stop.signal.aborted;
          const left = await leave(clientGone);
          entered = false;
          if (left.kind === "granted") {
            // Kept as its wait ran out, but the client went away while that decision ran: nobody
            // will hold the lease, so it goes on to the next in line, as at the last look below.
            if (!signal?.aborted) return left;
            await leaveForGood();
            throw endedWith(behind);
          }
          if (clientGone) throw shutdown?.aborted ? errors.hubShuttingDown() : endedWith(behind);
          throw errors.leaseHeld(behind);
        }
        a = await store.leases.decideLease(
          key,
          unlessEnded(asCaller(caller, (cur, now, waiters) => decideWaiting(cur, { id, holder, name: key.name, nowMs: now }, waiters))),
          caller.agentId,
        );
      }
      if (a.kind === "gone" || a.kind === "held") {
        entered = false;
        throw errors.leaseHeld(behind);
      }
      // The client went away while the look that handed it the lease ran: nobody will hold it.
      if (entered && signal?.aborted) throw errors.leaseHeld(behind);
      entered = false;
      return a as LeaseOutcome;
    } catch (e) {
      if (entered) await leaveForGood();
      throw e;
    } finally {
      unsubscribe();
      stop.dispose();
    }
  }

  return {
    /**
     * Grants, extends (own live lease) or takes over (lapsed) a lease. With `waitMs`, a held
     * lease is waited for in the resource's queue (first come, first served) for up to that long.
     * Throws lease_held.
     */
    async acquire(caller: AgentCaller, input: { name: string; ttlMs?: number; waitMs?: number }, signal?: AbortSignal) {
      const name = leaseName(input.name);
      const ttlMs = intInRange("ttlMs", input.ttlMs, leaseTtl.minMs, leaseTtl.maxMs, leaseTtl.defaultMs);
      const waitMs = intInRange("waitMs", input.waitMs, 0, leaseWait.maxMs, 0);
      const startedMs = clock.now();
      const outcome = await decide(caller, name, async (key) =>
        waitMs > 0
          ? waitFor(caller, key, ttlMs, waitMs, signal)
          : held(
              await store.leases.decideLease(
                key,
                asCaller(caller, (cur, nowMs, waiters) => decideAcquire(cur, { name, holder: holderOf(caller), ttlMs, nowMs }, waiters)),
                caller.agentId,
              ),
            ),
      );
      // A grant that came out of the queue happened when the lease was handed over (acquiredAt):
      // the client counts the lease's time to live from its send time plus this.
      const waitedMs = waitMs > 0 && outcome.kind !== "renewed" ? Math.min(leaseWait.maxMs, Math.max(0, outcome.lease.acquiredAtMs - startedMs)) : 0;
      return { lease: outcome.lease, renewed: outcome.kind === "renewed", waitedMs };
    },

    /** Extends the caller's live lease. Throws lease_not_found, lease_superseded, lease_expired. */
    async renew(caller: AgentCaller, input: { name: string; fencingToken?: bigint | number; ttlMs?: number }) {
      const name = leaseName(input.name);
      const token = fencingToken(input.fencingToken);
      const ttlMs = intInRange("ttlMs", input.ttlMs, leaseTtl.minMs, leaseTtl.maxMs, leaseTtl.defaultMs);
      const outcome = await decide(caller, name, (key) =>
        store.leases.decideLease(
          key,
          asCaller(caller, (cur, nowMs, waiters) => decideRenew(cur, { name, holder: holderOf(caller), fencingToken: token, ttlMs, nowMs }, waiters)),
          caller.agentId,
        ),
      );
      return { lease: outcome.lease, renewed: true };
    },

    /** Releases the caller's lease (even lapsed). Throws lease_not_found, lease_superseded. */
    async release(caller: AgentCaller, input: { name: string; fencingToken?: bigint | number }) {
      const name = leaseName(input.name);
      const token = fencingToken(input.fencingToken);
      const outcome = await decide(caller, name, (key) =>
        store.leases.decideLease(
          key,
          asCaller(caller, (cur, nowMs, waiters) => decideRelease(cur, { name, holder: holderOf(caller), fencingToken: token }, waiters, nowMs)),
          caller.agentId,
        ),
      );
      return { released: true, lease: outcome.lease };
    },

    /**
     * An operator releases a lease of `project` whoever holds it; the token stays as the floor
     * and the first waiter is granted the next one in the same decision. With `fencingToken`,
     * only while that is the current token. Throws lease_not_found, lease_superseded.
     */
    async forceRelease(project: string, input: { name: string; fencingToken?: bigint | number }): Promise<{ lease: LeaseView; next?: LeaseView }> {
      const name = leaseName(input.name);
      const token = input.fencingToken === undefined ? undefined : fencingToken(input.fencingToken);
      const r = await store.leases.decideLease({ project, name }, (cur, nowMs, waiters) => decideForceRelease(cur, { name, fencingToken: token, nowMs }, waiters));
      reportForceRelease(observer, r.released, "operator");
      return { lease: r.released, ...(r.next && { next: r.next }) };
    },

    /** The lease on a resource of the caller's project, with its queue. Throws lease_not_found. */
    async get(caller: { project: string }, input: { name: string }): Promise<{ lease: LeaseView; expired: boolean }> {
      const name = leaseName(input.name);
      const key = { project: caller.project, name };
      const [row, waiters] = await Promise.all([store.leases.getLease(key), store.leases.leaseWaiters(caller.project, name)]);
      const lease = heldLease(row);
      if (!lease) throw errors.leaseNotFound(name);
      const nowMs = clock.now();
      return { lease: { ...lease, waiters: queueOf(waiters, nowMs) }, expired: isLapsed(lease, nowMs) };
    },

    /**
     * Whether `fencingToken` is the live holder's current token for the lease `name` of the
     * caller's project (decideFence): what a resource the lease protects asks before it accepts a
     * write. A read: one store read, nothing written or logged. Throws lease_token_required,
     * protocol_error.
     */
    async checkFence(caller: { project: string }, input: { name: string; fencingToken?: bigint | number }): Promise<FenceVerdict> {
      const name = leaseName(input.name);
      const token = fencingToken(input.fencingToken);
      const row = await store.leases.getLease({ project: caller.project, name });
      return decideFence(row, token, clock.now());
    },

    /** Leases of the caller's project by name; the page token is the last name of the page. */
    async list(
      caller: { project: string },
      input: { includeExpired: boolean; pageSize: number; pageToken: string },
    ): Promise<{ leases: LeaseView[]; nextPageToken: string }> {
      const limit = input.pageSize === 0 ? 100 : intInRange("pageSize", input.pageSize, 1, 1_000, 100);
      let afterName: string | undefined;
      if (input.pageToken !== "") {
        afterName = Buffer.from(input.pageToken, "base64url").toString("utf8");
        if (afterName === "" || hasNul(afterName)) throw errors.protocol("pageToken is invalid", "pageToken");
      }
      const rows = await store.leases.listLeases({
        project: caller.project,
        afterName,
        limit: limit + 1,
        includeExpired: input.includeExpired,
        nowMs: clock.now(),
      });
      const nowMs = clock.now();
      const queues = rows.length > 0 ? byName(await store.leases.leaseWaiters(caller.project)) : new Map<string, NamedWaiter[]>();
      const page = rows.slice(0, limit).map((r) => ({ ...heldLease(r)!, waiters: queueOf(queues.get(r.name) ?? [], nowMs) }));
      const last = page[page.length - 1];
      return {
        leases: page,
        nextPageToken: rows.length > limit && last ? Buffer.from(last.name, "utf8").toString("base64url") : "",
      };
    },

    /** The live leases of a project and the number of the last change they reflect (WatchLeases). */
    async snapshot(project: string): Promise<{ snapshot: LeaseView[]; cursor: number }> {
      const nowMs = clock.now();
      const { leases, waiters, head } = await store.leases.leaseSnapshot(project, nowMs);
      const queues = byName(waiters);
      return { snapshot: leases.map((r) => ({ ...heldLease(r)!, waiters: queueOf(queues.get(r.name) ?? [], nowMs) })), cursor: head };
    },

    /** The project's lease changes after `afterSeq` (a watcher catching up or resuming), and the head. */
    async changes(project: string, afterSeq: number, limit: number): Promise<{ changes: LeaseChange[]; head: number }> {
      const r = await store.changes.readChanges(project, "leases", afterSeq, limit);
      return { changes: r.changes.map(leaseChangeOf), head: r.head };
    },

    /**
     * A replica's start (PostgreSQL): the calls that hubs gone since (this one before a crash,
     * among them) left waiting leave their queues, one decision per lease (D79). Returns how many
     * leases' queues it changed.
     */
    async dropOrphanedWaiters(): Promise<number> {
      const keys = await store.leases.orphanedQueues();
      for (const key of keys) await store.leases.decideLease(key, (cur, nowMs, waiters) => decideDropOrphans(cur, { nowMs }, waiters));
      return keys.length;
    },

    /** Clears the holders of leases lapsed more than 7 days; their tokens stay as floors. */
    async purge(): Promise<number> {
      const purged = await store.leases.purgeLapsedLeases(leasePurgeAfterMs);
      for (const l of purged) {
        observer.log("lease_purged", {
          resource: displayResource(l.project, l.name),
          project: l.project,
          agentId: l.holderAgentId,
          fencingToken: l.fencingToken,
          expiresAt: isoOfMs(l.expiresAtMs),
        });
      }
      return purged.length;
    },
  };
}

export type Leases = ReturnType<typeof createLeases>;

/** Waiters grouped by the lease they wait for. */
function byName(waiters: NamedWaiter[]): Map<string, NamedWaiter[]> {
  const m = new Map<string, NamedWaiter[]>();
  for (const w of waiters) {
    const list = m.get(w.name);
    if (list) list.push(w);
    else m.set(w.name, [w]);
  }
  return m;
}

/** A signal that aborts with either of two (the call's, the hub's shutdown); dispose when done. */
function linked(a: AbortSignal | undefined, b: AbortSignal | undefined) {
  const ac = new AbortController();
  const abort = () => ac.abort("ended");
  if (a?.aborted || b?.aborted) abort();
  a?.addEventListener("abort", abort, { once: true });
  b?.addEventListener("abort", abort, { once: true });
  return {
    signal: ac.signal,
    dispose() {
      a?.removeEventListener("abort", abort);
      b?.removeEventListener("abort", abort);
    },
  };
}
