import { createClient } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  OpenMessageChangeKind,
  OpsService,
  type WatchProjectsResponse,
} from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { MessageStatus } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { RuntimePresenceState } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectRestOk } from "../fixtures/rest.js";
import { ms, refusalOf } from "../fixtures/rpc.js";
import { Frames, idle, StreamScope, streamProtocols, until } from "../fixtures/streams.js";
import { syncEvent } from "../sync/fixtures.js";

/**
 * The operator's live views (OpsService.WatchOpenMessages, WatchRuns, WatchProjects): a
 * snapshot, then each change in commit order, resumable by cursor; what the operator page shows.
 */

const tokens = { p: "tok-p", q: "tok-q" };
const config = { authToken: "admin", projectTokens: tokens, cleanupIntervalMs: 3_600_000, streamKeepAliveMs: 15_000 };
const RT = "rtm_alpha000001";

const send = async (t: TestHub, from: AgentCreds, to: AgentCreds, content = "hello", ttlMs?: number) =>
  (await expectRestOk(await t.rest("/v1/messages", { json: { target: to.id, content, ...(ttlMs && { ttlMs }) }, headers: from.headers }), 202))
    .message as { id: string };
const push = async (t: TestHub, events: Record<string, unknown>[], runtimeId = RT) =>
  (await expectRestOk(await t.rest("/v1/sync/events", { headers: { authorization: "Bearer tok-p" }, json: { project: "p", runtimeId, events } })))
    .results.map((r: { outcome: string; code?: string }) => r.code ?? r.outcome);
const heartbeat = async (t: TestHub, runtimeId = RT) =>
  expect([200, 201]).toContain((await t.rest("/v1/runtime/presence", { headers: { authorization: "Bearer tok-p" }, json: { project: "p", runtimeId } })).status);
const ev = (runId: string, sequence: number, payload: Record<string, unknown>) =>
  syncEvent({ homeRuntimeId: RT, runId, sequence, payload: { workflowId: "wf-build", ...payload }, occurredAt: `2026-01-01T12:${String(sequence).padStart(2, "0")}:00Z` });

