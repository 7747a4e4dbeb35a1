import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { expectRestError, expectRestOk, iso, ms } from "../fixtures/rest.js";
import { ack, cancel, count, DAY_MS, logged, MESSAGE_ID, pair, reply, send, sent, unregister } from "./peer.helpers.js";

// POST /v1/messages over the REST face: reference-hub.md §3.2 (fields, validation, targets)
// and §3.4 (idempotency). Lifecycle routes: peer.lifecycle.rest.test.ts; lists: peer.list.rest.test.ts.

describe("POST /v1/messages: success", () => {
  it("answers 202 {message, idempotent:false} with every default, optional fields omitted", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const now = t.clock.now();
    const body = await expectRestOk(await send(t, a, { target: "beta", content: "hello" }), 202);
    expect(body).toEqual({
      message: {
        id: expect.stringMatching(MESSAGE_ID),
        project: "p",
        from: a.id,
        fromName: "alpha",
        to: b.id,
        toName: "beta",
        content: "hello",
        delivery: "followUp",
        hops: 0,
        maxHops: 5,
        seq: 1,
        createdAt: iso(now),
        expiresAt: iso(now + DAY_MS),
        status: "queued",
      },
      idempotent: false,
    });
    // D83: the id's first 48 bits are the send's time on the hub's clock.
    expect((body as { message: { id: string } }).message.id.slice(4, 16)).toBe(now.toString(16).padStart(12, "0"));
    expect(count(t, "messagesSent")).toBe(1);
  });

  it("stores every optional field, trimmed, and echoes them", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const m = await sent(t, a, {
      target: "  beta  ",
      content: "  hi there \n",
      delivery: "steer",
      correlationId: " corr-1 ",
      replyTo: " msg_prev ",
      hops: 2,
      maxHops: 3,
      ttlMs: 60_000,
      idempotencyKey: " key-1 ",
    });
    expect(m).toMatchObject({
      content: "hi there",
      delivery: "steer",
      correlationId: "corr-1",
      replyTo: "msg_prev",
      hops: 2,
      maxHops: 3,
      idempotencyKey: "key-1",
    });
    expect(ms(m.expiresAt) - ms(m.createdAt)).toBe(60_000);
  });

  it.each(["followUp", "steer", "nextTurn"])("accepts delivery %s", async (delivery) => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    expect((await sent(t, a, { target: "beta", content: "x", delivery })).delivery).toBe(delivery);
  });

  it("treats null and empty optional strings as absent", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const m = await sent(t, a, { target: "beta", content: "x", correlationId: "", replyTo: null, idempotencyKey: "  ", allowOffline: null });
    expect(m).not.toHaveProperty("correlationId");
    expect(m).not.toHaveProperty("replyTo");
    expect(m).not.toHaveProperty("idempotencyKey");
  });

  it("numbers seq by the recipient's stream: other events to that agent take numbers too", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const m1 = await sent(t, a, { target: "beta", content: "one" }); // B#1
    const toA = await sent(t, b, { target: "alpha", content: "back" }); // A#1
    expect([m1.seq, toA.seq]).toEqual([1, 1]);
    await expectRestOk(await cancel(t, a, m1.id)); // cancelled event: B#2
    const m2 = await sent(t, a, { target: "beta", content: "two" }); // B#3
    expect(m2.seq).toBe(3);
    await expectRestOk(await reply(t, a, toA.id, "ok")); // reply event to B: B#4
    expect((await sent(t, a, { target: "beta", content: "three" })).seq).toBe(5);
  });
});

