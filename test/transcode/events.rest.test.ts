import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { expectRestError, type Json } from "../fixtures/rest.js";
import { idle, until } from "../fixtures/streams.js";

/**
 * The server streams on the REST face (GET /v1/watch/...): server-sent events, one per frame,
 * named by the frame's case, with the frame's REST JSON as data and its cursor as id; refusals
 * before the first frame are ordinary REST errors.
 */

const tokens = { p: "tok-p", q: "tok-q" };
const config = { authToken: "admin", projectTokens: tokens, cleanupIntervalMs: 3_600_000, streamKeepAliveMs: 5_000 };
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

interface SseEvent {
  id?: string;
  event: string;
  data: Json;
}

/** Reads server-sent events from a fetch response, one at a time. */
function sse(res: Response) {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  return {
    async next(): Promise<SseEvent | undefined> {
      for (;;) {
        const end = buffer.indexOf("\n\n");
        if (end >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const e: SseEvent = { event: "message", data: {} };
          for (const line of block.split("\n")) {
            const [field, ...rest] = line.split(": ");
            const value = rest.join(": ");
            if (field === "id") e.id = value;
            else if (field === "event") e.event = value;
            else if (field === "data") e.data = JSON.parse(value);
          }
          return e;
        }
        const { done, value } = await reader.read();
        if (done) return undefined;
        buffer += decoder.decode(value, { stream: true });
      }
    },
    cancel: () => reader.cancel(),
  };
}

async function open(t: TestHub, path: string, headers: Record<string, string>, signal?: AbortSignal) {
  const res = await fetch(`${t.baseUrl}${path}`, { headers, signal });
  expect(res.status, await (res.status === 200 ? Promise.resolve("") : res.clone().text())).toBe(200);
  expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
  expect(res.headers.get("cache-control")).toBe("no-store, no-transform");
  expect(res.headers.get("x-request-id")).toMatch(/^req_/);
  return sse(res);
}

