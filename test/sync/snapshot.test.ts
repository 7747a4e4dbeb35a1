import { createClient } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { RuntimePresenceState } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { expectRestError, expectRestOk, iso, type Json } from "../fixtures/rest.js";
import { refused } from "../fixtures/rpc.js";
import { syncEvent } from "./fixtures.js";

/**
 * GET /v1/ops/snapshot?project=P (reference-hub.md §5.4): agents, open messages without bodies,
 * and the project's runs grouped by their home runtime, described from the gapless prefix.
 */

const [A, B, C, D] = ["rtm_alpha000001", "rtm_bravo000001", "rtm_charlie00001", "rtm_delta000001"];
const PRJ = "prj_project0001";
const config = { authToken: "admin", projectTokens: { p: "tok-p" } };
const admin = { authorization: "Bearer admin" };
const STALE_MS = 30_000;

const snapshot = async (t: TestHub, project = "p") => expectRestOk(await t.rest(`/v1/ops/snapshot?project=${project}`, { headers: admin }));
async function push(t: TestHub, runtimeId: string, events: Record<string, unknown>[], token = "tok-p", project = "p") {
  const body = await expectRestOk(
    await t.rest("/v1/sync/events", { headers: { authorization: `Bearer ${token}` }, json: { project, runtimeId, events } }),
  );
  return body.results.map((r: Json) => r.code ?? r.outcome);
}
const heartbeat = async (t: TestHub, runtimeId: string, host?: string) => {
  const res = await t.rest("/v1/runtime/presence", { headers: { authorization: "Bearer tok-p" }, json: { project: "p", runtimeId, host } });
  expect([200, 201]).toContain(res.status);
};
/** Event `sequence` of run `runId` owned by `home`, at minute `minute` past noon. */
const ev = (home: string, runId: string, sequence: number, eventType: string, payload: Record<string, unknown>, minute = sequence) =>
  syncEvent({ homeRuntimeId: home, runId, sequence, eventType, payload, occurredAt: `2026-01-01T12:${String(minute).padStart(2, "0")}:00Z` });