describe.each(streamProtocols)("operator live views over $name", (protocol) => {
  const ops = (t: TestHub, token: string) => createClient(OpsService, protocol.make(t.baseUrl, [withHeaders({ authorization: `Bearer ${token}` })]));

  const messages = (s: StreamScope, t: TestHub, token: string, afterCursor?: bigint) =>
    s.add((signal) => ops(t, token).watchOpenMessages({ project: "p", ...(afterCursor !== undefined && { afterCursor }) }, { signal }));
  const runs = (s: StreamScope, t: TestHub, afterCursor?: bigint) =>
    s.add((signal) => ops(t, tokens.p).watchRuns({ project: "p", ...(afterCursor !== undefined && { afterCursor }) }, { signal }));

  /** The next change of a stream, its cursor one above the last. */
  async function next<F extends { cursor: bigint; event: { case: string | undefined; value?: unknown } }, C extends string>(
    f: Frames<F>,
    pos: { cursor: bigint },
    kind: C,
  ): Promise<Extract<F["event"], { case: C }>["value"]> {
    const r = await f.next();
    if (r.event.case !== kind) throw new Error(`expected ${kind}, got ${r.event.case}`);
    expect(r.cursor).toBe(pos.cursor + 1n);
    pos.cursor = r.cursor;
    return r.event.value as Extract<F["event"], { case: C }>["value"];
  }

  const messageSummary = (c: { kind: OpenMessageChangeKind; message?: { fromName: string; toName: string; status: MessageStatus } }) => [
    OpenMessageChangeKind[c.kind],
    c.message?.fromName,
    c.message?.toName,
    MessageStatus[c.message!.status],
  ];

  it("WatchOpenMessages: the open messages, then each sent, delivered and ended one; resumes by cursor", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "p", tokens.p);
    const first = await send(t, a, b, "secret body one");

    const w = messages(s, t, "admin");
    const snap = await w.next();
    if (snap.event.case !== "snapshot") throw new Error(snap.event.case);
    expect(snap.event.value.total).toBe(1);
    expect(snap.event.value.messages.map((m) => [m.id, m.fromName, m.toName, MessageStatus[m.status]])).toEqual([
      [first.id, "alpha", "beta", "QUEUED"],
    ]);
    expect(ms(snap.event.value.messages[0]!.expiresAt) - ms(snap.event.value.messages[0]!.createdAt)).toBeGreaterThan(0);
    const pos = { cursor: snap.cursor };

    const second = await send(t, b, a, "secret body two");
    expect(messageSummary(await next(w, pos, "change"))).toEqual(["SENT", "beta", "alpha", "QUEUED"]);
    await t.rest(`/v1/messages/${first.id}/ack`, { json: {}, headers: b.headers });
    const delivered = await next(w, pos, "change");
    expect(messageSummary(delivered)).toEqual(["DELIVERED", "alpha", "beta", "DELIVERED"]);
    expect(ms(delivered.message!.deliveredAt)).toBe(t.clock.now());
    const atCut = pos.cursor;
    await t.rest(`/v1/messages/${first.id}/reply`, { json: { content: "done" }, headers: b.headers });
    const ended = await next(w, pos, "change");
    expect(messageSummary(ended)).toEqual(["ENDED", "alpha", "beta", "REPLIED"]);
    expect(ms(ended.message!.endedAt)).toBe(t.clock.now());
    await t.rest(`/v1/messages/${second.id}`, { method: "DELETE", headers: b.headers });
    expect(messageSummary(await next(w, pos, "change"))).toEqual(["ENDED", "beta", "alpha", "CANCELLED"]);
    // No frame carries a body.
    expect(JSON.stringify(w.received, (_k, v) => (typeof v === "bigint" ? String(v) : v))).not.toContain("secret body");

    // A watcher that lost its connection after the delivery resumes there, with the project's token.
    const r = messages(s, t, tokens.p, atCut);
    const ka = await r.next();
    expect([ka.event.case, ka.cursor]).toEqual(["keepAlive", atCut]);
    const resumed = { cursor: atCut };
    expect(messageSummary(await next(r, resumed, "change"))).toEqual(["ENDED", "alpha", "beta", "REPLIED"]);
    expect(messageSummary(await next(r, resumed, "change"))).toEqual(["ENDED", "beta", "alpha", "CANCELLED"]);
  });

  it("WatchOpenMessages: a message whose TTL passes ends as expired, on the sweep", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "p", tokens.p);
    const w = messages(s, t, tokens.p);
    const snap = await w.next();
    const pos = { cursor: snap.cursor };
    await send(t, a, b, "x", 2_000);
    expect(messageSummary(await next(w, pos, "change"))[0]).toBe("SENT");
    t.clock.advance(2_000);
    await t.hub.sweepNow();
    expect(messageSummary(await next(w, pos, "change"))).toEqual(["ENDED", "alpha", "beta", "EXPIRED"]);
  });

  it("WatchOpenMessages refuses an agent's identity without the project's token, and another project's token", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const identity = { "x-kxm-agent-id": a.id, "x-kxm-agent-key": a.key };
    const asAgent = createClient(OpsService, protocol.make(t.baseUrl, [withHeaders(identity)]));
    for (const f of [messages(s, t, tokens.q), s.add((signal) => asAgent.watchOpenMessages({ project: "p" }, { signal }))]) {
      const e = await f.next().then(() => undefined, (x: unknown) => x);
      expect(refusalOf(e).reason).toBe("INVALID_AUTH");
    }
  });

  it("WatchRuns: runs under their home runtime, then each run a push moves and each refused push", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    await heartbeat(t);
    expect(await push(t, [ev("run_one000001", 1, { status: "running", displayTitle: "Build" })])).toEqual(["accepted"]);

    const w = runs(s, t);
    const snap = await w.next();
    if (snap.event.case !== "snapshot") throw new Error(snap.event.case);
    expect(
      snap.event.value.homeRuntimes.map((h) => [h.runtimeId, RuntimePresenceState[h.presence], h.orphaned, h.runs.map((r) => [r.runId, r.displayTitle, r.status])]),
    ).toEqual([[RT, "ONLINE", false, [["run_one000001", "Build", "running"]]]]);
    const pos = { cursor: snap.cursor };

    // A gap: stored, not in the prefix yet.
    expect(await push(t, [ev("run_one000001", 3, { status: "completed" })])).toEqual(["accepted"]);
    let c = await next(w, pos, "change");
    expect([c.homeRuntimeId, c.run?.runId, c.run?.status, Number(c.run?.lastSequence), c.run?.pendingGap]).toEqual([RT, "run_one000001", "running", 1, true]);
    const atCut = pos.cursor;
    expect(await push(t, [ev("run_one000001", 2, { status: "waiting" })])).toEqual(["accepted"]);
    c = await next(w, pos, "change");
    expect([c.run?.status, Number(c.run?.lastSequence), c.run?.pendingGap, c.run?.displayTitle, c.run?.updatedAt]).toEqual([
      "completed",
      3,
      false,
      "Build",
      "2026-01-01T12:03:00Z",
    ]);
    // The same sequence with other content: refused, and the operator sees the alert.
    expect(await push(t, [ev("run_one000001", 2, { status: "failed" })])).toEqual(["sync_sequence_reused"]);
    const alert = await next(w, pos, "alert");
    expect([alert.code, alert.runtimeId, alert.runId, Number(alert.sequence), ms(alert.at)]).toEqual([
      "sync_sequence_reused",
      RT,
      "run_one000001",
      2,
      t.clock.now(),
    ]);
    // A duplicate moves nothing: no frame. The next frame is the keep-alive.
    expect(await push(t, [ev("run_one000001", 2, { status: "waiting" })])).toEqual(["duplicate"]);
    await idle(t.clock);
    t.clock.advance(15_000);
    expect((await w.next()).event.case).toBe("keepAlive");

    const r = runs(s, t, atCut);
    expect((await r.next()).event.case).toBe("keepAlive");
    const resumed = { cursor: atCut };
    expect((await next(r, resumed, "change")).run?.status).toBe("completed");
    expect((await next(r, resumed, "alert")).code).toBe("sync_sequence_reused");
  });

  it("WatchProject: the four views on one stream, each resuming from its own cursor", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "p", tokens.p);
    const w = s.add((signal) => ops(t, tokens.p).watchProject({ project: "p" }, { signal }));
    const first = await w.take(4);
    const views = (frames: typeof first) => frames.map((f) => [f.event.case, f.event.value?.event.case]);
    expect(views(first).sort()).toEqual([
      ["leases", "snapshot"],
      ["messages", "snapshot"],
      ["presence", "snapshot"],
      ["runs", "snapshot"],
    ]);
    const cursors = Object.fromEntries(first.map((f) => [f.event.case, f.event.value!.cursor]));

    await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 60_000 }, headers: a.headers });
    await send(t, a, b);
    await heartbeat(t);
    expect(views(await w.take(3))).toEqual([
      ["leases", "change"],
      ["messages", "change"],
      ["presence", "runtime"],
    ]);
    w.close();
    await until(() => t.clock.sleepers === 0, "every view's stream to end with the call");

    // Resumed from the snapshot's cursors: a keep-alive per view at its cursor, then what it missed.
    const r = s.add((signal) =>
      ops(t, "admin").watchProject(
        {
          project: "p",
          presenceAfterCursor: cursors.presence,
          leasesAfterCursor: cursors.leases,
          messagesAfterCursor: cursors.messages,
          runsAfterCursor: cursors.runs,
        },
        { signal },
      ),
    );
    const again = await r.take(7);
    expect(again.filter((f) => f.event.value?.event.case === "keepAlive").map((f) => [f.event.case, f.event.value!.cursor]).sort()).toEqual(
      Object.entries(cursors).sort(),
    );
    expect(views(again.filter((f) => f.event.value?.event.case !== "keepAlive")).sort()).toEqual([
      ["leases", "change"],
      ["messages", "change"],
      ["presence", "runtime"],
    ]);

    // A cursor the hub does not have fails the whole stream: the page starts every view again.
    const stale = s.add((signal) => ops(t, tokens.p).watchProject({ project: "p", runsAfterCursor: 999n }, { signal }));
    expect(refusalOf(await stale.take(8).then(() => undefined, (x: unknown) => x)).reason).toBe("CURSOR_EXPIRED");
  });

  it("WatchProjects: the project list, again as a project's counts change; admin only", async () => {
    await using t = await startTestHub({ config });
    using s = new StreamScope();
    const w = s.add((signal) => ops(t, "admin").watchProjects({}, { signal }));
    const list = async (): Promise<[string, number, number, number][]> => {
      const f: WatchProjectsResponse = await w.next();
      if (f.event.case !== "projects") throw new Error(`expected projects, got ${f.event.case}`);
      return f.event.value.projects.map((p) => [p.project, p.onlineAgents, p.heldLeases, p.openMessages]);
    };
    expect(await list()).toEqual([
      ["p", 0, 0, 0],
      ["q", 0, 0, 0],
    ]);
    const a = await t.register("alpha", "p", tokens.p);
    expect(await list()).toEqual([
      ["p", 1, 0, 0],
      ["q", 0, 0, 0],
    ]);
    const b = await t.register("beta", "p", tokens.p);
    await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 10_000 }, headers: a.headers });
    await send(t, a, b);
    await expect.poll(async () => (await list())[0], { timeout: 5_000 }).toEqual(["p", 2, 1, 1]);
    // A lease that lapses changes nothing stored: the list is sent again at the keep-alive.
    await idle(t.clock);
    t.clock.advance(15_000);
    expect((await list())[0]).toEqual(["p", 2, 0, 1]);

    const refused = s.add((signal) => ops(t, tokens.p).watchProjects({}, { signal }));
    expect(refusalOf(await refused.next().then(() => undefined, (x: unknown) => x)).reason).toBe("INVALID_AUTH");
  });
});

