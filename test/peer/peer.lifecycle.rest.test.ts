import { describe, expect, it } from "vitest";
import { sweepChunk } from "../../src/domain.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { expectRestError, expectRestOk, iso } from "../fixtures/rest.js";
import { ack, cancel, count, current, getMessage, logged, pair, reply, send, sent } from "./peer.helpers.js";

// Ack, reply, cancel and get over the REST face, and TTL expiry: reference-hub.md §3.3.

const EXPIRED = "message expired before a reply was received";
const CANCELLED = "message cancelled by sender";

/** alpha sent beta one message with a 10 s TTL. */
async function oneMessage(t: TestHub) {
  const { a, b } = await pair(t);
  const m = await sent(t, a, { target: "beta", content: "secret payload", ttlMs: 10_000 });
  return { a, b, m };
}

describe("POST /v1/messages/{id}/ack", () => {
  it("moves queued to delivered with deliveredAt; a repeat ack answers it unchanged", async () => {
    await using t = await startTestHub();
    const { b, m } = await oneMessage(t);
    t.clock.advance(500);
    const first = await expectRestOk(await ack(t, b, m.id));
    expect(first).toEqual({ message: { ...m, status: "delivered", deliveredAt: iso(t.clock.now()) } });
    t.clock.advance(500);
    expect(await expectRestOk(await ack(t, b, m.id))).toEqual(first);
  });

  it("accepts an empty JSON body with a content type", async () => {
    await using t = await startTestHub();
    const { b, m } = await oneMessage(t);
    const res = await t.rest(`/v1/messages/${m.id}/ack`, { headers: b.headers, json: {} });
    expect((await expectRestOk(res)).message.status).toBe("delivered");
  });

  it("refuses the sender (403 message_forbidden) and an unknown id (404 message_not_found)", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    await expectRestError(await ack(t, a, m.id), 403, "message_forbidden");
    await expectRestError(await ack(t, b, "msg_00000000000000000000000000000000"), 404, "message_not_found");
    expect((await current(t, a, m.id)).status).toBe("queued");
  });

  it.each(["cancelled", "replied", "expired"])("refuses a %s message with 409 invalid_message_state", async (state) => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    if (state === "cancelled") await expectRestOk(await cancel(t, a, m.id));
    if (state === "replied") await expectRestOk(await reply(t, b, m.id, "ok"));
    if (state === "expired") t.clock.advance(10_000);
    await expectRestError(await ack(t, b, m.id), 409, "invalid_message_state", { message: `cannot acknowledge a ${state} message` });
  });
});

describe("POST /v1/messages/{id}/reply", () => {
  it("replies a queued message: status replied, reply {content, createdAt}, repliedAt", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    t.clock.advance(2_000);
    const body = await expectRestOk(await reply(t, b, m.id, "  the answer  "));
    const at = iso(t.clock.now());
    expect(body).toEqual({ message: { ...m, status: "replied", repliedAt: at, reply: { content: "the answer", createdAt: at } } });
    expect(await current(t, a, m.id)).toEqual(body.message);
    expect(count(t, "messagesReplied")).toBe(1);
  });

  it("replies a delivered message and keeps deliveredAt", async () => {
    await using t = await startTestHub();
    const { b, m } = await oneMessage(t);
    const delivered = (await expectRestOk(await ack(t, b, m.id))).message;
    const replied = (await expectRestOk(await reply(t, b, m.id, "ok"))).message;
    expect(replied).toMatchObject({ status: "replied", deliveredAt: delivered.deliveredAt });
  });

  it("refuses a second reply with 409 duplicate_reply, before checking the content", async () => {
    await using t = await startTestHub();
    const { b, m } = await oneMessage(t);
    await expectRestOk(await reply(t, b, m.id, "first"));
    await expectRestError(await reply(t, b, m.id, "second"), 409, "duplicate_reply");
    await expectRestError(await reply(t, b, m.id, ""), 409, "duplicate_reply");
    expect(count(t, "messagesReplied")).toBe(1);
  });

  it("refuses the sender (403) and an unknown id (404)", async () => {
    await using t = await startTestHub();
    const { a, m } = await oneMessage(t);
    await expectRestError(await reply(t, a, m.id, "me"), 403, "message_forbidden");
    await expectRestError(await reply(t, a, "msg_ffffffffffffffffffffffffffffffff", "x"), 404, "message_not_found");
  });

  it.each(["cancelled", "expired"])("refuses a %s message with 409 invalid_message_state", async (state) => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    if (state === "cancelled") await expectRestOk(await cancel(t, a, m.id));
    else t.clock.advance(10_001);
    await expectRestError(await reply(t, b, m.id, "late"), 409, "invalid_message_state");
    await expectRestError(await reply(t, b, m.id, ""), 409, "invalid_message_state");
  });

  it.each([
    ["empty", ""],
    ["blank", "  \n "],
    ["over 32000", "r".repeat(32_001)],
    ["not a string", 42],
  ])("refuses %s content on an open message with 400 protocol_error", async (_what, content) => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    await expectRestError(await reply(t, b, m.id, content), 400, "protocol_error");
    expect((await current(t, a, m.id)).status).toBe("queued");
  });

  it("accepts reply content of exactly 32000 characters", async () => {
    await using t = await startTestHub();
    const { b, m } = await oneMessage(t);
    const body = await expectRestOk(await reply(t, b, m.id, "r".repeat(32_000)));
    expect(body.message.reply.content).toHaveLength(32_000);
  });
});

