/**
 * A call of an instance taken over while the call is under way (authenticated, its decision or
 * read not yet made) acts for nobody: a takeover keeps the agent's id (D26), so every message
 * decision checks the agent's key in its own transaction, and every inbox read checks it after
 * reading, before anything read is answered or sent. The tests run the takeover (and a message to
 * the new instance) inside the call's store call.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { describe, expect, it } from "vitest";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { withHeaders } from "../fixtures/clients.js";
import { jsonOf, startTestHub, type TestHub } from "../fixtures/hub.js";

it("a Subscribe stream of an instance taken over while it reads its inbox gets nothing sent after the takeover", async () => {
  await using t = await startTestHub();
  const a = await t.register("alpha");
  const b = await t.register("beta");
  const send = (content: string) => t.rest("/v1/messages", { json: { target: b.id, content }, headers: a.headers });
  expect((await send("before takeover")).status).toBe(202);

  // The stream's store read of b's inbox: the takeover (a supervisor restarting b) and a message
  // to the new instance commit while it is under way.
  const store = t.hub.store.messages as { readInbox(id: string, after: number, limit: number): Promise<unknown[]> };
  const original = store.readInbox.bind(store);
  let armed = true;
  store.readInbox = async (id, after, limit) => {
    if (armed && id === b.id) {
      armed = false;
      const r = await t.rest("/v1/agents/register", { json: { name: "beta", project: "p", takeover: true } });
      expect(r.status).toBeLessThan(300);
      expect((await send("after takeover")).status).toBe(202);
    }
    return original(id, after, limit);
  };

  const transport = createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1", interceptors: [withHeaders(b.headers)] });
  const got: string[] = [];
  let end = "open";
  try {
    for await (const f of createClient(PeerService, transport).subscribe({ afterSeq: 0n })) {
      if (f.event.case === "message") got.push(f.event.value.content);
    }
    end = "ended";
  } catch (e) {
    end = e instanceof ConnectError ? Code[e.code] : String(e);
  }
  expect(end).toBe("Unauthenticated");
  // The old instance ended at the takeover: what was sent to its successor is not its to read.
  expect(got).not.toContain("after takeover");
});

/** A supervisor restarting `name`: a takeover of it, as a new instance registers. */
async function takeOver(t: TestHub, name: string): Promise<void> {
  const r = await t.rest("/v1/agents/register", { json: { name, project: "p", takeover: true } });
  expect(r.status).toBeLessThan(300);
  expect((await jsonOf(r)).takenOver).toBe(true);
}

/** Runs `before` once, inside the next call of the store's `method`, before the real call. */
function beforeNext(store: object, method: string, before: () => Promise<void>): void {
  const s = store as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const original = s[method]!.bind(store);
  let armed = true;
  s[method] = async (...args: unknown[]) => {
    if (armed) {
      armed = false;
      await before();
    }
    return original(...args);
  };
}

