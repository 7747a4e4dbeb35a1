import type { Clock } from "../clock.js";
import { errors, HubError, type HubCode } from "../errors.js";
import type { Observer } from "../observe.js";
import type { TokenStore } from "../store/token-store.js";
import { intInRange, projectName } from "../validate.js";
import type { AuditRecord, AuditRow } from "../domain.js";

/**
 * The audit trail operators read (OpsService.ListAuditEvents, the operator page): token
 * decisions write their entries in their own transactions (project-tokens.ts), restores and
 * fence raises in theirs (the store's restore steps); security alerts come through `alert`.
 */

/**
 * The trail's bound: entries older than 90 days go, and never more than the newest 100,000
 * stay (the sweep purges), so a burst of alerts cannot grow the store without end.
 */
export const auditRetention = { ms: 90 * 24 * 60 * 60 * 1_000, entries: 100_000 } as const;

/**
 * How many alerts are stored, per minute of the hub clock: at most 60 for each project (the
 * hub's own, project "", included), and at most 600 for all projects together, the hub's own
 * left out. A flood in one project never keeps another project's alerts from being stored;
 * floods in ten or more can fill the bound for all projects, but never keep the hub's own
 * (bursts of refused authentication) out. Each dropped alert is counted in the next one stored
 * for its own project (`suppressed`), so no project reads another's count.
 */
export const alertBounds = { perProjectPerMinute: 60, projectsPerMinute: 600, trackedProjects: 10_000 } as const;

export interface AuditDeps {
  store: TokenStore;
  clock: Clock;
  observer: Observer;
}

export interface AuditPage {
  events: AuditRow[];
  /** The seq to continue below, or undefined on the last page. */
  nextBeforeSeq?: number;
}

export function createAudit({ store, clock, observer }: AuditDeps) {
  /** This minute's alerts by project: stored, and dropped since the last one stored. */
  const windows = new Map<string, { startMs: number; stored: number; suppressed: number }>();
  /** All projects' alerts stored this minute, the hub's own ("") left out. */
  let projects = { startMs: -Infinity, stored: 0 };

  return {
    /**
     * Stores a security alert without holding up the call that raised it (the alert is also in
     * the log, written at once). Bounded per project and minute on the hub clock (alertBounds);
     * the count of the ones dropped goes into the project's next one stored (`suppressed`).
     */
    alert(record: AuditRecord): void {
      const nowMs = clock.now();
      const key = record.project;
      let w = windows.get(key);
      if (!w) {
        // The oldest project's window goes first; the hub's own is never the one dropped.
        if (windows.size >= alertBounds.trackedProjects) for (const k of windows.keys()) if (k !== "" && windows.delete(k)) break;
        windows.set(key, (w = { startMs: nowMs, stored: 0, suppressed: 0 }));
      } else if (nowMs - w.startMs >= 60_000) {
        w.startMs = nowMs;
        w.stored = 0;
      }
      if (key !== "" && nowMs - projects.startMs >= 60_000) projects = { startMs: nowMs, stored: 0 };
      if (w.stored >= alertBounds.perProjectPerMinute || (key !== "" && projects.stored >= alertBounds.projectsPerMinute)) {
        w.suppressed++;
        return;
      }
      w.stored++;
      if (key !== "") projects.stored++;
      const detail = w.suppressed > 0 ? { ...record.detail, suppressed: w.suppressed } : record.detail;
      w.suppressed = 0;
      store.appendAudit([{ ...record, detail }]).catch((e: unknown) => observer.log("audit_write_failed", { kind: record.kind, error: String(e) }));
    },

    /** Drops the windows of projects whose minute ended with nothing dropped (the sweep). */
    prune(nowMs: number): void {
      for (const [k, w] of windows) if (nowMs - w.startMs >= 60_000 && w.suppressed === 0) windows.delete(k);
    },

    /** One page of the trail, newest first; `pageToken` is a previous page's `nextPageToken`. */
    async list(input: { project?: string; pageSize?: number; pageToken?: string }): Promise<AuditPage> {
      const project = input.project ? projectName("project", input.project) : undefined;
      const limit = intInRange("pageSize", input.pageSize, 1, 1_000, 100);
      let beforeSeq: number | undefined;
      if (input.pageToken) {
        if (!/^[1-9]\d{0,15}$/.test(input.pageToken)) throw errors.protocol("pageToken is not one this hub gave", "pageToken");
        beforeSeq = Number(input.pageToken);
      }
      const rows = await store.listAudit({ ...(project !== undefined && { project }), ...(beforeSeq !== undefined && { beforeSeq }), limit: limit + 1 });
      const events = rows.slice(0, limit);
      return rows.length > limit ? { events, nextBeforeSeq: events[events.length - 1]!.seq } : { events };
    },

    /** The sweep's purge (auditRetention). */
    purge: () => store.purgeAudit(auditRetention.ms, auditRetention.entries),
  };
}

export type Audit = ReturnType<typeof createAudit>;

/** The refusals that say a caller failed to prove who it is. */
const authRefusalCodes = new Set<HubCode>(["invalid_auth", "invalid_agent_identity", "token_scope_insufficient"]);

/**
 * Watches refused authentications per remote address: when one address is refused `threshold`
 * times within a minute (hub clock), one `auth_refusals` alert is stored for that minute. The
 * addresses tracked are bounded (the oldest windows are dropped first).
 */
export function createRefusalMonitor({ audit, clock, threshold = 20, maxTracked = 10_000 }: { audit: Audit; clock: Clock; threshold?: number; maxTracked?: number }) {
  const windows = new Map<string, { startMs: number; count: number; alerted: boolean }>();
  return {
    /** A call from `remoteAddress` ended with `error`: counted when it is a refused authentication. */
    refusedWith(remoteAddress: string, error: unknown): void {
      if (error instanceof HubError && authRefusalCodes.has(error.code)) this.refused(remoteAddress, error.code);
    },
    refused(remoteAddress: string, code: string): void {
      const nowMs = clock.now();
      let w = windows.get(remoteAddress);
      if (!w || nowMs - w.startMs >= 60_000) {
        windows.delete(remoteAddress);
        if (windows.size >= maxTracked) windows.delete(windows.keys().next().value!);
        windows.set(remoteAddress, (w = { startMs: nowMs, count: 0, alerted: false }));
      }
      w.count++;
      if (w.count >= threshold && !w.alerted) {
        w.alerted = true;
        audit.alert({ kind: "auth_refusals", project: "", detail: { remoteAddress, refusals: w.count, windowMs: 60_000, lastCode: code } });
      }
    },
    /** Drops the windows that ended (the sweep). */
    prune(nowMs: number): void {
      for (const [k, w] of windows) if (nowMs - w.startMs >= 60_000) windows.delete(k);
    },
  };
}

export type RefusalMonitor = ReturnType<typeof createRefusalMonitor>;
