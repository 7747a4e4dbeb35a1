/** A valid `kxm.sync-event.v1` event; `over` replaces top-level fields. */
export function syncEvent(over: Record<string, unknown> = {}): Record<string, unknown> {
  const sha = (c: string) => `sha256:${c.repeat(64)}`;
  return {
    schema: "kxm.sync-event.v1",
    sourceEventId: "evt_source0001",
    projectId: "prj_project0001",
    runId: "run_run0000001",
    homeRuntimeId: "rtm_runtime0001",
    memoryRevision: "mem_memory0001",
    eventType: "run.status_changed",
    sequence: 1,
    occurredAt: "2026-01-01T12:00:00.123Z",
    configRevision: sha("a"),
    executorPolicyRevision: sha("b"),
    toolPolicyRevision: sha("c"),
    syncPolicyRevision: sha("d"),
    redaction: { version: "v1", fieldsOmitted: [], valuesReplaced: 0 },
    payload: { status: "running", workflowId: "wf-build", displayTitle: "Build it" },
    ...over,
  };
}
