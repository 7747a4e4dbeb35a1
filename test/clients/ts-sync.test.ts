import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { describe, expect, it } from "vitest";
import { HubError, RunFactSync, SyncEventSchema, SyncOutcome } from "../../clients/ts/src/index.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { syncEvent } from "../sync/fixtures.js";

/** The library's run-fact helper (RunFactSync) against a real hub: batches, retries, cursors. */

const runtimeId = "rtm_runtime0001";
const fact = (runId: string, sequence: number) =>
  fromJson(SyncEventSchema, syncEvent({ runId, sequence, sourceEventId: `evt_${runId}_${String(sequence).padStart(4, "0")}` }) as JsonObject);

/** A RunFactSync on `t` that notes how many facts each PushEvents call carried. */
function counting(t: TestHub) {
  const sizes: number[] = [];
  const count: Interceptor = (next) => async (req) => {
    if (req.method.name === "PushEvents") sizes.push((req.message as unknown as { events: unknown[] }).events.length);
    return next(req);
  };
  const sync = new RunFactSync({ url: t.baseUrl, project: "p", runtimeId, transport: (i) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2", interceptors: [count, ...i] }) });
  return { sync, sizes };
}

describe("TypeScript library: RunFactSync", () => {
  it("pushes facts in batches of at most 100, in order, and reports each run's cursor", async () => {
    await using t = await startTestHub();
    const { sync, sizes } = counting(t);
    const facts = [...Array.from({ length: 150 }, (_, i) => fact("run_aaaaaaaa", i + 1)), ...Array.from({ length: 60 }, (_, i) => fact("run_bbbbbbbb", i + 1))];
    const out = await sync.push(facts);
    expect(sizes).toEqual([100, 100, 10]);
    expect(out.results).toHaveLength(210);
    expect(out.results.every((r) => r.outcome === SyncOutcome.ACCEPTED)).toBe(true);
    expect(out.cursors).toEqual(new Map([["prj_project0001/run_aaaaaaaa", 150n], ["prj_project0001/run_bbbbbbbb", 60n]]));
    expect(await sync.cursor("prj_project0001", "run_aaaaaaaa")).toBe(150n);
    expect(await sync.cursor("prj_project0001", "run_unknown01")).toBe(0n);
    sync.close();
  });

  it("sends a batch again when its answer is lost: the hub stores it once, the retry sees duplicates", async () => {
    await using t = await startTestHub();
    let lost = 0;
    // The first answer never reaches the library: the hub stored the batch, the call fails.
    const dropFirstAnswer: Interceptor = (next) => async (req) => {
      const res = await next(req);
      if (req.method.name === "PushEvents" && lost++ === 0) throw new ConnectError("connection reset", Code.Unavailable);
      return res;
    };
    const sync = new RunFactSync({
      url: t.baseUrl,
      project: "p",
      runtimeId,
      clock: t.clock,
      transport: (i) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2", interceptors: [dropFirstAnswer, ...i] }),
    });
    const pushed = sync.push([fact("run_cccccccc", 1), fact("run_cccccccc", 2)]);
    for (let i = 0; i < 200 && t.clock.sleepers === 0; i++) await new Promise((r) => setTimeout(r, 10));
    t.clock.advance(100); // the back-off
    const out = await pushed;
    expect(lost).toBe(2);
    expect(out.results.map((r) => r.outcome)).toEqual([SyncOutcome.DUPLICATE, SyncOutcome.DUPLICATE]);
    expect(out.cursors.get("prj_project0001/run_cccccccc")).toBe(2n);
    sync.close();
  });

  it("sends a batch again when its call is cut as cancelled from the hub's side, though it was given no signal", async () => {
    await using t = await startTestHub();
    let cut = 0;
    // connect-node reports an HTTP/2 stream the hub's end closed (a hub killed under the call) as Canceled.
    const cutFirst: Interceptor = (next) => async (req) => {
      if (req.method.name === "PushEvents" && cut++ === 0) throw new ConnectError("http/2 stream closed with error code CANCEL (0x8)", Code.Canceled);
      return next(req);
    };
    const sync = new RunFactSync({
      url: t.baseUrl,
      project: "p",
      runtimeId,
      clock: t.clock,
      transport: (i) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2", interceptors: [cutFirst, ...i] }),
    });
    const pushed = sync.push([fact("run_dddddddd", 1)]); // before: rejected with "cancelled"
    for (let i = 0; i < 200 && t.clock.sleepers === 0; i++) await new Promise((r) => setTimeout(r, 10));
    t.clock.advance(100); // the back-off
    const out = await pushed;
    expect(cut).toBe(2);
    expect(out.results.map((r) => r.outcome)).toEqual([SyncOutcome.ACCEPTED]);
    // The caller's own cancel still ends the push with "cancelled".
    const stop = new AbortController();
    stop.abort();
    await expect(sync.push([fact("run_dddddddd", 2)], { signal: stop.signal })).rejects.toMatchObject({ code: "cancelled" });
    sync.close();
  });

  it("throws a refusal of the whole batch as a HubError, and a refused fact is a result", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    const wrong = new RunFactSync({ url: t.baseUrl, project: "p", runtimeId, token: "nope" });
    await expect(wrong.push([fact("run_dddddddd", 1)])).rejects.toSatisfy((e: unknown) => e instanceof HubError && e.code === "invalid_auth");
    wrong.close();
    const sync = new RunFactSync({ url: t.baseUrl, project: "p", runtimeId, token: "tok-p" });
    const other = fromJson(SyncEventSchema, syncEvent({ runId: "run_dddddddd", sequence: 1, homeRuntimeId: "rtm_someoneelse" }) as JsonObject);
    const out = await sync.push([other]);
    expect(out.results[0]?.outcome).toBe(SyncOutcome.REJECTED);
    expect(out.results[0]?.code).toBe("sync_runtime_mismatch");
    expect(() => new RunFactSync({ url: t.baseUrl, project: "p", runtimeId, batchSize: 101 })).toThrow(HubError);
    sync.close();
  });

  it("cuts a batch short of the hub's request size: 100 facts of 4 KB each go in two calls, and all are stored", async () => {
    await using t = await startTestHub();
    const { sync, sizes } = counting(t);
    // About 4 KB of JSON each: 100 of them are over the hub's default 256 KiB request limit.
    const omitted = Array.from({ length: 40 }, (_, i) => `field.${String(i).padStart(3, "0")}.${"x".repeat(90)}`);
    const big = (sequence: number) =>
      fromJson(SyncEventSchema, syncEvent({ runId: "run_eeeeeeee", sequence, sourceEventId: `evt_e_${String(sequence).padStart(4, "0")}`, redaction: { version: "v1", fieldsOmitted: omitted, valuesReplaced: 0 } }) as JsonObject);
    const out = await sync.push(Array.from({ length: 100 }, (_, i) => big(i + 1)));
    expect(sizes.length).toBe(2);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(100);
    expect(out.results.every((r) => r.outcome === SyncOutcome.ACCEPTED)).toBe(true);
    expect(out.cursors.get("prj_project0001/run_eeeeeeee")).toBe(100n);
    // A limit the hub was configured with is the caller's to give; below two reserves it is refused.
    expect(() => new RunFactSync({ url: t.baseUrl, project: "p", runtimeId, maxBatchBytes: 100 })).toThrow(HubError);
    sync.close();
  });
});
