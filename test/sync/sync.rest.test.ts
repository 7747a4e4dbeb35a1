import { describe, expect, it } from "vitest";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { SyncOutcome, SyncService } from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { SyncEventSchema } from "../../gen/ts/kxm/hub/v1/sync_event_pb.js";
import { clientFor, protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { expectAuthRefused, expectRestError, expectRestOk, type Json } from "../fixtures/rest.js";
import { refused } from "../fixtures/rpc.js";
import { syncEvent } from "./fixtures.js";

/**
 * POST /v1/sync/events and GET /v1/sync/runs/{projectId}/{runId}/cursor over the REST face
 * (reference-hub.md §5.1): request checks in order, one result per event in request order,
 * cursors, security alerts, counters, project ownership and home runtimes.
 */

const RT = "rtm_runtime0001";
const RT2 = "rtm_runtime0002";
const PRJ = "prj_project0001";
const RUN = "run_run0000001";
const tokens = { p: "tok-p", q: "tok-q" };

const hubWithTokens = () => startTestHub({ config: { projectTokens: tokens } });

const push = (t: TestHub, body: unknown, token = "tok-p") =>
  t.rest("/v1/sync/events", { headers: { authorization: `Bearer ${token}` }, json: body });
/** Pushes `events` as runtime `runtimeId` of project p (or `project`) and returns the 200 body. */
async function pushOk(t: TestHub, events: unknown[], runtimeId = RT, project: "p" | "q" = "p"): Promise<Json> {
  return expectRestOk(await push(t, { project, runtimeId, events }, tokens[project]));
}
const codes = (body: Json) => body.results.map((r: Json) => r.code ?? r.outcome);
const alerts = (t: TestHub) => t.events.filter((e) => e.event === "security_alert").map((e) => e.fields);
const seq = (sequence: number, over: Record<string, unknown> = {}) => syncEvent({ sequence, ...over });
/** The same JSON value with every object's keys in reverse order. */
const reversed = (v: unknown): unknown =>
  Array.isArray(v)
    ? v.map(reversed)
    : typeof v === "object" && v !== null
      ? Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, reversed(x)]))
      : v;

describe("PushEvents request checks, in order", () => {
  it("answers an empty batch with empty results and cursors", async () => {
    await using t = await hubWithTokens();
    expect(await pushOk(t, [])).toEqual({ results: [], cursors: [] });
  });

  it("checks project, then token, then runtime id, then the events list, then its size", async () => {
    await using t = await hubWithTokens();
    const bad = { runtimeId: "nope", events: "x" };
    await expectRestError(await push(t, { ...bad }, "wrong"), 400, "protocol_error");
    await expectRestError(await push(t, { ...bad, project: "x".repeat(129) }, "wrong"), 400, "protocol_error");
    await expectAuthRefused(await push(t, { ...bad, project: "p" }, "wrong"));
    await expectAuthRefused(await push(t, { ...bad, project: "p" }, "tok-q")); // another project's token
    await expectRestError(await push(t, { ...bad, project: "p" }), 400, "invalid_runtime_id");
    await expectRestError(await push(t, { project: "p", runtimeId: "nope", events: Array(101).fill(syncEvent()) }), 400, "invalid_runtime_id");
    await expectRestError(await push(t, { project: "p", runtimeId: RT, events: "x" }), 400, "invalid_sync_batch");
  });

  it.each([
    ["missing", {}],
    ["null", { events: null }],
    ["a string", { events: "x" }],
    ["an object", { events: { 0: syncEvent() } }],
    ["a number", { events: 3 }],
  ])("refuses an events list that is %s with invalid_sync_batch", async (_, over) => {
    await using t = await hubWithTokens();
    await expectRestError(await push(t, { project: "p", runtimeId: RT, ...over }), 400, "invalid_sync_batch");
  });

  it("takes 100 events and refuses 101 with 413 sync_batch_too_large", async () => {
    await using t = await hubWithTokens();
    const events = (n: number) => Array.from({ length: n }, (_, i) => seq(i + 1));
    const body = await expectRestError(await push(t, { project: "p", runtimeId: RT, events: events(101) }), 413, "sync_batch_too_large");
    expect(body.error).toBe("a sync batch holds at most 100 events");
    expect(t.counters.get("syncAccepted")).toBeUndefined(); // nothing of a refused batch is stored
    const ok = await pushOk(t, events(100));
    expect(ok.results).toHaveLength(100);
    expect(ok.cursors).toEqual([{ projectId: PRJ, runId: RUN, cursor: 100 }]);
  });

  it("refuses a body over 256 KiB with 413 payload_too_large, before anything else", async () => {
    await using t = await hubWithTokens();
    const big = { project: "p", runtimeId: RT, events: [seq(1, { payload: { summary: "x".repeat(262_144) } })] };
    await expectRestError(await push(t, big, "wrong"), 413, "payload_too_large");
  });
});