describe("snapshot: home runtimes", () => {
  it("describes runs from their gapless prefix only", async () => {
    await using t = await startTestHub({ config });
    await heartbeat(t, A, "box-a");
    const run = "run_prefix00001";
    expect(
      await push(t, A, [
        ev(A, run, 1, "run.created", { status: "created", workflowId: "wf-one", displayTitle: "One" }),
        ev(A, run, 2, "step.entered", { status: "running", displayTitle: "One v2", stepId: "s1" }),
        ev(A, run, 3, "run.status_changed", { status: "waiting" }),
        ev(A, run, 5, "run.status_changed", { status: "completed", workflowId: "wf-gap", displayTitle: "After the gap" }, 9),
        ev(A, "run_onlygap0001", 2, "run.status_changed", { status: "running", workflowId: "wf-x" }),
      ]),
    ).toEqual(Array(5).fill("accepted"));
    const [entry] = (await snapshot(t)).homeRuntimes;
    expect(entry.runs).toEqual([
      {
        projectId: PRJ,
        runId: run,
        workflowId: "wf-one",
        displayTitle: "One v2",
        status: "waiting", // the last run.* status; step.entered's status does not count
        lastSequence: 3,
        pendingGap: true,
        updatedAt: "2026-01-01T12:03:00Z",
        orphaned: false,
      },
      { projectId: PRJ, runId: "run_onlygap0001", lastSequence: 0, pendingGap: true, orphaned: false },
    ]);
    // filling the gap brings sequence 5 into the prefix
    await push(t, A, [ev(A, run, 4, "step.transitioned", { fromStepId: "s1", toStepId: "s2" })]);
    expect((await snapshot(t)).homeRuntimes[0].runs[0]).toEqual({
      projectId: PRJ,
      runId: run,
      workflowId: "wf-gap",
      displayTitle: "After the gap",
      status: "completed",
      lastSequence: 5,
      pendingGap: false,
      updatedAt: "2026-01-01T12:09:00Z",
      orphaned: false,
    });
  });

  it("groups runs under their first home runtime and shows every runtime with presence online, expired or unknown", async () => {
    await using t = await startTestHub({ config });
    const t0 = t.clock.now();
    await heartbeat(t, B);
    await heartbeat(t, D, "box-d");
    await push(t, B, [ev(B, "run_bravo000001", 1, "run.created", { status: "created" })]);
    await push(t, C, [ev(C, "run_charlie00001", 1, "run.created", { status: "created" })]);
    // A pushes C's run as its own home: a conflict, so the run stays under C
    expect(await push(t, A, [ev(A, "run_charlie00001", 2, "run.status_changed", { status: "running" })])).toEqual([
      "sync_home_runtime_mismatch",
    ]);
    await push(t, A, [ev(A, "run_alpha000001", 1, "run.created", { status: "running" })]);
    // another hub project's runs and runtimes stay out of p's snapshot
    const other = { ...ev(A, "run_other000001", 1, "run.created", { status: "running" }), projectId: "prj_other000001" };
    expect(await push(t, A, [other], "admin", "q")).toEqual(["accepted"]);
    t.clock.advance(STALE_MS + 1);
    const t1 = t.clock.now();
    await heartbeat(t, A, "box-a");
    const snap = await snapshot(t);
    expect(snap.project).toBe("p");
    expect(snap.fetchedAt).toBe(iso(t1));
    const run = (runId: string, orphaned: boolean, status: string) => ({
      projectId: PRJ, runId, status, lastSequence: 1, pendingGap: false, updatedAt: "2026-01-01T12:01:00Z", orphaned,
    });
    expect(snap.homeRuntimes).toEqual([
      {
        runtimeId: A, host: "box-a", heartbeatAt: iso(t1), leaseExpiresAt: iso(t1 + STALE_MS), presence: "online", orphaned: false,
        runs: [run("run_alpha000001", false, "running")], runTotal: 1,
      },
      {
        runtimeId: B, heartbeatAt: iso(t0), leaseExpiresAt: iso(t0 + STALE_MS), presence: "expired", orphaned: true,
        runs: [run("run_bravo000001", true, "created")], runTotal: 1,
      },
      { runtimeId: C, presence: "unknown", orphaned: true, runs: [run("run_charlie00001", true, "created")], runTotal: 1 },
      {
        runtimeId: D, host: "box-d", heartbeatAt: iso(t0), leaseExpiresAt: iso(t0 + STALE_MS), presence: "expired", orphaned: true,
        runs: [], runTotal: 0,
      },
    ]);
  });

  it("sorts a runtime's runs by updatedAt, newest first, and shows at most 16 of them", async () => {
    await using t = await startTestHub({ config });
    await heartbeat(t, A);
    const minutes = [5, 17, 1, 12, 3, 9, 14, 0, 7, 16, 2, 11, 6, 15, 4, 10, 8, 13];
    const events = minutes.map((m) => ev(A, `run_minute0000${String(m).padStart(2, "0")}`, 1, "run.created", { status: "created" }, m));
    expect(await push(t, A, events)).toEqual(Array(18).fill("accepted"));
    const [entry] = (await snapshot(t)).homeRuntimes;
    expect(entry.runTotal).toBe(18);
    expect(entry.runs).toHaveLength(16);
    expect(entry.runs.map((r: Json) => r.updatedAt)).toEqual(
      [17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2].map((m) => `2026-01-01T12:${String(m).padStart(2, "0")}:00Z`),
    );
  });
});