describe("server streams over REST as server-sent events", () => {
  it("WatchOpenMessages: a snapshot, then each change, ids are cursors; Last-Event-ID resumes", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "p", tokens.p);
    const ac = new AbortController();
    const events = await open(t, "/v1/watch/messages?project=p", bearer(tokens.p), ac.signal);
    const snap = (await events.next())!;
    expect(snap.event).toBe("snapshot");
    expect(snap.data.snapshot).toEqual({ messages: [], total: 0, at: new Date(t.clock.now()).toISOString() });
    expect(snap.id).toBe(String(snap.data.cursor));
    expect(typeof snap.data.cursor).toBe("number");

    const sent = await (await t.rest("/v1/messages", { json: { target: b.id, content: "hi" }, headers: a.headers })).json();
    const change = (await events.next())!;
    expect(change.event).toBe("change");
    expect(change.id).toBe(String(snap.data.cursor + 1));
    expect(change.data.change.kind).toBe("sent");
    expect(change.data.change.message).toMatchObject({ id: sent.message.id, status: "queued", fromName: "alpha", toName: "beta", delivery: "followUp" });
    ac.abort();

    await t.rest(`/v1/messages/${sent.message.id}/reply`, { json: { content: "done" }, headers: b.headers });
    // An EventSource reconnecting sends the last id it saw.
    const resumed = await open(t, "/v1/watch/messages?project=p", { ...bearer("admin"), "last-event-id": change.id! });
    const ka = (await resumed.next())!;
    expect([ka.event, ka.id]).toEqual(["keepAlive", change.id]);
    const ended = (await resumed.next())!;
    expect([ended.event, ended.data.change.kind, ended.data.change.message.status]).toEqual(["change", "ended", "replied"]);
    await resumed.cancel();
  });

  it("WatchLeases for an agent: snapshot, a grant, and a keep-alive on the hub clock", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    const events = await open(t, "/v1/watch/leases", a.headers);
    expect((await events.next())!.event).toBe("snapshot");
    await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 60_000 }, headers: a.headers });
    const granted = (await events.next())!;
    expect([granted.event, granted.data.change.kind, granted.data.change.lease.fencingToken]).toEqual(["change", "granted", 1]);
    await idle(t.clock);
    t.clock.advance(5_000);
    const ka = (await events.next())!;
    expect([ka.event, ka.data.keepAlive.at]).toEqual(["keepAlive", new Date(t.clock.now()).toISOString()]);
    await events.cancel();
  });

  it("WatchProject: the four views' frames as events named by view, resumable by four query cursors", async () => {
    await using t = await startTestHub({ config });
    const events = await open(t, "/v1/watch/project?project=p", bearer(tokens.p));
    const first = [(await events.next())!, (await events.next())!, (await events.next())!, (await events.next())!];
    expect(first.map((e) => e.event).sort()).toEqual(["leases", "messages", "presence", "runs"]);
    expect(first.every((e) => e.id === undefined && e.data[e.event].snapshot !== undefined)).toBe(true);
    await events.cancel();
    const cursor = (view: string) => first.find((e) => e.event === view)!.data[view].cursor;
    const q = `presenceAfterCursor=${cursor("presence")}&leasesAfterCursor=${cursor("leases")}&messagesAfterCursor=${cursor("messages")}&runsAfterCursor=${cursor("runs")}`;
    const resumed = await open(t, `/v1/watch/project?project=p&${q}`, bearer(tokens.p));
    const again = [(await resumed.next())!, (await resumed.next())!, (await resumed.next())!, (await resumed.next())!];
    expect(again.map((e) => [e.event, Object.keys(e.data[e.event])].flat()).sort()).toEqual([
      ["leases", "cursor", "keepAlive"],
      ["messages", "cursor", "keepAlive"],
      ["presence", "cursor", "keepAlive"],
      ["runs", "cursor", "keepAlive"],
    ]);
    await resumed.cancel();
  });

  it("WatchProjects for the admin; its frames have no id", async () => {
    await using t = await startTestHub({ config });
    const events = await open(t, "/v1/watch/projects", bearer("admin"));
    const first = (await events.next())!;
    expect(first.id).toBeUndefined();
    expect(first.data.projects.projects.map((p: Json) => p.project)).toEqual(["p", "q"]);
    await events.cancel();
  });

  it("refuses as REST does before the first event: credentials, project, cursor, Last-Event-ID", async () => {
    await using t = await startTestHub({ config });
    const a = await t.register("alpha", "p", tokens.p);
    const auth = { extras: ["operation", "nextAction"] };
    await expectRestError(await t.rest("/v1/watch/messages?project=p", { headers: bearer(tokens.q) }), 401, "invalid_auth", auth);
    await expectRestError(await t.rest("/v1/watch/messages?project=p", { headers: { "x-kxm-agent-id": a.id, "x-kxm-agent-key": a.key } }), 401, "invalid_auth", auth);
    await expectRestError(await t.rest("/v1/watch/projects", { headers: bearer(tokens.p) }), 401, "invalid_auth", auth);
    await expectRestError(await t.rest("/v1/watch/messages", { headers: bearer("admin") }), 400, "protocol_error");
    await expectRestError(await t.rest("/v1/watch/runs?project=p&afterCursor=abc", { headers: bearer("admin") }), 400, "protocol_error");
    await expectRestError(await t.rest("/v1/watch/runs?project=p", { headers: { ...bearer("admin"), "last-event-id": "12abc" } }), 400, "protocol_error");
    const expired = await t.rest("/v1/watch/runs?project=p&afterCursor=99", { headers: bearer("admin") });
    expect(expired.status).toBeGreaterThanOrEqual(400);
    expect(expired.status).toBeLessThan(500);
    // A cursor past the stream's head is said to be ahead, not older (ReadInbox and Subscribe say so too).
    expect(await expired.json()).toMatchObject({ code: "cursor_expired", error: "cursor 99 is ahead of what the hub has (0); it is not one this hub gave: resume from 0" });
    await expectRestError(await t.rest("/v1/watch/leases", { method: "POST", headers: a.headers }), 404, "route_not_found");
  });

  it("ends the stream when its client goes away, and when the hub shuts down", async () => {
    const t = await startTestHub({ config });
    try {
      const ac = new AbortController();
      const gone = await open(t, "/v1/watch/runs?project=p", bearer(tokens.p), ac.signal);
      expect((await gone.next())!.event).toBe("snapshot");
      await idle(t.clock);
      ac.abort();
      // The hub stops waiting on the stream's keep-alive: nothing sleeps on its clock any more.
      await until(() => t.clock.sleepers === 0, "the stream to end");
      const staying = await open(t, "/v1/watch/presence?project=p", bearer(tokens.p));
      expect((await staying.next())!.event).toBe("snapshot");
      await idle(t.clock);
      const closing = t.close();
      // The last event says why, so a client knows to come back (an EventSource does by itself).
      const last = (await staying.next())!;
      expect([last.event, last.data.code]).toEqual(["error", "hub_shutting_down"]);
      expect(await staying.next()).toBeUndefined();
      await closing;
    } finally {
      await t.close().catch(() => undefined);
    }
  });
});