describe("PushEvents results", () => {
  it("accepts, then answers duplicate across batches, with the reference body", async () => {
    await using t = await hubWithTokens();
    const first = await pushOk(t, [seq(1), seq(2)]);
    expect(first).toEqual({
      results: [
        { projectId: PRJ, runId: RUN, sequence: 1, outcome: "accepted" },
        { projectId: PRJ, runId: RUN, sequence: 2, outcome: "accepted" },
      ],
      cursors: [{ projectId: PRJ, runId: RUN, cursor: 2 }],
    });
    // same content, other key order and spacing
    const reordered = reversed(seq(2));
    const res = await t.rest("/v1/sync/events", {
      method: "POST",
      headers: { authorization: "Bearer tok-p", "content-type": "application/json" },
      body: JSON.stringify({ events: [seq(1), reordered], runtimeId: RT, project: "p" }, null, 3),
    });
    expect(await expectRestOk(res)).toEqual({
      results: [
        { projectId: PRJ, runId: RUN, sequence: 1, outcome: "duplicate" },
        { projectId: PRJ, runId: RUN, sequence: 2, outcome: "duplicate" },
      ],
      cursors: [{ projectId: PRJ, runId: RUN, cursor: 2 }],
    });
    expect([t.counters.get("syncAccepted"), t.counters.get("syncDuplicate")]).toEqual([2, 2]);
  });

  it("refuses a NUL character in a run's title as an invalid event, and takes the next event of the batch (on both stores)", async () => {
    await using t = await hubWithTokens();
    const body = await pushOk(t, [seq(1, { payload: { status: "running", workflowId: "wf-build", displayTitle: "Build\u0000it" } }), seq(1)]);
    expect(codes(body)).toEqual(["sync_event_invalid", "accepted"]);
  });

  it("keeps request order in a mixed batch and lists a cursor per run with an accepted or duplicate event", async () => {
    await using t = await hubWithTokens();
    await pushOk(t, [seq(1)]);
    const other = { runId: "run_run0000002" };
    const body = await pushOk(t, [
      seq(2),
      seq(1, { extra: true }),
      seq(1, other),
      seq(1, { homeRuntimeId: RT2, runId: "run_run0000003" }),
      seq(1),
      seq(2, { payload: { summary: "changed" } }),
      seq(1, other),
    ]);
    expect(body.results).toEqual([
      { projectId: PRJ, runId: RUN, sequence: 2, outcome: "accepted" },
      { projectId: PRJ, runId: RUN, sequence: 1, outcome: "rejected", code: "sync_event_invalid" },
      { projectId: PRJ, runId: "run_run0000002", sequence: 1, outcome: "accepted" },
      { projectId: PRJ, runId: "run_run0000003", sequence: 1, outcome: "rejected", code: "sync_runtime_mismatch" },
      { projectId: PRJ, runId: RUN, sequence: 1, outcome: "duplicate" },
      { projectId: PRJ, runId: RUN, sequence: 2, outcome: "conflict", code: "sync_sequence_reused" },
      { projectId: PRJ, runId: "run_run0000002", sequence: 1, outcome: "duplicate" },
    ]);
    expect(body.cursors).toEqual([
      { projectId: PRJ, runId: RUN, cursor: 2 },
      { projectId: PRJ, runId: "run_run0000002", cursor: 1 },
    ]);
    expect(Object.fromEntries(["syncAccepted", "syncDuplicate", "syncRefused", "syncConflicts"].map((c) => [c, t.counters.get(c as never)])))
      .toEqual({ syncAccepted: 3, syncDuplicate: 2, syncRefused: 3, syncConflicts: 1 });
    const metrics = await (await t.rest("/metrics")).text();
    const value = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(metrics)?.[1]);
    expect(["accepted", "duplicate", "refused"].map((k) => value(`kxm_sync_events_${k}_total`))).toEqual([3, 2, 3]);
    expect(value("kxm_sync_conflicts_total")).toBe(1);
  });

  it("keeps gaps open until filled: the cursor jumps from 1 to 4 when 2 and 3 arrive", async () => {
    await using t = await hubWithTokens();
    expect((await pushOk(t, [seq(2)])).cursors).toEqual([{ projectId: PRJ, runId: RUN, cursor: 0 }]);
    expect((await pushOk(t, [seq(1), seq(4)])).cursors).toEqual([{ projectId: PRJ, runId: RUN, cursor: 2 }]);
    expect((await pushOk(t, [seq(6)])).cursors[0].cursor).toBe(2);
    const filled = await pushOk(t, [seq(3)]);
    expect(filled.cursors).toEqual([{ projectId: PRJ, runId: RUN, cursor: 4 }]);
    const cursor = await t.rest(`/v1/sync/runs/${PRJ}/${RUN}/cursor?project=p`, { headers: { authorization: "Bearer tok-p" } });
    expect(await expectRestOk(cursor)).toEqual({ cursor: { projectId: PRJ, runId: RUN, cursor: 4 } });
  });

  it("stamps one hub-clock receivedAt per batch", async () => {
    await using t = await hubWithTokens();
    const first = t.clock.now();
    await pushOk(t, [seq(1), seq(2)]);
    t.clock.advance(1_234);
    await pushOk(t, [seq(3), seq(2)]);
    expect(await t.sql("SELECT sequence, received_at AS at FROM sync_events ORDER BY sequence")).toEqual([
      { sequence: 1, at: first },
      { sequence: 2, at: first },
      { sequence: 3, at: first + 1_234 },
    ]);
  });
});

