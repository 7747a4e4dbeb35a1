import { describe, expect, it } from "vitest";
import { jsonOf, startTestHub } from "../fixtures/hub.js";
import { syncEvent } from "./fixtures.js";

describe("sync smoke", () => {
  it("accepts, dedupes, detects conflicts and keeps a gapless cursor", async () => {
    await using t = await startTestHub({ config: { authToken: "admin" } });
    const auth = { authorization: "Bearer admin" };
    const push = (events: unknown[]) =>
      t.rest("/v1/sync/events", { headers: auth, json: { project: "p", runtimeId: "rtm_runtime0001", events } });
    const res = await push([syncEvent(), syncEvent({ sequence: 3 }), syncEvent({ extra: 1 })]);
    expect(res.status).toBe(200);
    const body = await jsonOf(res);
    expect(body.results.map((r: { outcome: string }) => r.outcome)).toEqual(["accepted", "accepted", "rejected"]);
    expect(body.results[2].code).toBe("sync_event_invalid");
    expect(body.cursors).toEqual([{ projectId: "prj_project0001", runId: "run_run0000001", cursor: 1 }]);
    const again = await jsonOf(await push([syncEvent(), syncEvent({ sequence: 2, payload: { summary: "x" } }), syncEvent({ sequence: 3, payload: { summary: "changed" } })]));
    expect(again.results.map((r: { outcome: string; code?: string }) => r.code ?? r.outcome)).toEqual([
      "duplicate",
      "accepted",
      "sync_sequence_reused",
    ]);
    expect(again.cursors[0].cursor).toBe(3);
    expect(t.events.some((e) => e.event === "security_alert")).toBe(true);
    const cursor = await jsonOf(await t.rest("/v1/sync/runs/prj_project0001/run_run0000001/cursor?project=p", { headers: auth }));
    expect(cursor).toEqual({ cursor: { projectId: "prj_project0001", runId: "run_run0000001", cursor: 3 } });
    await t.rest("/v1/runtime/presence", { headers: auth, json: { project: "p", runtimeId: "rtm_runtime0001" } });
    const snap = await jsonOf(await t.rest("/v1/ops/snapshot?project=p", { headers: auth }));
    expect(snap).toMatchObject({
      project: "p",
      agents: [],
      openMessages: [],
      openMessageTotal: 0,
      homeRuntimes: [
        {
          runtimeId: "rtm_runtime0001",
          presence: "online",
          orphaned: false,
          runTotal: 1,
          runs: [
            {
              projectId: "prj_project0001",
              runId: "run_run0000001",
              workflowId: "wf-build",
              displayTitle: "Build it",
              status: "running",
              lastSequence: 3,
              pendingGap: false,
              updatedAt: "2026-01-01T12:00:00.123Z",
              orphaned: false,
            },
          ],
        },
      ],
    });
  });

  it("rejects an event with a property named after what every object inherits, or __proto__, over REST", async () => {
    await using t = await startTestHub({ config: { authToken: "admin" } });
    const raw = (events: string) =>
      t.rest("/v1/sync/events", {
        method: "POST",
        headers: { authorization: "Bearer admin", "content-type": "application/json" },
        body: `{"project":"p","runtimeId":"rtm_runtime0001","events":${events}}`,
      });
    const ev = JSON.stringify(syncEvent());
    const inherited = JSON.stringify({ ...syncEvent(), toString: 1 });
    const proto = ev.replace(/^\{/, '{"__proto__":{"evil":1},');
    const body = await jsonOf(await raw(`[${inherited},${proto}]`));
    expect(body.results.map((r: { outcome: string; code?: string }) => r.code ?? r.outcome)).toEqual(["sync_event_invalid", "sync_event_invalid"]);
    // Nothing of either was stored: the same event without them is the first one accepted.
    expect((await jsonOf(await raw(`[${ev}]`))).results[0].outcome).toBe("accepted");
  });

  it("rejects an event whose redaction lacks fieldsOmitted over REST, instead of storing it as []", async () => {
    await using t = await startTestHub({ config: { authToken: "admin" } });
    const push = (events: unknown[]) => t.rest("/v1/sync/events", { headers: { authorization: "Bearer admin" }, json: { project: "p", runtimeId: "rtm_runtime0001", events } });
    const without = syncEvent({ redaction: { version: "v1", valuesReplaced: 0 } });
    const body = await jsonOf(await push([without]));
    expect(body.results.map((r: { outcome: string; code?: string }) => r.code ?? r.outcome)).toEqual(["sync_event_invalid"]);
    expect((await jsonOf(await push([syncEvent()]))).results[0].outcome).toBe("accepted");
  });
});
