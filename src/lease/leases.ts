import type { AgentCaller } from "../caller.js";
import type { Clock } from "../clock.js";
import { errors, isHubError, type HubError, type LeaseView } from "../errors.js";
import type { Observer } from "../observe.js";
import type { Decision, HubStore, LeaseKey, LeaseRow, StreamChange } from "../store/store.js";
import { intInRange, requireString } from "../validate.js";
import {
  decideAcquire,
  decideRelease,
  decideRenew,
  displayResource,
  heldLease,
  isLapsed,
  type LeaseEventKind,
  type LeaseOutcome,
} from "./rules.js";

export const leaseTtl = { minMs: 5_000, maxMs: 600_000, defaultMs: 300_000 } as const;
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

/** Every lease decision that writes is a change watchers see: its outcome, stored with it. */
const recorded = (d: Decision<LeaseRow, LeaseOutcome>): Decision<LeaseRow, LeaseOutcome> =>
  d.write ? { ...d, change: { stream: "leases", body: d.result } } : d;

export interface LeasesDeps {
  store: HubStore;
  clock: Clock;
  observer: Observer;
}

const holderOf = (c: AgentCaller) => ({ agentId: c.agentId, agentName: c.agentName, project: c.project });
const leaseName = (name: string | undefined) => requireString("resource", name, 200);

function fencingToken(value: bigint | number | undefined): number {
  if (value === undefined) throw errors.leaseTokenRequired();
  return intInRange("fencingToken", value, 1, maxFencingToken, 0);
}

const denialReason: Partial<Record<HubError["code"], string>> = {
  lease_held: "held",
  lease_superseded: "superseded",
  lease_expired: "expired",
  lease_not_found: "missing",
};

/** Fenced leases: validates, reads the hub clock once, and makes one store decision per call. */
export function createLeases({ store, clock, observer }: LeasesDeps) {
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
      const { lease } = outcome;
      const fields = {
        resource,
        project: caller.project,
        agentId: caller.agentId,
        fencingToken: lease.fencingToken,
        expiresAt: new Date(lease.expiresAtMs).toISOString(),
      };
      if (outcome.kind === "released") {
        observer.count("leasesReleased");
        observer.log("lease_released", fields);
      } else {
        observer.count("leasesGranted");
        observer.log(outcome.kind === "renewed" ? "lease_renewed" : "lease_acquired", fields);
      }
      return outcome;
    } catch (e) {
      if (isHubError(e) && denialReason[e.code]) {
        observer.count("leasesRefused");
        observer.log("lease_denied", {
          resource,
          project: caller.project,
          agentId: caller.agentId,
          reason: denialReason[e.code],
          ...(e.lease && e.code === "lease_held"
            ? { heldBy: e.lease.holderAgentName }
            : e.lease && { fencingToken: e.lease.fencingToken }),
        });
      }
      throw e;
    }
  }

  return {
    /** Grants, extends (own live lease) or takes over (lapsed) a lease. Throws lease_held. */
    async acquire(caller: AgentCaller, input: { name: string; ttlMs?: number }) {
      const name = leaseName(input.name);
      const ttlMs = intInRange("ttlMs", input.ttlMs, leaseTtl.minMs, leaseTtl.maxMs, leaseTtl.defaultMs);
      const outcome = await decide(caller, name, (key) =>
        store.decideLease(key, (cur, nowMs) => recorded(decideAcquire(cur, { name, holder: holderOf(caller), ttlMs, nowMs }))),
      );
      return { lease: outcome.lease, renewed: outcome.kind === "renewed" };
    },

    /** Extends the caller's live lease. Throws lease_not_found, lease_superseded, lease_expired. */
    async renew(caller: AgentCaller, input: { name: string; fencingToken?: bigint | number; ttlMs?: number }) {
      const name = leaseName(input.name);
      const token = fencingToken(input.fencingToken);
      const ttlMs = intInRange("ttlMs", input.ttlMs, leaseTtl.minMs, leaseTtl.maxMs, leaseTtl.defaultMs);
      const outcome = await decide(caller, name, (key) =>
        store.decideLease(key, (cur, nowMs) =>
          recorded(decideRenew(cur, { name, holder: holderOf(caller), fencingToken: token, ttlMs, nowMs })),
        ),
      );
      return { lease: outcome.lease, renewed: true };
    },

    /** Releases the caller's lease (even lapsed). Throws lease_not_found, lease_superseded. */
    async release(caller: AgentCaller, input: { name: string; fencingToken?: bigint | number }) {
      const name = leaseName(input.name);
      const token = fencingToken(input.fencingToken);
      const outcome = await decide(caller, name, (key) =>
        store.decideLease(key, (cur) => recorded(decideRelease(cur, { name, holder: holderOf(caller), fencingToken: token }))),
      );
      return { released: true, lease: outcome.lease };
    },

    /** The lease on a resource of the caller's project. Throws lease_not_found. */
    async get(caller: { project: string }, input: { name: string }): Promise<{ lease: LeaseView; expired: boolean }> {
      const name = leaseName(input.name);
      const lease = heldLease(await store.getLease({ project: caller.project, name }));
      if (!lease) throw errors.leaseNotFound(name);
      return { lease, expired: isLapsed(lease, clock.now()) };
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
        if (afterName === "") throw errors.protocol("pageToken is invalid", "pageToken");
      }
      const rows = await store.listLeases({
        project: caller.project,
        afterName,
        limit: limit + 1,
        includeExpired: input.includeExpired,
        nowMs: clock.now(),
      });
      const page = rows.slice(0, limit).map((r) => heldLease(r)!);
      const last = page[page.length - 1];
      return {
        leases: page,
        nextPageToken: rows.length > limit && last ? Buffer.from(last.name, "utf8").toString("base64url") : "",
      };
    },

    /** The live leases of a project and the number of the last change they reflect (WatchLeases). */
    async snapshot(project: string): Promise<{ snapshot: LeaseView[]; cursor: number }> {
      const { leases, head } = await store.leaseSnapshot(project, clock.now());
      return { snapshot: leases.map((r) => heldLease(r)!), cursor: head };
    },

    /** The project's lease changes after `afterSeq` (a watcher catching up or resuming), and the head. */
    async changes(project: string, afterSeq: number, limit: number): Promise<{ changes: LeaseChange[]; head: number }> {
      const r = await store.readChanges(project, "leases", afterSeq, limit);
      return { changes: r.changes.map(leaseChangeOf), head: r.head };
    },

    /** Clears the holders of leases lapsed more than 7 days; their tokens stay as floors. */
    async purge(): Promise<number> {
      const purged = await store.purgeLapsedLeases(leasePurgeAfterMs);
      for (const l of purged) {
        observer.log("lease_purged", {
          resource: displayResource(l.project, l.name),
          project: l.project,
          agentId: l.holderAgentId,
          fencingToken: l.fencingToken,
          expiresAt: new Date(l.expiresAtMs).toISOString(),
        });
      }
      return purged.length;
    },
  };
}

export type Leases = ReturnType<typeof createLeases>;
