import { describe, expect, it } from "vitest";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectRestError, expectRestOk, type Json } from "../fixtures/rest.js";
import { ack, cancel, count, current, getMessage, list, logged, pair, reply, send, sent } from "./peer.helpers.js";

// ListMessages (kxm-hub's addition), retention (reference-hub.md §1.9), and the message
// metrics and log events (§1.7, §1.10).

/** Reads every page of a list, asserting 200 and the page size. */
async function allPages(t: TestHub, as: AgentCreds, query: string, pageSize: number): Promise<{ pages: Json[][]; ids: string[] }> {
  const pages: Json[][] = [];
  let token = "";
  do {
    const q = `${query}&pageSize=${pageSize}${token ? `&pageToken=${encodeURIComponent(token)}` : ""}`;
    const body = await expectRestOk(await list(t, as, q));
    expect(body.messages.length).toBeLessThanOrEqual(pageSize);
    pages.push(body.messages);
    token = body.nextPageToken;
    expect(typeof token).toBe("string");
  } while (token !== "");
  return { pages, ids: pages.flat().map((m) => m.id as string) };
}

describe("GET /v1/messages (ListMessages)", () => {
  it("lists the inbox by default and the outbox on request, newest first, with nextPageToken ''", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const m1 = await sent(t, a, { target: "beta", content: "1" });
    t.clock.advance(10);
    const m2 = await sent(t, a, { target: "beta", content: "2" });
    t.clock.advance(10);
    const back = await sent(t, b, { target: "alpha", content: "3" });
    expect(await expectRestOk(await list(t, b))).toEqual({ messages: [m2, m1], nextPageToken: "" });
    expect((await expectRestOk(await list(t, b, "?box=inbox"))).messages).toEqual([m2, m1]);
    expect((await expectRestOk(await list(t, a, "?box=outbox"))).messages).toEqual([m2, m1]);
    expect((await expectRestOk(await list(t, a, "?box=inbox"))).messages).toEqual([back]);
    expect((await expectRestOk(await list(t, b, "?box=outbox"))).messages).toEqual([back]);
    const third = await t.register("gamma");
    expect(await expectRestOk(await list(t, third, "?box=outbox"))).toEqual({ messages: [], nextPageToken: "" });
  });

  it("filters by one or several statuses (expiry applied first)", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const ids: Record<string, string> = {};
    for (const name of ["queued", "delivered", "replied", "cancelled", "expired"]) {
      ids[name] = (await sent(t, a, { target: "beta", content: name, ttlMs: name === "expired" ? 1_000 : 60_000 })).id;
      t.clock.advance(1);
    }
    await expectRestOk(await ack(t, b, ids.delivered));
    await expectRestOk(await reply(t, b, ids.replied, "ok"));
    await expectRestOk(await cancel(t, a, ids.cancelled));
    t.clock.advance(1_000);
    const statuses = async (q: string) => (await expectRestOk(await list(t, b, q))).messages.map((m: Json) => m.status);
    expect(await statuses("?status=queued")).toEqual(["queued"]);
    expect(await statuses("?status=queued&status=delivered")).toEqual(["delivered", "queued"]);
    expect(await statuses("?status=expired")).toEqual(["expired"]);
    expect(await statuses("?box=inbox&status=replied&status=cancelled")).toEqual(["cancelled", "replied"]);
    expect(await statuses("")).toEqual(["expired", "cancelled", "replied", "delivered", "queued"]);
  });

  it("pages with pageSize and nextPageToken, newest first, each message once", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const sentIds: string[] = [];
    for (let i = 0; i < 5; i++) {
      sentIds.push((await sent(t, a, { target: "beta", content: `m${i}` })).id);
      t.clock.advance(5);
    }
    const { pages, ids } = await allPages(t, b, "?box=inbox", 2);
    expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
    expect(ids).toEqual([...sentIds].reverse());
  });

  it("pages through messages sent in the same millisecond without loss or repeat", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const sentIds: string[] = [];
    for (let i = 0; i < 5; i++) sentIds.push((await sent(t, a, { target: "beta", content: `m${i}` })).id);
    const { ids } = await allPages(t, b, "?box=inbox", 2);
    expect(ids).toEqual([...sentIds].sort().reverse());
  });

  it("uses 50 by default and allows 200", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    for (let i = 0; i < 51; i++) await sent(t, a, { target: "beta", content: `m${i}` });
    const first = await expectRestOk(await list(t, b));
    expect(first.messages).toHaveLength(50);
    expect(first.nextPageToken).not.toBe("");
    expect((await expectRestOk(await list(t, b, "?pageSize=200"))).messages).toHaveLength(51);
  });

  it.each([
    ["a garbage pageToken", "?pageToken=garbage"],
    ["a pageToken without a position", `?pageToken=${Buffer.from("abc:").toString("base64url")}`],
    ["a pageToken whose time is past 2^53 (PostgreSQL answered 500)", `?pageToken=${Buffer.from("9223372036854775807:msg_x").toString("base64url")}`],
    ["pageSize 201", "?pageSize=201"],
    ["pageSize -1", "?pageSize=-1"],
    ["pageSize not an integer", "?pageSize=ten"],
    ["an unknown box", "?box=trash"],
    ["an unknown status", "?status=lost"],
  ])("refuses %s with 400 protocol_error", async (_what, q) => {
    await using t = await startTestHub();
    const { b } = await pair(t);
    await expectRestError(await list(t, b, q), 400, "protocol_error");
  });
});