describe("echo of an event's identity", () => {
  it("cuts string ids to 144 chars, echoes integer sequences only, and nothing of a non-object", async () => {
    await using t = await hubWithTokens();
    const long = `prj_${"x".repeat(300)}`;
    const body = await pushOk(t, [
      seq(1, { projectId: long, runId: `run_${"y".repeat(150)}` }),
      seq(1, { projectId: 12, runId: null }),
      seq(1, { sequence: "3" }),
      seq(1, { sequence: 1.5 }),
      seq(1, { sequence: 0 }),
      seq(1, { sequence: 2 ** 53 }),
      5,
      "event",
      null,
    ]);
    const invalid = { outcome: "rejected", code: "sync_event_invalid" };
    expect(body.results).toEqual([
      { projectId: long.slice(0, 144), runId: `run_${"y".repeat(140)}`, sequence: 1, ...invalid },
      { sequence: 1, ...invalid },
      { projectId: PRJ, runId: RUN, ...invalid },
      { projectId: PRJ, runId: RUN, ...invalid },
      { projectId: PRJ, runId: RUN, sequence: 0, ...invalid },
      { projectId: PRJ, runId: RUN, ...invalid },
      invalid,
      invalid,
      invalid,
    ]);
    expect(body.cursors).toEqual([]);
    expect(alerts(t)).toEqual([]); // an invalid event raises no alert
  });
});

describe("echo of an int64 sequence over the RPC faces", () => {
  it.each(protocols)("rejects a sequence no JSON number holds exactly over $name, echoing only safe integers, and answers the push", async ({ make }) => {
    await using t = await hubWithTokens();
    const sync = clientFor(SyncService, make(t.baseUrl, [withHeaders({ authorization: "Bearer tok-p" })]));
    const withSequence = (sequence: bigint, runId = RUN) => Object.assign(fromJson(SyncEventSchema, seq(1, { runId }) as JsonObject), { sequence });
    const res = await sync.pushEvents({
      project: "p",
      runtimeId: RT,
      events: [
        withSequence(1n),
        withSequence(2n ** 63n - 1n),
        withSequence(2n ** 53n + 1n),
        withSequence(-(2n ** 63n)),
        withSequence(2n ** 53n - 1n, "run_run0000002"),
      ],
    });
    // 2^63-1 read as a number is 2^63, which no int64 holds: echoed, the answer could not be
    // written after the batch was stored; 2^53+1 would come back as 2^53, another sequence.
    expect(res.results.map((r) => [SyncOutcome[r.outcome], r.code, r.sequence])).toEqual([
      ["ACCEPTED", undefined, 1n],
      ["REJECTED", "sync_event_invalid", undefined],
      ["REJECTED", "sync_event_invalid", undefined],
      ["REJECTED", "sync_event_invalid", undefined],
      ["ACCEPTED", undefined, 2n ** 53n - 1n],
    ]);
    expect((await sync.getCursor({ project: "p", projectId: PRJ, runId: RUN })).cursor?.cursor).toBe(1n);
  });
});

describe("null inside an event", () => {
  it("is refused as the schema refuses it, not read as an absent property", async () => {
    await using t = await hubWithTokens();
    const base = syncEvent().payload as object;
    const body = await pushOk(t, [
      seq(1, { payload: { ...base, summary: null } }),
      seq(1, { redaction: { version: "v1", fieldsOmitted: [], valuesReplaced: 0, extra: null } }),
      seq(1, { payload: { ...base, counts: { a: null } } }),
      seq(1),
    ]);
    expect(codes(body)).toEqual(["sync_event_invalid", "sync_event_invalid", "sync_event_invalid", "accepted"]);
  });
});

