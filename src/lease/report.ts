import type { Observer } from "../observe.js";
import type { LeaseView } from "../domain.js";

/** Who ended a holder's lease without it: an operator, or the hub on an agent's takeover, resume or eviction. */
export type ForceReleasedBy = "operator" | "takeover" | "resume" | "eviction";

/**
 * What a lease released without its holder leaves behind, wherever it happened: one count of
 * `leasesReleased` and one `lease_force_released` line. (A handover to a waiter is counted and
 * logged by the waiting call it answers.)
 */
export function reportForceRelease(observer: Observer, l: LeaseView, by: ForceReleasedBy): void {
  observer.count("leasesReleased");
  observer.log("lease_force_released", { resource: l.resource, project: l.project, agentId: l.holderAgentId, fencingToken: l.fencingToken, by });
}