describe("retention (§1.9)", () => {
  it("purges a replied message retention after repliedAt: GET 404, counted, logged, key forgotten", async () => {
    await using t = await startTestHub({ config: { messageRetentionMs: 5_000 } });
    const { a, b } = await pair(t);
    const m = await sent(t, a, { target: "beta", content: "first", idempotencyKey: "k" });
    t.clock.advance(1_000);
    await expectRestOk(await reply(t, b, m.id, "ok"));
    t.clock.advance(4_999);
    await t.hub.sweepNow();
    expect((await current(t, a, m.id)).status).toBe("replied");
    await expectRestError(await send(t, a, { target: "beta", content: "different", idempotencyKey: "k" }), 409, "idempotency_conflict");
    t.clock.advance(1);
    await t.hub.sweepNow();
    await expectRestError(await getMessage(t, a, m.id), 404, "message_not_found");
    await expectRestError(await getMessage(t, b, m.id), 404, "message_not_found");
    expect(count(t, "messagesPurged")).toBe(1);
    expect(logged(t, "message_purged")).toHaveLength(1);
    expect(logged(t, "message_purged")[0].fields).toMatchObject({ messageId: m.id, status: "replied" });
    const fresh = await sent(t, a, { target: "beta", content: "different", idempotencyKey: "k" });
    expect(fresh.id).not.toBe(m.id);
  });

  it("measures a cancelled message from cancelledAt and an expired one from expiresAt", async () => {
    await using t = await startTestHub({ config: { messageRetentionMs: 5_000 } });
    const { a } = await pair(t);
    const c = await sent(t, a, { target: "beta", content: "c" });
    const e = await sent(t, a, { target: "beta", content: "e", ttlMs: 3_000 });
    t.clock.advance(1_000);
    await expectRestOk(await cancel(t, a, c.id)); // ends at +1000
    t.clock.advance(5_999); // now +6999: c ended 5999 ago, e (ended +3000) 3999 ago
    await t.hub.sweepNow();
    await expectRestError(await getMessage(t, a, c.id), 404, "message_not_found");
    expect((await current(t, a, e.id)).status).toBe("expired");
    t.clock.advance(1_001); // +8000
    await t.hub.sweepNow();
    await expectRestError(await getMessage(t, a, e.id), 404, "message_not_found");
    expect(count(t, "messagesPurged")).toBe(2);
  });

  it("never purges an open message, however old", async () => {
    await using t = await startTestHub({ config: { messageRetentionMs: 5_000 } });
    const { a, b } = await pair(t);
    const m = await sent(t, a, { target: "beta", content: "x", ttlMs: 604_800_000 });
    const d = await sent(t, a, { target: "beta", content: "y", ttlMs: 604_800_000 });
    await expectRestOk(await ack(t, b, d.id));
    t.clock.advance(604_799_999);
    await t.hub.sweepNow();
    expect((await current(t, a, m.id)).status).toBe("queued");
    expect((await current(t, a, d.id)).status).toBe("delivered");
    expect(count(t, "messagesPurged")).toBe(0);
  });

  it("purges on ack as well as on the sweep", async () => {
    await using t = await startTestHub({ config: { messageRetentionMs: 5_000 } });
    const { a, b } = await pair(t);
    const old = await sent(t, a, { target: "beta", content: "old" });
    await expectRestOk(await cancel(t, a, old.id));
    const open = await sent(t, a, { target: "beta", content: "open" });
    t.clock.advance(5_000);
    await expectRestOk(await ack(t, b, open.id));
    expect(count(t, "messagesPurged")).toBe(1);
    await expectRestError(await getMessage(t, a, old.id), 404, "message_not_found");
  });
});

