import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { syncEvent } from "./fixtures.js";

/**
 * Sync events are closed: a property their schema does not name is never silently dropped. Over
 * REST the event is rejected alone (sync_event_invalid); protobuf JSON cannot keep such a property,
 * so a Connect JSON push holding one is refused whole (invalid_argument), on the fast path and
 * on connect's own (a deadline header sends it there), and nothing of it is stored. Requests of
 * open messages keep ignoring what they do not know.
 */
describe("Connect JSON and closed sync events", () => {
  it("refuses a push with a property the event's schema does not name, whichever path serves it; a clean push is accepted", async () => {
    await using t = await startTestHub({ config: { authToken: "admin" } });
    const push = (events: unknown[], headers: Record<string, string> = {}) =>
      fetch(`${t.baseUrl}/kxm.hub.v1.SyncService/PushEvents`, {
        method: "POST",
        headers: { authorization: "Bearer admin", "content-type": "application/json", ...headers },
        body: JSON.stringify({ project: "p", runtimeId: "rtm_runtime0001", events }),
      });
    for (const headers of [{}, { "connect-timeout-ms": "10000" }] as Record<string, string>[]) {
      for (const bad of [syncEvent({ bogusExtra: 1 }), syncEvent({ payload: { summary: "x", alsoBogus: true } })]) {
        const res = await push([bad], headers);
        expect(res.status, JSON.stringify(headers)).toBe(400);
        expect(await res.json()).toMatchObject({ code: "invalid_argument" });
      }
    }
    const cursor = () => t.rest("/v1/sync/runs/prj_project0001/run_run0000001/cursor?project=p", { headers: { authorization: "Bearer admin" } }).then((r) => r.json());
    expect(await cursor()).toMatchObject({ cursor: { cursor: 0 } });
    const ok = await push([syncEvent()]);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ results: [{ outcome: "SYNC_OUTCOME_ACCEPTED" }] });
    expect(await cursor()).toMatchObject({ cursor: { cursor: 1 } });
    // An open request keeps ignoring a property it does not know (a newer client's).
    const cursorRpc = await fetch(`${t.baseUrl}/kxm.hub.v1.SyncService/GetCursor`, {
      method: "POST",
      headers: { authorization: "Bearer admin", "content-type": "application/json" },
      body: JSON.stringify({ project: "p", projectId: "prj_project0001", runId: "run_run0000001", newerField: 1 }),
    });
    expect(cursorRpc.status).toBe(200);
  });
});