describe("POST /v1/messages: validation (400 protocol_error)", () => {
  const cases: [string, Record<string, unknown>][] = [
    ["target missing", { content: "x" }],
    ["target blank", { target: "   ", content: "x" }],
    ["target over 80", { target: "b".repeat(81), content: "x" }],
    ["target not a string", { target: 5, content: "x" }],
    ["content missing", { target: "beta" }],
    ["content only spaces", { target: "beta", content: " \n\t " }],
    ["content over 32000", { target: "beta", content: "c".repeat(32_001) }],
    ["content not a string", { target: "beta", content: ["x"] }],
    ["delivery unknown", { target: "beta", content: "x", delivery: "later" }],
    ["delivery in proto spelling", { target: "beta", content: "x", delivery: "DELIVERY_STEER" }],
    ["correlationId over 128", { target: "beta", content: "x", correlationId: "c".repeat(129) }],
    ["replyTo over 80", { target: "beta", content: "x", replyTo: "r".repeat(81) }],
    ["hops -1", { target: "beta", content: "x", hops: -1 }],
    ["hops 101", { target: "beta", content: "x", hops: 101, maxHops: 20 }],
    ["hops 1.5", { target: "beta", content: "x", hops: 1.5 }],
    ['hops "1"', { target: "beta", content: "x", hops: "1" }],
    ["maxHops 0", { target: "beta", content: "x", maxHops: 0 }],
    ["maxHops 21", { target: "beta", content: "x", maxHops: 21 }],
    ["ttlMs 999", { target: "beta", content: "x", ttlMs: 999 }],
    ["ttlMs 604800001", { target: "beta", content: "x", ttlMs: 604_800_001 }],
    ["ttlMs beyond int32", { target: "beta", content: "x", ttlMs: 2 ** 31 }],
    ['allowOffline "true"', { target: "beta", content: "x", allowOffline: "true" }],
    ["allowOffline 1", { target: "beta", content: "x", allowOffline: 1 }],
    ["idempotencyKey over 128", { target: "beta", content: "x", idempotencyKey: "k".repeat(129) }],
    ["content with a NUL", { target: "beta", content: "a\u0000b" }],
    ["correlationId with a NUL", { target: "beta", content: "x", correlationId: "c\u0000" }],
    ["idempotencyKey with a NUL", { target: "beta", content: "x", idempotencyKey: "\u0000k" }],
  ];
  it.each(cases)("%s", async (_what, json) => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await expectRestError(await send(t, a, json), 400, "protocol_error");
    expect(count(t, "messagesSent")).toBe(0);
  });

  it("names the bad field in the message the reference's way", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const msgOf = async (json: unknown) => (await expectRestError(await send(t, a, json), 400, "protocol_error")).error;
    expect(await msgOf({ target: "beta", content: " " })).toBe("content cannot be empty");
    expect(await msgOf({ target: "beta", content: "c".repeat(32_001) })).toBe("content exceeds 32000 characters");
    expect(await msgOf({ target: "beta", content: "x", maxHops: 21 })).toBe("maxHops must be an integer between 1 and 20");
    expect(await msgOf({ target: "beta", content: "x", allowOffline: "yes" })).toBe("allowOffline must be a boolean");
    expect(await msgOf({ target: "beta", content: "a\u0000b" })).toBe("content must not contain a NUL character (U+0000)");
  });

  it.each([
    ["target of 80", { target: "b".repeat(80), allowOffline: false }, 404],
    ["content of 32000 after trimming", { content: ` ${"c".repeat(32_000)} ` }, 202],
    ["correlationId of 128", { correlationId: "c".repeat(128) }, 202],
    ["replyTo of 80", { replyTo: "r".repeat(80) }, 202],
    ["hops 19 under maxHops 20", { hops: 19, maxHops: 20 }, 202],
    ["maxHops 1", { maxHops: 1 }, 202],
    ["ttlMs 1000", { ttlMs: 1_000 }, 202],
    ["ttlMs 604800000", { ttlMs: 604_800_000 }, 202],
    ["ttlMs 5.0 style integer", { ttlMs: 2_000.0 }, 202],
    ["idempotencyKey of 128", { idempotencyKey: "k".repeat(128) }, 202],
  ] as const)("accepts the bound: %s", async (_what, extra, status) => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const res = await send(t, a, { target: "beta", content: "x", ...extra });
    if (status === 404) await expectRestError(res, 404, "target_not_found");
    else await expectRestOk(res, status);
  });

  it.each([
    [1, 1],
    [5, 5],
    [6, 5],
    [20, 20],
    [100, 20],
  ])("hops %i with maxHops %i is 400 hop_limit_reached", async (hops, maxHops) => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await expectRestError(await send(t, a, { target: "beta", content: "x", hops, maxHops }), 400, "hop_limit_reached", {
      message: `hop limit reached (${hops}/${maxHops})`,
    });
  });

  it("checks hops before the target: an unknown target with hops >= maxHops is hop_limit_reached", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await expectRestError(await send(t, a, { target: "nobody", content: "x", hops: 5 }), 400, "hop_limit_reached");
  });

  it("validates before the target: bad ttlMs to an unknown target is protocol_error", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await expectRestError(await send(t, a, { target: "nobody", content: "x", ttlMs: 10 }), 400, "protocol_error");
  });
});

