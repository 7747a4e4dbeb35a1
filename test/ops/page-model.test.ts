import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { describe, expect, it } from "vitest";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { ProjectModel } from "../../ui/src/model.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";

/**
 * The operator page's model of a project (ui/src/model.ts) fed by the hub's own WatchOpenMessages
 * stream: its count of open messages (the Messages tab's badge and "The newest N of M") must be
 * the hub's, also when the project has more open messages than the snapshot lists (200).
 */
const send = async (t: TestHub, from: AgentCreds, to: AgentCreds) => {
  const r = await t.rest("/v1/messages", { json: { target: to.id, content: "x" }, headers: from.headers });
  if (r.status !== 202) throw new Error(`${r.status} ${await r.text()}`);
  return (await r.json()).message as { id: string };
};

describe("the operator page's count of open messages", () => {
  it("stays the hub's total when a message older than the snapshot's 200 is delivered, then ended", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha", "p");
    const b = await t.register("beta", "p");
    const ids: string[] = [];
    for (let i = 0; i < 205; i++) {
      ids.push((await send(t, a, b)).id);
      t.clock.advance(1); // distinct creation times: the oldest ones fall outside the snapshot
    }
    const ops = createClient(OpsService, createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1" }));
    const ac = new AbortController();
    const model = new ProjectModel("p");
    const frames = ops.watchOpenMessages({ project: "p" }, { signal: ac.signal })[Symbol.asyncIterator]();
    const nextFrame = async () => {
      const r = await frames.next();
      if (r.done) throw new Error("stream ended");
      model.onMessages(r.value);
      return r.value;
    };
    try {
      const snap = await nextFrame();
      expect(snap.event.case).toBe("snapshot");
      expect(model.messageTotal).toBe(205);
      expect(model.messages.has(ids[0]!)).toBe(false); // the oldest is not listed

      // beta acknowledges the oldest one: still open, the hub's total is still 205.
      expect((await t.rest(`/v1/messages/${ids[0]}/ack`, { json: {}, headers: b.headers })).status).toBe(200);
      expect((await nextFrame()).event.case).toBe("change");
      const delivered = model.messageTotal;

      // beta replies to the second oldest (never listed): 204 open on the hub.
      expect((await t.rest(`/v1/messages/${ids[1]}/reply`, { json: { content: "ok" }, headers: b.headers })).status).toBe(200);
      expect((await nextFrame()).event.case).toBe("change");
      const ended = model.messageTotal;

      // Observed: [206, 206]: the delivery counted as a new message, the ending of an unlisted one not at all.
      expect([delivered, ended]).toEqual([205, 204]);
    } finally {
      ac.abort();
    }
  });
});

describe("the operator page's agents", () => {
  it("drop an agent retention forgot, as the hub's WatchPresence says", async () => {
    await using t = await startTestHub({ config: { cleanupIntervalMs: 3_600_000, agentRetentionMs: 60_000 } });
    const a = await t.register("alpha", "p");
    const b = await t.register("beta", "p");
    expect((await t.rest(`/v1/agents/${a.id}`, { method: "DELETE", headers: a.headers })).status).toBeLessThan(300);
    const presence = createClient(PresenceService, createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1" }));
    const ac = new AbortController();
    const model = new ProjectModel("p");
    const frames = presence.watchPresence({ project: "p" }, { signal: ac.signal })[Symbol.asyncIterator]();
    const nextFrame = async () => {
      const r = await frames.next();
      if (r.done) throw new Error("stream ended");
      model.onPresence(r.value);
      return r.value;
    };
    try {
      expect((await nextFrame()).event.case).toBe("snapshot");
      expect([...model.agents.values()].map((x) => x.name).sort()).toEqual(["alpha", "beta"]);
      t.clock.advance(61_000); // alpha offline past the retention; beta calls again
      expect((await t.rest(`/v1/agents/${b.id}/heartbeat`, { method: "POST", headers: b.headers })).status).toBe(200);
      await t.hub.sweepNow();
      let f = await nextFrame();
      while (f.event.case !== "forgotten") f = await nextFrame();
      expect([...model.agents.values()].map((x) => x.name)).toEqual(["beta"]);
    } finally {
      ac.abort();
    }
  });
});