describe("DELETE /v1/messages/{id} (cancel)", () => {
  it("cancels: status cancelled, cancelledAt, error; a repeat answers it unchanged and counts once", async () => {
    await using t = await startTestHub();
    const { a, m } = await oneMessage(t);
    t.clock.advance(1_000);
    const body = await expectRestOk(await cancel(t, a, m.id));
    expect(body).toEqual({ message: { ...m, status: "cancelled", cancelledAt: iso(t.clock.now()), error: CANCELLED } });
    t.clock.advance(1_000);
    expect(await expectRestOk(await cancel(t, a, m.id))).toEqual(body);
    expect(count(t, "messagesCancelled")).toBe(1);
    expect(logged(t, "message_cancelled")).toHaveLength(1);
  });

  it("cancels a delivered message", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    await expectRestOk(await ack(t, b, m.id));
    expect((await expectRestOk(await cancel(t, a, m.id))).message).toMatchObject({ status: "cancelled", deliveredAt: expect.any(String) });
  });

  it("refuses the recipient (403), an unknown id (404), and a replied or expired message (409)", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    await expectRestError(await cancel(t, b, m.id), 403, "message_forbidden");
    await expectRestError(await cancel(t, a, "msg_0123456789abcdef0123456789abcdef"), 404, "message_not_found");
    await expectRestOk(await reply(t, b, m.id, "done"));
    await expectRestError(await cancel(t, a, m.id), 409, "invalid_message_state");
    const m2 = await sent(t, a, { target: "beta", content: "x", ttlMs: 1_000 });
    t.clock.advance(1_000);
    await expectRestError(await cancel(t, a, m2.id), 409, "invalid_message_state");
    expect(count(t, "messagesCancelled")).toBe(0);
  });

  it("ignores a body", async () => {
    await using t = await startTestHub();
    const { a, m } = await oneMessage(t);
    const res = await t.rest(`/v1/messages/${m.id}`, { method: "DELETE", headers: { ...a.headers, "content-type": "text/plain" }, body: "junk" });
    expect((await expectRestOk(res)).message.status).toBe("cancelled");
  });
});

describe("GET /v1/messages/{id}", () => {
  it("shows the message to its sender and its recipient", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    expect(await expectRestOk(await getMessage(t, a, m.id))).toEqual({ message: m });
    expect(await expectRestOk(await getMessage(t, b, m.id))).toEqual({ message: m });
  });

  it("refuses a third agent of the project with 403; another project's agent gets 404, as for an unknown id", async () => {
    await using t = await startTestHub();
    const { m } = await oneMessage(t);
    const third = await t.register("gamma");
    const stranger = await t.register("delta", "q");
    await expectRestError(await getMessage(t, third, m.id), 403, "message_forbidden", { message: "message is not visible to this agent" });
    // @NOTE decision D44: another project's message does not exist for the caller; nothing confirms it does.
    for (const res of [await getMessage(t, stranger, m.id), await ack(t, stranger, m.id), await cancel(t, stranger, m.id)]) {
      await expectRestError(res, 404, "message_not_found");
    }
    await expectRestError(await getMessage(t, stranger, "msg_00000000000000000000000000000001"), 404, "message_not_found");
  });

  it("needs agent identity", async () => {
    await using t = await startTestHub();
    const { a, m } = await oneMessage(t);
    const res = await t.rest(`/v1/messages/${m.id}`, { headers: { "x-kxm-agent-id": a.id, "x-kxm-agent-key": "key_wrong" } });
    await expectRestError(res, 401, "invalid_agent_identity", { extras: ["operation", "nextAction"] });
  });
});