describe("runtime and ownership refusals", () => {
  it("rejects an event whose homeRuntimeId is not the pushing runtime, with an alert", async () => {
    await using t = await hubWithTokens();
    const body = await pushOk(t, [seq(5, { homeRuntimeId: RT2 })]);
    expect(body).toEqual({
      results: [{ projectId: PRJ, runId: RUN, sequence: 5, outcome: "rejected", code: "sync_runtime_mismatch" }],
      cursors: [],
    });
    expect(alerts(t)).toEqual([
      { alert: "sync_runtime_mismatch", project: "p", runtimeId: RT, projectId: PRJ, runId: RUN, sequence: 5, homeRuntimeId: RT2 },
    ]);
    expect([t.counters.get("syncRefused"), t.counters.get("syncConflicts")]).toEqual([1, undefined]);
  });

  it("answers sequence_reused for new content under a stored key and never overwrites it", async () => {
    await using t = await hubWithTokens();
    const original = seq(1);
    await pushOk(t, [original]);
    const changed = seq(1, { payload: { status: "failed" } });
    expect(codes(await pushOk(t, [changed]))).toEqual(["sync_sequence_reused"]);
    expect(codes(await pushOk(t, [changed]))).toEqual(["sync_sequence_reused"]);
    expect(codes(await pushOk(t, [original]))).toEqual(["duplicate"]);
    const [first] = alerts(t);
    expect(first).toEqual({
      alert: "sync_sequence_conflict",
      reason: "sequence_reused",
      project: "p",
      runtimeId: RT,
      projectId: PRJ,
      runId: RUN,
      sequence: 1,
      presentedHash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      existingHash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
    });
    expect(first!.presentedHash).not.toBe(first!.existingHash);
    expect(alerts(t)[1]!.existingHash).toBe(first!.existingHash);
  });

  it("gives a projectId to the first hub project that pushes it", async () => {
    await using t = await hubWithTokens();
    await pushOk(t, [seq(1)]);
    // q: a new sequence of p's projectId, and the very same event p stored
    const q = await pushOk(t, [seq(2), seq(1)], RT, "q");
    expect(q).toEqual({
      results: [
        { projectId: PRJ, runId: RUN, sequence: 2, outcome: "conflict", code: "sync_project_mismatch" },
        { projectId: PRJ, runId: RUN, sequence: 1, outcome: "conflict", code: "sync_sequence_reused" },
      ],
      cursors: [],
    });
    const mismatch = alerts(t)[0]!;
    expect(mismatch).toMatchObject({ alert: "sync_sequence_conflict", reason: "project_mismatch", project: "q", sequence: 2 });
    expect(mismatch).not.toHaveProperty("existingHash");
    // p stored that key: q's alert does not carry what p stored there (it would tell q p's content hash)
    expect(alerts(t)[1]).toMatchObject({ reason: "sequence_reused", project: "q" });
    expect(alerts(t)[1]).not.toHaveProperty("existingHash");
    // q owns projects of its own; p's cursor did not move, and q sees nothing of p's run
    expect(codes(await pushOk(t, [seq(1, { projectId: "prj_project0002" })], RT, "q"))).toEqual(["accepted"]);
    expect(codes(await pushOk(t, [seq(1, { projectId: "prj_project0002" })]))).toEqual(["sync_sequence_reused"]);
    const get = (project: "p" | "q") =>
      t.rest(`/v1/sync/runs/${PRJ}/${RUN}/cursor?project=${project}`, { headers: { authorization: `Bearer ${tokens[project]}` } });
    expect((await expectRestOk(await get("p"))).cursor.cursor).toBe(1);
    expect((await expectRestOk(await get("q"))).cursor).toEqual({ projectId: PRJ, runId: RUN, cursor: 0 });
  });

  it("keeps a run's first home runtime: another runtime cannot add to it", async () => {
    await using t = await hubWithTokens();
    await pushOk(t, [seq(1)]);
    const body = await pushOk(t, [seq(2, { homeRuntimeId: RT2 }), seq(1, { homeRuntimeId: RT2, runId: "run_run0000009" })], RT2);
    expect(body.results).toEqual([
      { projectId: PRJ, runId: RUN, sequence: 2, outcome: "conflict", code: "sync_home_runtime_mismatch" },
      { projectId: PRJ, runId: "run_run0000009", sequence: 1, outcome: "accepted" },
    ]);
    expect(alerts(t)).toEqual([
      {
        alert: "sync_sequence_conflict",
        reason: "home_runtime_mismatch",
        project: "p",
        runtimeId: RT2,
        projectId: PRJ,
        runId: RUN,
        sequence: 2,
        presentedHash: expect.stringMatching(/^sha256:/),
      },
    ]);
    expect(codes(await pushOk(t, [seq(2)]))).toEqual(["accepted"]);
  });
});