describe("POST /v1/messages: targets", () => {
  it("resolves by id and by case-insensitive name", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    expect((await sent(t, a, { target: b.id, content: "x" })).to).toBe(b.id);
    expect((await sent(t, a, { target: "BeTa", content: "x" })).to).toBe(b.id);
  });

  it("refuses an offline target with 404 target_not_found unless allowOffline", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    await unregister(t, b);
    await expectRestError(await send(t, a, { target: "beta", content: "x" }), 404, "target_not_found", {
      message: "online target not found: beta",
    });
    await expectRestError(await send(t, a, { target: b.id, content: "x", allowOffline: false }), 404, "target_not_found");
    const m = await sent(t, a, { target: "beta", content: "later", allowOffline: true });
    expect(m).toMatchObject({ to: b.id, toName: "beta", status: "queued", seq: 1 });
    expect((await sent(t, a, { target: b.id, content: "later 2", allowOffline: true })).seq).toBe(2);
  });

  it("delivers a message queued for an offline agent when it reconnects and subscribes", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    await unregister(t, b);
    const m = await sent(t, a, { target: "beta", content: "while you were out", allowOffline: true });
    const back = await t.register("beta");
    expect(back.id).toBe(b.id);
    const client = createClient(PeerService, protocols[0].make(t.baseUrl, [withHeaders(back.headers)]));
    const ac = new AbortController();
    const frames = client.subscribe({}, { signal: ac.signal })[Symbol.asyncIterator]();
    try {
      expect((await frames.next()).value.event.case).toBe("ready");
      const first = (await frames.next()).value;
      expect(first.event.case).toBe("message");
      expect(first.event.value).toMatchObject({ id: m.id, content: "while you were out" });
    } finally {
      ac.abort();
    }
    const acked = await expectRestOk(await ack(t, back, m.id));
    expect(acked.message.status).toBe("delivered");
  });

  it("keeps an unknown name 404 even with allowOffline", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await expectRestError(await send(t, a, { target: "ghost", content: "x", allowOffline: true }), 404, "target_not_found", {
      message: "online target not found: ghost",
    });
  });

  it("does not reach an agent of another project, by id or by name", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const other = await t.register("gamma", "q");
    await expectRestError(await send(t, a, { target: other.id, content: "x" }), 404, "target_not_found");
    await expectRestError(await send(t, a, { target: "gamma", content: "x", allowOffline: true }), 404, "target_not_found");
  });

  it("refuses the sender itself with 400 self_target, by id and by name", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await expectRestError(await send(t, a, { target: a.id, content: "x" }), 400, "self_target");
    await expectRestError(await send(t, a, { target: "ALPHA", content: "x" }), 400, "self_target");
    expect(count(t, "messagesSent")).toBe(0);
  });
});

