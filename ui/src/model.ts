// What the page knows of one project, kept up to date by its four streams. Each stream's
// snapshot replaces its part whole; each change updates one row. Views read it and re-render
// when it says it changed.
import type { Lease, LeaseWaiter, WatchLeasesResponse } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { LeaseEventKind } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import {
  OpenMessageChangeKind,
  type HomeRuntimeRun,
  type OpenMessage,
  type SyncAlert,
  type WatchOpenMessagesResponse,
  type WatchRunsResponse,
} from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { RuntimePresenceState, type Agent, type RuntimePresence, type WatchPresenceResponse } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { WatchProjectResponse } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { HubClock, msOf, type LinkState } from "./live.js";

/** How long (real time) a released lease or an ended message stays on screen, fading. */
export const fadeMs = 4_000;

/**
 * What last happened to a lease, when that is worth a mark: its holder ended it (released), an
 * operator or an eviction did (force-released), a lapsed lease went to another agent (taken
 * over), a released one went at once to the first waiter (handed on).
 */
export type LeaseMark = "released" | "force-released" | "taken over" | "handed on";

export interface LeaseRow {
  lease: Lease;
  mark?: LeaseMark;
  /** performance.now() of the mark. */
  markedAt?: number;
  /** Who held it before, for a "taken over" or "handed on" mark. */
  from?: { holder: string; how: "lapsed" | "released" | "force-released" };
  /** An ended lease: who was waiting for it just before (the first still waiting gets it next). */
  queue?: LeaseWaiter[];
}

/** A lease whose holder's tenure ended on screen (it fades, then goes). */
export const leaseEnded = (row: LeaseRow) => row.mark === "released" || row.mark === "force-released";

export interface MessageRow {
  message: OpenMessage;
  /** performance.now() when it ended: it fades, then goes. */
  endedAt?: number;
}

export interface RuntimeRow {
  runtimeId: string;
  host?: string;
  /** The runtime's presence lease (its heartbeat's expiry), when it ever heartbeated. */
  presenceExpiresAtMs?: number;
  /** What the hub last said of it. */
  presence: RuntimePresenceState;
  runs: Map<string, HomeRuntimeRun>;
  runTotal: number;
}

export interface AlertRow extends SyncAlert {
  /** Where the alert sits in its stream (a resume may deliver it again). */
  cursor: bigint;
}

export type StreamName = "presence" | "leases" | "messages" | "runs";

export class ProjectModel {
  readonly clock = new HubClock();
  readonly agents = new Map<string, Agent>();
  readonly leases = new Map<string, LeaseRow>();
  readonly messages = new Map<string, MessageRow>();
  messageTotal = 0;
  readonly runtimes = new Map<string, RuntimeRow>();
  readonly alerts: AlertRow[] = [];
  /** Where each view's frames have got to: the stream resumes from there after a reconnect. */
  cursors: Partial<Record<StreamName, bigint>> = {};
  link: LinkState = "connecting";
  /** The hub time of the last frame: what the views show was known then. */
  knownAtMs?: number;
  private readonly listeners = new Set<() => void>();

  constructor(readonly project: string) {}

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private changed(): void {
    for (const l of this.listeners) l();
  }

  setLink(state: LinkState): void {
    if (this.link === state) return;
    this.link = state;
    this.changed();
  }

  /** A frame of WatchProject: one of the four views'; its cursor is where that view resumes. */
  onProject(f: WatchProjectResponse): void {
    const e = f.event;
    if (e.case === undefined) return;
    if (e.case === "presence") this.onPresence(e.value);
    else if (e.case === "leases") this.onLeases(e.value);
    else if (e.case === "messages") this.onMessages(e.value);
    else this.onRuns(e.value);
    this.cursors[e.case] = e.value.cursor;
    this.knownAtMs = this.clock.now();
  }

  private runtime(runtimeId: string): RuntimeRow {
    let r = this.runtimes.get(runtimeId);
    if (!r) this.runtimes.set(runtimeId, (r = { runtimeId, presence: RuntimePresenceState.UNKNOWN, runs: new Map(), runTotal: 0 }));
    return r;
  }

  private applyRuntimePresence(p: RuntimePresence): void {
    const r = this.runtime(p.runtimeId);
    r.host = p.host ?? r.host;
    r.presence = p.presence;
    r.presenceExpiresAtMs = msOf(p.leaseExpiresAt);
  }

  onPresence(f: WatchPresenceResponse): void {
    const e = f.event;
    if (e.case === "snapshot") {
      this.clock.observe(e.value.at);
      this.agents.clear();
      for (const a of e.value.agents) this.agents.set(a.id, a);
      for (const r of e.value.runtimes) this.applyRuntimePresence(r);
    } else if (e.case === "agent") {
      this.agents.set(e.value.id, e.value);
    } else if (e.case === "forgotten") {
      this.agents.delete(e.value.id);
    } else if (e.case === "runtime") {
      this.applyRuntimePresence(e.value);
    } else if (e.case === "keepAlive") {
      this.clock.observe(e.value.at);
    }
    this.changed();
  }

  onLeases(f: WatchLeasesResponse): void {
    const e = f.event;
    if (e.case === "snapshot") {
      this.clock.observe(e.value.at);
      this.leases.clear();
      for (const l of e.value.leases) this.leases.set(l.name, { lease: l });
    } else if (e.case === "change" && e.value.lease) {
      this.onLeaseChange(e.value.kind, e.value.lease);
    } else if (e.case === "keepAlive") {
      this.clock.observe(e.value.at);
    }
    this.changed();
  }

