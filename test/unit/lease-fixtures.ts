import type { decideAcquire, LeaseHolder } from "../../src/lease/rules.js";
import { NOW } from "./support.js";

/**
 * Rows, holders and waiters for the lease-rule suites: one resource of one project, decided at
 * the fixed instant NOW.
 */

/** The rows the rules decide on, as their own signatures name them. */
export type LeaseRow = NonNullable<Parameters<typeof decideAcquire>[0]>;
export type LeaseWaiter = NonNullable<Parameters<typeof decideAcquire>[2]>[number];
/** What the store applies of a lease decision. */
export type Decided = { write?: LeaseRow; queue?: { add?: LeaseWaiter; remove?: string[] } };

export const PROJECT = "proj";
export const NAME = "repo/main";
export const TTL = 60_000;

export const holder = (id: string): LeaseHolder => ({ agentId: `agt_${id}`, agentName: `agent-${id}`, project: PROJECT });
export const A = holder("a");
export const B = holder("b");
export const C = holder("c");
export const D = holder("d");

/** A resource's row: held by `h` (or a released floor when null) on `token`, lapsing at `expiresAtMs`. */
export function row(h: LeaseHolder | null, token: number, expiresAtMs: number, acquiredAtMs = NOW - 120_000): LeaseRow {
  return {
    project: PROJECT,
    name: NAME,
    holderAgentId: h?.agentId ?? null,
    holderAgentName: h?.agentName ?? null,
    fencingToken: token,
    acquiredAtMs,
    expiresAtMs,
  };
}
/** Live, 1 ms before its expiry. */
export const liveRow = (h: LeaseHolder, token: number) => row(h, token, NOW + 1);
/** Lapsed at exactly this instant (expiresAt = now). */
export const lapsedRow = (h: LeaseHolder, token: number) => row(h, token, NOW);
/** Released: no holder, the token kept as the floor. */
export const floorRow = (token: number) => row(null, token, NOW - 1_000);

export function waiter(id: string, h: LeaseHolder, deadlineMs: number, ttlMs = 30_000, sinceMs = NOW - 5_000): LeaseWaiter {
  return { id, agentId: h.agentId, agentName: h.agentName, ttlMs, sinceMs, deadlineMs };
}
export const viewOf = (w: LeaseWaiter) => ({ agentId: w.agentId, agentName: w.agentName, sinceMs: w.sinceMs, deadlineMs: w.deadlineMs });
export const rowOf = (h: LeaseHolder, token: number, acquiredAtMs: number, expiresAtMs: number): LeaseRow => ({
  project: PROJECT,
  name: NAME,
  holderAgentId: h.agentId,
  holderAgentName: h.agentName,
  fencingToken: token,
  acquiredAtMs,
  expiresAtMs,
});