describe("metrics and log events", () => {
  it("counts each lifecycle step once and logs it without any message content", async () => {
    await using t = await startTestHub({ config: { messageRetentionMs: 5_000 } });
    const { a, b } = await pair(t);
    const m1 = await sent(t, a, { target: "beta", content: "TOP-SECRET-CONTENT", idempotencyKey: "k", hops: 2 });
    await expectRestOk(await send(t, a, { target: "beta", content: "TOP-SECRET-CONTENT", idempotencyKey: "k", hops: 2 }), 200);
    await expectRestOk(await reply(t, b, m1.id, "TOP-SECRET-REPLY"));
    const m2 = await sent(t, a, { target: "beta", content: "TOP-SECRET-2" });
    await expectRestOk(await cancel(t, a, m2.id));
    await expectRestOk(await cancel(t, a, m2.id));
    await sent(t, a, { target: "beta", content: "TOP-SECRET-3", ttlMs: 1_000 });
    t.clock.advance(1_000);
    await t.hub.sweepNow();
    t.clock.advance(5_000);
    await t.hub.sweepNow();

    const counters = ["messagesSent", "messagesReplied", "messagesCancelled", "messagesExpired", "messagesPurged"] as const;
    expect(counters.map((c) => count(t, c))).toEqual([3, 1, 1, 1, 3]);
    const names = ["message_sent", "message_replied", "message_cancelled", "message_expired", "message_purged"];
    expect(names.map((n) => logged(t, n).length)).toEqual([3, 1, 1, 1, 3]);
    expect(logged(t, "message_sent")[0].fields).toMatchObject({
      messageId: m1.id,
      project: "p",
      status: "queued",
      delivery: "followUp",
      from: a.id,
      fromName: "alpha",
      to: b.id,
      toName: "beta",
      hops: 2,
    });
    expect(JSON.stringify(t.events)).not.toContain("TOP-SECRET");

    const metrics = await (await t.rest("/metrics")).text();
    expect(metrics).toMatch(/^kxm_messages_sent_total 3$/m);
    expect(metrics).toMatch(/^kxm_messages_replied_total 1$/m);
    expect(metrics).toMatch(/^kxm_messages_cancelled_total 1$/m);
    expect(metrics).toMatch(/^kxm_messages_expired_total 1$/m);
    expect(metrics).toMatch(/^kxm_messages_purged_total 3$/m);
    expect(metrics).toMatch(/^kxm_messages 0$/m);
  });
});
