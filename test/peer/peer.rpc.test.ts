import { describe, expect, it } from "vitest";
import type { Client } from "@connectrpc/connect";
import { Delivery, MessageStatus, PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { clientFor, protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { ms, refused, type RpcRefusal } from "../fixtures/rpc.js";
import { MESSAGE_ID } from "./peer.helpers.js";

// PeerService through the generated client over every wire: the Connect code and ErrorInfo
// of each refusal (errors.md), and the same records the REST face answers.

type Peer = Client<typeof PeerService>;

async function setup(t: TestHub, make: (typeof protocols)[number]["make"]) {
  const client = (as: AgentCreds) => clientFor(PeerService, make(t.baseUrl, [withHeaders(as.headers)]));
  const a = await t.register("alpha");
  const b = await t.register("beta");
  return { a, b, A: client(a), B: client(b), client };
}

function expectRefusal(r: RpcRefusal, code: string, reason: string, metadata: Record<string, string> = {}) {
  expect({ code: r.code, reason: r.reason, domain: r.domain }).toEqual({ code, reason, domain: "kxm-hub" });
  expect(r.metadata).toMatchObject(metadata);
}

const sendOk = async (c: Peer, req: Parameters<Peer["sendMessage"]>[0]) => {
  const r = await c.sendMessage(req);
  expect(r.idempotent).toBe(false);
  return r.message!;
};

describe.each(protocols)("PeerService over $name", (protocol) => {
  it("sends with defaults, replays an identical send, refuses a conflicting one", async () => {
    await using t = await startTestHub();
    const { a, b, A } = await setup(t, protocol.make);
    const now = t.clock.now();
    const m = await sendOk(A, { target: "BETA", content: "  hello  ", idempotencyKey: "k" });
    expect(m).toMatchObject({
      project: "p",
      fromAgentId: a.id,
      fromName: "alpha",
      toAgentId: b.id,
      toName: "beta",
      content: "hello",
      delivery: Delivery.FOLLOW_UP,
      hops: 0,
      maxHops: 5,
      seq: 1n,
      idempotencyKey: "k",
      status: MessageStatus.QUEUED,
    });
    expect(m.id).toMatch(MESSAGE_ID);
    expect([ms(m.createdAt), ms(m.expiresAt)]).toEqual([now, now + 86_400_000]);
    expect(m.correlationId).toBeUndefined();
    expect(m.deliveredAt).toBeUndefined();

    const again = await A.sendMessage({ target: b.id, content: "hello", idempotencyKey: "k", allowOffline: true });
    expect(again.idempotent).toBe(true);
    expect(again.message).toEqual(m);
    expect(t.counters.get("messagesSent")).toBe(1);

    const conflict = await refused(A.sendMessage({ target: "beta", content: "other", idempotencyKey: "k" }));
    expectRefusal(conflict, "already_exists", "IDEMPOTENCY_CONFLICT", { idempotencyKey: "k", messageId: m.id });
  });

  it("acks, replies and refuses a second reply", async () => {
    await using t = await startTestHub();
    const { A, B } = await setup(t, protocol.make);
    const m = await sendOk(A, { target: "beta", content: "q", delivery: Delivery.STEER });
    t.clock.advance(100);
    const acked = (await B.ackMessage({ messageId: m.id })).message!;
    expect(acked.status).toBe(MessageStatus.DELIVERED);
    expect(ms(acked.deliveredAt)).toBe(t.clock.now());
    expect((await B.ackMessage({ messageId: m.id })).message).toEqual(acked);

    expectRefusal(await refused(B.replyMessage({ messageId: m.id, content: " " })), "invalid_argument", "PROTOCOL_ERROR");
    t.clock.advance(100);
    const replied = (await B.replyMessage({ messageId: m.id, content: " a " })).message!;
    expect(replied).toMatchObject({ status: MessageStatus.REPLIED, delivery: Delivery.STEER, reply: { content: "a" } });
    expect(ms(replied.repliedAt)).toBe(t.clock.now());
    expect(ms(replied.reply?.createdAt)).toBe(t.clock.now());
    expect((await A.getMessage({ messageId: m.id })).message).toEqual(replied);

    expectRefusal(await refused(B.replyMessage({ messageId: m.id, content: "b" })), "already_exists", "DUPLICATE_REPLY", {
      messageId: m.id,
    });
    expectRefusal(await refused(B.ackMessage({ messageId: m.id })), "failed_precondition", "INVALID_MESSAGE_STATE", {
      status: "replied",
    });
    expectRefusal(await refused(A.cancelMessage({ messageId: m.id })), "failed_precondition", "INVALID_MESSAGE_STATE");
  });

  it("cancels once, answers a repeat cancel unchanged, refuses the recipient", async () => {
    await using t = await startTestHub();
    const { A, B } = await setup(t, protocol.make);
    const m = await sendOk(A, { target: "beta", content: "q" });
    expectRefusal(await refused(B.cancelMessage({ messageId: m.id })), "permission_denied", "MESSAGE_FORBIDDEN", { messageId: m.id });
    const cancelled = (await A.cancelMessage({ messageId: m.id })).message!;
    expect(cancelled).toMatchObject({ status: MessageStatus.CANCELLED, error: "message cancelled by sender" });
    expect(ms(cancelled.cancelledAt)).toBe(t.clock.now());
    t.clock.advance(10);
    expect((await A.cancelMessage({ messageId: m.id })).message).toEqual(cancelled);
    expect(t.counters.get("messagesCancelled")).toBe(1);
    expectRefusal(await refused(B.replyMessage({ messageId: m.id, content: "x" })), "failed_precondition", "INVALID_MESSAGE_STATE");
    expectRefusal(await refused(A.ackMessage({ messageId: m.id })), "permission_denied", "MESSAGE_FORBIDDEN");
  });

  it("hides a message from third agents and other projects; an unknown id is not found", async () => {
    await using t = await startTestHub();
    const { A, client } = await setup(t, protocol.make);
    const m = await sendOk(A, { target: "beta", content: "q" });
    const C = client(await t.register("gamma"));
    const Q = client(await t.register("delta", "q"));
    expectRefusal(await refused(C.getMessage({ messageId: m.id })), "permission_denied", "MESSAGE_FORBIDDEN", { messageId: m.id });
    // Another project's message is not found, as an unknown id would be.
    const calls = [
      () => Q.getMessage({ messageId: m.id }),
      () => Q.ackMessage({ messageId: m.id }),
      () => Q.replyMessage({ messageId: m.id, content: "x" }),
    ];
    for (const call of calls) expectRefusal(await refused(call()), "not_found", "MESSAGE_NOT_FOUND", { messageId: m.id });
    const missing = "msg_00000000000000000000000000000000";
    expectRefusal(await refused(A.getMessage({ messageId: missing })), "not_found", "MESSAGE_NOT_FOUND", { messageId: missing });
    expectRefusal(await refused(Q.ackMessage({ messageId: missing })), "not_found", "MESSAGE_NOT_FOUND");
    // An id longer than any the hub issues is refused as such, on every face: a not-found that
    // echoed a 20,000-character id did not fit in a gRPC answer's trailers (a transport error).
    const long = "x".repeat(20_000);
    const tooLong = [
      () => A.getMessage({ messageId: long }),
      () => A.ackMessage({ messageId: long }),
      () => A.replyMessage({ messageId: long, content: "x" }),
      () => A.cancelMessage({ messageId: long }),
    ];
    for (const call of tooLong) expectRefusal(await refused(call()), "invalid_argument", "PROTOCOL_ERROR", { field: "id" });
  });

  it("refuses self, unknown and cross-project targets, and hop limits", async () => {
    await using t = await startTestHub();
    const { a, A } = await setup(t, protocol.make);
    const other = await t.register("gamma", "q");
    expectRefusal(await refused(A.sendMessage({ target: a.id, content: "x" })), "invalid_argument", "SELF_TARGET");
    expectRefusal(await refused(A.sendMessage({ target: "ghost", content: "x", allowOffline: true })), "not_found", "TARGET_NOT_FOUND", {
      target: "ghost",
    });
    expectRefusal(await refused(A.sendMessage({ target: other.id, content: "x" })), "not_found", "TARGET_NOT_FOUND");
    const hop = await refused(A.sendMessage({ target: "beta", content: "x", hops: 3, maxHops: 3 }));
    expectRefusal(hop, "failed_precondition", "HOP_LIMIT_REACHED", { hops: "3", maxHops: "3" });
    expect(t.counters.get("messagesSent") ?? 0).toBe(0);
  });

  it.each([
    ["empty content", { content: "" }],
    ["hops -1", { hops: -1 }],
    ["maxHops 0", { maxHops: 0 }],
    ["ttlMs 999", { ttlMs: 999 }],
    ["an unknown delivery value", { delivery: 9 as Delivery }],
  ])("refuses %s with invalid_argument PROTOCOL_ERROR", async (_what, change) => {
    await using t = await startTestHub();
    const { A } = await setup(t, protocol.make);
    const r = await refused(A.sendMessage({ target: "beta", content: "x", ...change }));
    expectRefusal(r, "invalid_argument", "PROTOCOL_ERROR");
  });

  it("lists the inbox newest first, filtered by state", async () => {
    await using t = await startTestHub();
    const { A, B } = await setup(t, protocol.make);
    const m1 = await sendOk(A, { target: "beta", content: "1" });
    t.clock.advance(1);
    const m2 = await sendOk(A, { target: "beta", content: "2" });
    await B.ackMessage({ messageId: m1.id });
    const all = await B.listMessages({});
    expect(all.messages.map((m) => m.id)).toEqual([m2.id, m1.id]);
    expect(all.nextPageToken).toBe("");
    const delivered = await B.listMessages({ status: [MessageStatus.DELIVERED] });
    expect(delivered.messages.map((m) => m.id)).toEqual([m1.id]);
    expectRefusal(await refused(B.listMessages({ pageToken: "nope" })), "invalid_argument", "PROTOCOL_ERROR");
    expectRefusal(await refused(B.listMessages({ pageSize: 201 })), "invalid_argument", "PROTOCOL_ERROR");
    // A state the schema does not know filters nothing in: refused like REST's unknown name.
    expectRefusal(await refused(B.listMessages({ status: [99 as MessageStatus] })), "invalid_argument", "PROTOCOL_ERROR");
  });
});
