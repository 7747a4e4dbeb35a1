import { describe, expect, it } from "vitest";
import { alertBounds, createAudit } from "../../src/auth/audit.js";
import type { AuditRecord } from "../../src/domain.js";
import type { TokenStore } from "../../src/store/token-store.js";
import { FakeClock } from "../fixtures/fake-clock.js";

/**
 * How many security alerts the audit trail stores (src/auth/audit.ts alertBounds): a flood in
 * one project never keeps another project's alerts out, floods in many fill the bound for all
 * projects and never keep the hub's own out, and a project's `suppressed` counts only its own
 * dropped alerts.
 */

function audit() {
  const clock = new FakeClock();
  const stored: AuditRecord[] = [];
  const store = { appendAudit: async (records: AuditRecord[]) => void stored.push(...records) } as unknown as TokenStore;
  const a = createAudit({ store, clock, observer: { log: () => undefined, count: () => undefined } });
  const alert = (project: string, n = 1) => {
    for (let i = 0; i < n; i++) a.alert({ kind: project === "" ? "auth_refusals" : "sync_conflict", project, detail: { i } });
  };
  const of = (project: string) => stored.filter((r) => r.project === project);
  return { a, clock, stored, alert, of };
}

describe("the audit trail's alert bounds", () => {
  it("stores a project's first 60 alerts of a minute and counts the rest into its next one", () => {
    const t = audit();
    t.alert("p", 70);
    expect(t.of("p")).toHaveLength(alertBounds.perProjectPerMinute);
    expect(t.of("p").every((r) => r.detail.suppressed === undefined)).toBe(true);
    t.clock.advance(60_000);
    t.alert("p");
    expect(t.of("p")).toHaveLength(61);
    expect(t.of("p").at(-1)!.detail).toEqual({ i: 0, suppressed: 10 });
    t.alert("p");
    expect(t.of("p").at(-1)!.detail).toEqual({ i: 0 });
  });

  it("keeps neither another project's alert out nor tells it the flood's count", () => {
    const t = audit();
    t.alert("flood", 100);
    t.alert("quiet");
    expect(t.of("quiet")).toEqual([{ kind: "sync_conflict", project: "quiet", detail: { i: 0 } }]);
    t.clock.advance(60_000);
    t.alert("quiet");
    t.alert("flood");
    expect(t.of("quiet").at(-1)!.detail).toEqual({ i: 0 });
    expect(t.of("flood").at(-1)!.detail).toEqual({ i: 0, suppressed: 40 });
  });

  it("bounds all projects together, and never the hub's own alerts", () => {
    const t = audit();
    const projects = alertBounds.projectsPerMinute / alertBounds.perProjectPerMinute;
    for (let p = 0; p < projects; p++) t.alert(`p${p}`, alertBounds.perProjectPerMinute);
    expect(t.stored).toHaveLength(alertBounds.projectsPerMinute);
    t.alert("late", 3);
    expect(t.of("late")).toEqual([]);
    t.alert("", 5);
    expect(t.of("")).toHaveLength(5);
    t.clock.advance(60_000);
    t.alert("late");
    expect(t.of("late")).toEqual([{ kind: "sync_conflict", project: "late", detail: { i: 0, suppressed: 3 } }]);
  });

  it("keeps the hub's own window when it tracks as many projects as it can", () => {
    const t = audit();
    t.alert("", alertBounds.perProjectPerMinute);
    for (let p = 0; p < alertBounds.trackedProjects; p++) t.alert(`p${p}`);
    t.alert("");
    expect(t.of("")).toHaveLength(alertBounds.perProjectPerMinute);
    t.clock.advance(60_000);
    t.alert("");
    expect(t.of("").at(-1)!.detail).toEqual({ i: 0, suppressed: 1 });
  });

  it("forgets the windows of minutes that ended, unless they hold a count still to report", () => {
    const t = audit();
    t.alert("done");
    t.alert("owed", 61);
    t.clock.advance(60_000);
    t.a.prune(t.clock.now());
    t.alert("owed");
    expect(t.of("owed").at(-1)!.detail).toEqual({ i: 0, suppressed: 1 });
    t.alert("done");
    expect(t.of("done").at(-1)!.detail).toEqual({ i: 0 });
  });
});