describe("GET /v1/sync/runs/{projectId}/{runId}/cursor", () => {
  it("reads a run's cursor, 0 for an unknown run, with project auth", async () => {
    await using t = await hubWithTokens();
    await pushOk(t, [seq(1), seq(2), seq(4)]);
    const get = (path: string, token = "tok-p") => t.rest(path, { headers: { authorization: `Bearer ${token}` } });
    expect(await expectRestOk(await get(`/v1/sync/runs/${PRJ}/${RUN}/cursor?project=p`))).toEqual({
      cursor: { projectId: PRJ, runId: RUN, cursor: 2 },
    });
    expect(await expectRestOk(await get(`/v1/sync/runs/${PRJ}/run_unknown0001/cursor?project=p`))).toEqual({
      cursor: { projectId: PRJ, runId: "run_unknown0001", cursor: 0 },
    });
    await expectAuthRefused(await get(`/v1/sync/runs/${PRJ}/${RUN}/cursor?project=p`, "tok-q"));
    await expectRestError(await get(`/v1/sync/runs/${PRJ}/${RUN}/cursor`), 400, "protocol_error");
  });

  /** Ids no push can store (the schema's opaque id, at most 144 characters), as [projectId, runId]. */
  const neverStored: [string, string, string][] = [
    ["a runId of 145 characters the pattern alone allows", PRJ, `r${"u".repeat(15)}_${"x".repeat(128)}`],
    ["a projectId of 145 characters the pattern alone allows", `p${"r".repeat(15)}_${"x".repeat(128)}`, RUN],
    ["a runId of 145 characters", PRJ, `run_${"r".repeat(141)}`],
    ["a runId too short after its prefix", PRJ, "run_0042"],
    ["a runId without a prefix", PRJ, "run0000001"],
    ["a projectId with an upper-case prefix", "Prj_project0001", RUN],
    ["a runId with a dot", PRJ, "run_run.000001"],
  ];
  /** The longest id a push can store (144 characters). */
  const longest = `r${"u".repeat(14)}_${"x".repeat(128)}`;

  it("refuses an id no push could store with protocol_error; a well-formed unknown one answers 0", async () => {
    await using t = await hubWithTokens();
    expect(codes(await pushOk(t, [seq(1, { runId: longest })]))).toEqual(["accepted"]);
    const get = (projectId: string, runId: string) =>
      t.rest(`/v1/sync/runs/${encodeURIComponent(projectId)}/${encodeURIComponent(runId)}/cursor?project=p`, { headers: { authorization: "Bearer tok-p" } });
    for (const [what, projectId, runId] of neverStored) expect(`${what}: ${(await get(projectId, runId)).status}`).toBe(`${what}: 400`);
    for (const [, projectId, runId] of neverStored) await expectRestError(await get(projectId, runId), 400, "protocol_error");
    expect((await expectRestOk(await get(PRJ, longest))).cursor).toEqual({ projectId: PRJ, runId: longest, cursor: 1 });
    expect((await expectRestOk(await get(PRJ, `run_${"u".repeat(128)}`))).cursor.cursor).toBe(0);
    expect((await expectRestOk(await get("prj_unknown0001", RUN))).cursor.cursor).toBe(0);
  });

  it.each(protocols)("refuses an id no push could store over $name as the REST face does", async ({ make }) => {
    await using t = await hubWithTokens();
    const sync = clientFor(SyncService, make(t.baseUrl, [withHeaders({ authorization: "Bearer tok-p" })]));
    // a refusal that echoed a 20,000-character id would not fit in gRPC's trailers (a URL that long is refused before routing)
    for (const [what, projectId, runId] of [...neverStored, ["a runId of 20,000 characters", PRJ, `run_${"r".repeat(19_996)}`]]) {
      const e = await refused(sync.getCursor({ project: "p", projectId, runId }));
      expect([e.code, e.reason, e.metadata.field], what).toEqual(["invalid_argument", "PROTOCOL_ERROR", projectId === PRJ ? "runId" : "projectId"]);
    }
    const { cursor } = await sync.getCursor({ project: "p", projectId: PRJ, runId: longest });
    expect([cursor?.runId, cursor?.cursor]).toEqual([longest, 0n]);
  });
});