describe("POST /v1/messages: idempotency (§3.4)", () => {
  const base = { target: "beta", content: "do it", idempotencyKey: "k1" };

  it("answers an identical repeat 200 {original, idempotent:true}: no new record, counter or event", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const first = await sent(t, a, base);
    t.clock.advance(1_000);
    const again = await expectRestOk(await send(t, a, { ...base, target: "BETA", content: "  do it  " }), 200);
    expect(again).toEqual({ message: first, idempotent: true });
    const byId = await expectRestOk(await send(t, a, { ...base, target: b.id }), 200);
    expect(byId.message).toEqual(first);
    expect(count(t, "messagesSent")).toBe(1);
    expect(logged(t, "message_sent")).toHaveLength(1);
    // No event either: the next message to B is B#2.
    expect((await sent(t, a, { target: "beta", content: "next" })).seq).toBe(2);
  });

  it("replays the original in its current state (replied), even when the target went offline", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const first = await sent(t, a, base);
    const replied = (await expectRestOk(await reply(t, b, first.id, "done"))).message;
    await unregister(t, b);
    const again = await expectRestOk(await send(t, a, base), 200);
    expect(again).toEqual({ message: replied, idempotent: true });
    expect(again.message.status).toBe("replied");
  });

  it("does not compare allowOffline", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const first = await sent(t, a, base);
    const again = await expectRestOk(await send(t, a, { ...base, allowOffline: true }), 200);
    expect(again.message.id).toBe(first.id);
  });

  it("treats an explicit default as the same request (maxHops 5, hops 0, followUp, 24 h TTL)", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const first = await sent(t, a, base);
    const again = await send(t, a, { ...base, maxHops: 5, hops: 0, delivery: "followUp", ttlMs: DAY_MS });
    expect((await expectRestOk(again, 200)).message.id).toBe(first.id);
  });

  it.each([
    ["content", { content: "do it now" }],
    ["target", { target: "gamma" }],
    ["delivery", { delivery: "steer" }],
    ["correlationId", { correlationId: "c" }],
    ["replyTo", { replyTo: "r" }],
    ["hops", { hops: 1 }],
    ["maxHops", { maxHops: 6 }],
    ["ttlMs", { ttlMs: 60_000 }],
  ])("refuses a different %s under the same key with 409 idempotency_conflict", async (_field, change) => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await t.register("gamma");
    await sent(t, a, base);
    await expectRestError(await send(t, a, { ...base, ...change }), 409, "idempotency_conflict");
    expect(count(t, "messagesSent")).toBe(1);
  });

  it("checks the key before the target: a conflict wins over an unknown target or self", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    await sent(t, a, base);
    await expectRestError(await send(t, a, { ...base, target: "ghost" }), 409, "idempotency_conflict");
    await expectRestError(await send(t, a, { ...base, target: "alpha" }), 409, "idempotency_conflict");
  });

  it("scopes the key to the sender: another sender may reuse it", async () => {
    await using t = await startTestHub();
    const { a, b } = await pair(t);
    const fromA = await sent(t, a, base);
    const fromB = await sent(t, b, { ...base, target: "alpha", content: "other" });
    expect(fromB.id).not.toBe(fromA.id);
    expect(fromB.idempotencyKey).toBe("k1");
  });
});

describe("POST /v1/messages: idempotency under concurrency and expiry", () => {
  it("creates one message for concurrent identical sends with one key", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const json = { target: "beta", content: "once", idempotencyKey: "race" };
    const answers = await Promise.all(Array.from({ length: 10 }, () => send(t, a, json)));
    const bodies = await Promise.all(answers.map((r) => expectRestOk(r, r.status)));
    expect(answers.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 202]);
    expect(new Set(bodies.map((b) => b.message.id)).size).toBe(1);
    expect(count(t, "messagesSent")).toBe(1);
  });

  it("replays an expired original as expired", async () => {
    await using t = await startTestHub();
    const { a } = await pair(t);
    const json = { target: "beta", content: "x", idempotencyKey: "k", ttlMs: 1_000 };
    await sent(t, a, json);
    t.clock.advance(1_000);
    const again = await expectRestOk(await send(t, a, json), 200);
    expect(again.idempotent).toBe(true);
    expect(again.message.status).toBe("expired");
  });
});