describe("snapshot: agents and open messages", () => {
  it("lists agents online first, then by name, and up to 16 open messages without bodies", async () => {
    await using t = await startTestHub({ config });
    const zed = await t.register("zed", "p", "tok-p");
    const amy = await t.register("amy", "p", "tok-p");
    const bob = await t.register("bob", "p", "tok-p");
    await t.register("carl", "q", "admin");
    expect((await t.rest(`/v1/agents/${bob.id}`, { method: "DELETE", headers: bob.headers })).status).toBe(204);
    const sendTo = (target: string, extra: Json = {}) => {
      t.clock.advance(1);
      return t.rest("/v1/messages", { headers: amy.headers, json: { target, content: "secret body", ...extra } });
    };
    const oldest = await expectRestOk(await sendTo("zed"), 202);
    for (let i = 0; i < 15; i++) expect((await sendTo("zed")).status).toBe(202);
    const correlated = await expectRestOk(await sendTo("zed", { correlationId: "corr-1", delivery: "steer" }), 202);
    const replied = await expectRestOk(await sendTo("zed"), 202);
    const r = await t.rest(`/v1/messages/${replied.message.id}/reply`, { headers: zed.headers, json: { content: "done" } });
    expect(r.status).toBe(200);

    const snap = await snapshot(t);
    expect(snap.agents.map((a: Json) => [a.name, a.online])).toEqual([["amy", true], ["zed", true], ["bob", false]]);
    expect(snap.openMessageTotal).toBe(17);
    expect(snap.openMessages).toHaveLength(16);
    for (const m of snap.openMessages) {
      expect(Object.keys(m).every((k) => ["id", "status", "fromName", "toName", "delivery", "createdAt", "expiresAt", "deliveredAt", "correlationId"].includes(k)), JSON.stringify(m)).toBe(true);
      expect(m).toMatchObject({ fromName: "amy", toName: "zed", status: expect.stringMatching(/^(queued|delivered)$/) });
      expect(JSON.stringify(m)).not.toContain("secret body");
    }
    // newest first (the hub's order; the reference does not fix one): the oldest open one is cut
    const ids = snap.openMessages.map((m: Json) => m.id);
    expect(ids).not.toContain(replied.message.id);
    expect(ids).not.toContain(oldest.message.id);
    const times = snap.openMessages.map((m: Json) => Date.parse(m.createdAt));
    expect(times).toEqual([...times].sort((x, y) => y - x));
    expect(snap.openMessages[0]).toEqual({
      id: correlated.message.id, status: "queued", fromName: "amy", toName: "zed", delivery: "steer",
      createdAt: correlated.message.createdAt, expiresAt: correlated.message.expiresAt, correlationId: "corr-1",
    });
    expect(snap.openMessages[1]).not.toHaveProperty("correlationId");
    expect(snap.homeRuntimes).toEqual([]);
  });
});

describe("snapshot: admin auth", () => {
  it("trusts loopback callers as admin on a hub without an admin token (decision D46)", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    for (const headers of [{ authorization: "Bearer tok-p" }, {} as Record<string, string>]) {
      const res = await t.rest("/v1/ops/snapshot?project=p", { headers });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ project: "p" });
    }
  });

  it("answers 401 to a missing, wrong or project token, and protocol_error without a project", async () => {
    await using t = await startTestHub({ config });
    for (const headers of [{} as Record<string, string>, { authorization: "Bearer nope" }, { authorization: "Bearer tok-p" }, { authorization: "admin" }]) {
      await expectRestError(await t.rest("/v1/ops/snapshot?project=p", { headers }), 401, "invalid_auth", { extras: ["operation", "nextAction"] });
    }
    await expectRestError(await t.rest("/v1/ops/snapshot", { headers: admin }), 400, "protocol_error");
  });
});

describe("snapshot over RPC", () => {
  it("answers OpsService.GetSnapshot with the same home runtimes", async () => {
    await using t = await startTestHub({ config });
    await heartbeat(t, A, "box-a");
    await push(t, A, [ev(A, "run_rpc00000001", 1, "run.created", { status: "created", workflowId: "wf-rpc" }), ev(A, "run_rpc00000001", 3, "run.status_changed", { status: "running" })]);
    const client = (headers: Record<string, string>) => createClient(OpsService, protocols[1].make(t.baseUrl, [withHeaders(headers)]));
    const s = await client(admin).getSnapshot({ project: "p" });
    expect(s.project).toBe("p");
    expect(s.homeRuntimes).toHaveLength(1);
    const h = s.homeRuntimes[0]!;
    expect([h.runtimeId, h.host, h.presence, h.orphaned, h.runTotal]).toEqual([A, "box-a", RuntimePresenceState.ONLINE, false, 1]);
    expect(h.runs[0]).toMatchObject({ runId: "run_rpc00000001", workflowId: "wf-rpc", status: "created", lastSequence: 1n, pendingGap: true, updatedAt: "2026-01-01T12:01:00Z" });
    expect((await refused(client({ authorization: "Bearer tok-p" }).getSnapshot({ project: "p" }))).reason).toBe("INVALID_AUTH");
  });
});