  /**
   * One lease change. A release (by its holder or forced) marks the row, which fades; when the
   * first waiter gets the lease in the same decision, the grant right after it starts a new row
   * on the next token, saying whom it came from. Renewals and queue changes keep the row's mark.
   */
  private onLeaseChange(kind: LeaseEventKind, l: Lease): void {
    const had = this.leases.get(l.name);
    const markedAt = performance.now();
    const holder = had?.lease.holderAgentName ?? "";
    if (kind === LeaseEventKind.RELEASED || kind === LeaseEventKind.FORCE_RELEASED) {
      const mark = kind === LeaseEventKind.RELEASED ? "released" : "force-released";
      this.leases.set(l.name, { lease: l, mark, markedAt, queue: had?.lease.waiters ?? [] });
    } else if (kind === LeaseEventKind.TAKEN_OVER) {
      this.leases.set(l.name, { lease: l, mark: "taken over", markedAt, ...(had && { from: { holder, how: "lapsed" } }) });
    } else if (kind === LeaseEventKind.GRANTED && had && leaseEnded(had) && had.queue?.some((w) => w.agentId === l.holderAgentId)) {
      this.leases.set(l.name, { lease: l, mark: "handed on", markedAt, from: { holder, how: had.mark as "released" | "force-released" } });
    } else if (kind === LeaseEventKind.GRANTED) this.leases.set(l.name, { lease: l });
    else this.leases.set(l.name, { ...had, lease: l });
  }

  onMessages(f: WatchOpenMessagesResponse): void {
    const e = f.event;
    if (e.case === "snapshot") {
      this.clock.observe(e.value.at);
      this.messages.clear();
      for (const m of e.value.messages) this.messages.set(m.id, { message: m });
      this.messageTotal = e.value.total;
    } else if (e.case === "change" && e.value.message) {
      const m = e.value.message;
      const had = this.messages.get(m.id);
      // The snapshot lists the newest open messages and counts them all: a change of one it does
      // not list (an older one, delivered or ended) moves the count only when it ends.
      if (e.value.kind === OpenMessageChangeKind.ENDED) {
        if (!had || had.endedAt === undefined) this.messageTotal = Math.max(0, this.messageTotal - 1);
        if (had) this.messages.set(m.id, { message: m, endedAt: had.endedAt ?? performance.now() });
      } else {
        if (!had && e.value.kind === OpenMessageChangeKind.SENT) this.messageTotal++;
        this.messages.set(m.id, { message: m });
      }
    } else if (e.case === "keepAlive") {
      this.clock.observe(e.value.at);
    }
    this.changed();
  }

  onRuns(f: WatchRunsResponse): void {
    const e = f.event;
    if (e.case === "snapshot") {
      this.clock.observe(e.value.at);
      for (const r of this.runtimes.values()) r.runs.clear();
      for (const h of e.value.homeRuntimes) {
        const r = this.runtime(h.runtimeId);
        r.host = h.host ?? r.host;
        r.presence = h.presence;
        r.presenceExpiresAtMs = msOf(h.leaseExpiresAt);
        for (const run of h.runs) r.runs.set(`${run.projectId}/${run.runId}`, run);
        r.runTotal = h.runTotal;
      }
    } else if (e.case === "change" && e.value.run) {
      const r = this.runtime(e.value.homeRuntimeId);
      const id = `${e.value.run.projectId}/${e.value.run.runId}`;
      if (!r.runs.has(id)) r.runTotal++;
      r.runs.set(id, e.value.run);
    } else if (e.case === "alert") {
      if (!this.alerts.some((a) => a.cursor === f.cursor)) this.alerts.unshift({ ...e.value, cursor: f.cursor });
      this.alerts.splice(100);
    } else if (e.case === "keepAlive") {
      this.clock.observe(e.value.at);
    }
    this.changed();
  }

  /** Drops what has faded (released leases, ended messages); true when anything went. */
  prune(): boolean {
    const cutoff = performance.now() - fadeMs;
    let gone = false;
    for (const [name, row] of this.leases) {
      if (row.markedAt === undefined || row.markedAt >= cutoff) continue;
      if (leaseEnded(row)) gone = this.leases.delete(name) || gone;
      else this.leases.set(name, { lease: row.lease });
    }
    for (const [id, row] of this.messages) if (row.endedAt !== undefined && row.endedAt < cutoff) gone = this.messages.delete(id) || gone;
    return gone;
  }

  /** A lease not lapsed on the hub clock as the page knows it. */
  leaseLive(l: Lease): boolean {
    return (msOf(l.expiresAt) ?? 0) > this.clock.now();
  }

  /** The waiters still waiting on the hub clock as the page knows it, first in line first. */
  waiters(l: Lease): LeaseWaiter[] {
    const now = this.clock.now();
    return l.waiters.filter((w) => (msOf(w.waitUntil) ?? Infinity) > now);
  }

  /** The leases an agent holds, as the page sees them. */
  leasesOf(agentId: string): Lease[] {
    return [...this.leases.values()].filter((r) => !leaseEnded(r) && r.lease.holderAgentId === agentId).map((r) => r.lease);
  }

  /** A runtime's presence as the page sees it now: the hub's word, or its lease run out on the hub clock. */
  runtimeOnline(r: RuntimeRow): boolean {
    return r.presence === RuntimePresenceState.ONLINE && (r.presenceExpiresAtMs === undefined || r.presenceExpiresAtMs > this.clock.now());
  }
}