describe("a message call of an instance taken over while it was in flight is refused (401) and changes nothing", () => {
  it("a reply: the message stays queued and its sender gets no reply", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const m = (await jsonOf(await t.rest("/v1/messages", { json: { target: "beta", content: "q" }, headers: a.headers }))).message;
    beforeNext(t.hub.store.messages, "decideMessage", () => takeOver(t, "beta"));
    const r = await t.rest(`/v1/messages/${m.id}/reply`, { json: { content: "from the ended instance" }, headers: b.headers });
    const stored = (await jsonOf(await t.rest(`/v1/messages/${m.id}`, { headers: a.headers }))).message;
    expect({ status: r.status, code: (await jsonOf(r)).code, message: stored.status }).toEqual({ status: 401, code: "invalid_agent_identity", message: "queued" });
    expect(await t.sql(`SELECT count(*) AS n FROM inbox_events WHERE agent_id = '${a.id}'`)).toEqual([{ n: 0 }]);
  });

  it("an ack: the new instance's acked cursor does not move, the message stays queued", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const m = (await jsonOf(await t.rest("/v1/messages", { json: { target: "beta", content: "q" }, headers: a.headers }))).message;
    beforeNext(t.hub.store.messages, "decideMessage", () => takeOver(t, "beta"));
    const r = await t.rest(`/v1/messages/${m.id}/ack`, { method: "POST", headers: b.headers });
    const state = await t.hub.store.messages.inboxState(b.id);
    const stored = (await jsonOf(await t.rest(`/v1/messages/${m.id}`, { headers: a.headers }))).message;
    expect({ status: r.status, ackedCursor: state.ackedCursor, message: stored.status }).toEqual({ status: 401, ackedCursor: 0, message: "queued" });
  });

  it("a cancel: the message stays queued and its recipient is told nothing", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const m = (await jsonOf(await t.rest("/v1/messages", { json: { target: "beta", content: "q" }, headers: a.headers }))).message;
    beforeNext(t.hub.store.messages, "decideMessage", () => takeOver(t, "alpha"));
    const r = await t.rest(`/v1/messages/${m.id}`, { method: "DELETE", headers: a.headers });
    const stored = await t.hub.store.messages.getMessage(m.id);
    expect({ status: r.status, message: stored?.status, head: (await t.hub.store.messages.inboxState(b.id)).head }).toEqual({ status: 401, message: "queued", head: 1 });
  });

  it("a send: no message is stored", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    beforeNext(t.hub.store.messages, "decideSend", () => takeOver(t, "beta"));
    const r = await t.rest("/v1/messages", { json: { target: a.id, content: "from the ended instance" }, headers: b.headers });
    expect({ status: r.status, code: (await jsonOf(r)).code, messages: await t.hub.store.messages.countMessages() }).toEqual({
      status: 401,
      code: "invalid_agent_identity",
      messages: 0,
    });
  });
});

it("ReadInbox of an instance taken over while its call was in flight reads nothing sent to its successor (401)", async () => {
  await using t = await startTestHub();
  const a = await t.register("alpha");
  const b = await t.register("beta");
  beforeNext(t.hub.store.messages, "inboxState", async () => {
    await takeOver(t, "beta");
    expect((await t.rest("/v1/messages", { json: { target: b.id, content: "after takeover" }, headers: a.headers })).status).toBe(202);
  });
  const r = await t.rest("/v1/inbox?afterCursor=0", { headers: b.headers });
  const text = await r.text();
  expect(text).not.toContain("after takeover");
  expect({ status: r.status, code: JSON.parse(text).code }).toEqual({ status: 401, code: "invalid_agent_identity" });
});

it("a Subscribe stream sends nothing it read from the store once its key is gone, even before the presence change tells it", async () => {
  // On PostgreSQL, a message sent through another replica after a takeover may be announced to a
  // stream before the takeover's presence change: here the key changes in the store alone (no
  // presence change at all), between the stream's own check and its first read of the store.
  await using t = await startTestHub();
  const a = await t.register("alpha");
  const b = await t.register("beta");
  expect((await t.rest("/v1/messages", { json: { target: b.id, content: "for the next instance" }, headers: a.headers })).status).toBe(202);
  beforeNext(t.hub.store.messages, "inboxState", async () => {
    await t.sql(`UPDATE agents SET key_hash = 'rotated' WHERE id = '${b.id}' RETURNING id`);
  });
  const transport = createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1", interceptors: [withHeaders(b.headers)] });
  const got: string[] = [];
  let end = "open";
  try {
    for await (const f of createClient(PeerService, transport).subscribe({ afterSeq: 0n })) {
      if (f.event.case !== "message") continue;
      got.push(f.event.value.content);
      break;
    }
    end = "ended";
  } catch (e) {
    end = e instanceof ConnectError ? Code[e.code] : String(e);
  }
  expect({ end, got }).toEqual({ end: "Unauthenticated", got: [] });
});