describe("expiry (§3.3)", () => {
  it("expires lazily on GET once expiresAt <= now, with the reference's error, counted and logged once", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    t.clock.advance(9_999);
    expect((await current(t, a, m.id)).status).toBe("queued");
    t.clock.advance(1);
    const expired = await current(t, a, m.id);
    expect(expired).toEqual({ ...m, status: "expired", error: EXPIRED });
    expect(await current(t, b, m.id)).toEqual(expired);
    expect(count(t, "messagesExpired")).toBe(1);
    expect(logged(t, "message_expired")).toHaveLength(1);
    expect(logged(t, "message_expired")[0].fields).toMatchObject({ messageId: m.id, status: "expired", from: a.id, to: b.id });
  });

  it("expires on the sweep without any read", async () => {
    await using t = await startTestHub();
    const { a, m } = await oneMessage(t);
    const delivered = await sent(t, a, { target: "beta", content: "other", ttlMs: 20_000 });
    t.clock.advance(10_000);
    await t.hub.sweepNow();
    expect(count(t, "messagesExpired")).toBe(1);
    t.clock.advance(10_000);
    await t.hub.sweepNow();
    expect(count(t, "messagesExpired")).toBe(2);
    expect((await current(t, a, m.id)).status).toBe("expired");
    expect((await current(t, a, delivered.id)).status).toBe("expired");
  });

  it("expires and purges more messages than one sweep decision holds (sweepChunk), every one of them", async () => {
    await using t = await startTestHub({ config: { messageRetentionMs: 1_000 } });
    const { a } = await pair(t);
    const n = sweepChunk + 3;
    for (let i = 0; i < n; i++) await sent(t, a, { target: "beta", content: `m${i}`, ttlMs: 10_000 });
    t.clock.advance(10_000);
    await t.hub.sweepNow();
    expect(count(t, "messagesExpired")).toBe(n);
    expect(count(t, "messagesPurged")).toBe(0);
    t.clock.advance(1_000);
    await t.hub.sweepNow();
    expect(count(t, "messagesPurged")).toBe(n);
  });

  it("expires a delivered message too, and never a replied or cancelled one", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    await expectRestOk(await ack(t, b, m.id));
    const r = await sent(t, a, { target: "beta", content: "r", ttlMs: 10_000 });
    await expectRestOk(await reply(t, b, r.id, "ok"));
    const c = await sent(t, a, { target: "beta", content: "c", ttlMs: 10_000 });
    await expectRestOk(await cancel(t, a, c.id));
    t.clock.advance(10_000);
    await t.hub.sweepNow();
    expect((await current(t, a, m.id)).status).toBe("expired");
    expect((await current(t, a, r.id)).status).toBe("replied");
    expect((await current(t, a, c.id)).status).toBe("cancelled");
    expect(count(t, "messagesExpired")).toBe(1);
  });

  it("uses the configured default TTL (messageTtlMs)", async () => {
    await using t = await startTestHub({ config: { messageTtlMs: 5_000 } });
    const { a } = await pair(t);
    const m = await sent(t, a, { target: "beta", content: "x", idempotencyKey: "k" });
    expect(Date.parse(m.expiresAt) - Date.parse(m.createdAt)).toBe(5_000);
    // The effective TTL is what idempotency compares: an explicit 5000 is the same request.
    const again = await expectRestOk(await send(t, a, { target: "beta", content: "x", idempotencyKey: "k", ttlMs: 5_000 }), 200);
    expect(again.message.id).toBe(m.id);
  });
});

describe("bodies and paths (§1.4)", () => {
  it("refuses bad JSON bodies on send and reply with 400 invalid_json", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    const raw = (path: string, as: typeof a, body: string) =>
      t.rest(path, { method: "POST", headers: { ...as.headers, "content-type": "application/json" }, body });
    for (const body of ["{", "[]", "null", "42", '"x"']) {
      await expectRestError(await raw("/v1/messages", a, body), 400, "invalid_json");
      await expectRestError(await raw(`/v1/messages/${m.id}/reply`, b, body), 400, "invalid_json");
    }
  });

  it("refuses a non-JSON content type with 415 and an oversized body with 413", async () => {
    await using t = await startTestHub();
    const { a, b, m } = await oneMessage(t);
    const body = JSON.stringify({ target: "beta", content: "x" });
    const plain = { method: "POST", headers: { ...a.headers, "content-type": "text/plain" }, body };
    await expectRestError(await t.rest("/v1/messages", plain), 415, "unsupported_media_type");
    const ackPlain = { method: "POST", headers: { ...b.headers, "content-type": "text/plain" }, body: "{}" };
    await expectRestError(await t.rest(`/v1/messages/${m.id}/ack`, ackPlain), 415, "unsupported_media_type");
    const big = await send(t, a, { target: "beta", content: "x", pad: "p".repeat(262_145) });
    await expectRestError(big, 413, "payload_too_large");
    expect(count(t, "messagesSent")).toBe(1);
  });

  it("ignores unknown body fields (workflowRunId cannot be set)", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const m = await sent(t, a, { target: "beta", content: "x", workflowRunId: "run_1", extra: { deep: true } });
    expect(m).not.toHaveProperty("workflowRunId");
  });

  it("answers a malformed percent-escape in the id with 400, not 500 (decision D41)", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await expectRestError(await t.rest("/v1/messages/%E0%A4%A", { headers: a.headers }), 400, "protocol_error");
  });
});
