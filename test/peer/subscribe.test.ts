import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { MessageStatus, PeerService, type SubscribeResponse } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService, PresenceState } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { HubConfig } from "../../src/config.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { ms, refusalOf } from "../fixtures/rpc.js";
import { Frames, idle, StreamScope, streamProtocols, until } from "../fixtures/streams.js";

const keepAliveMs = 15_000;
const staleAfterMs = 30_000;
/** The sweep timer never fires during a test; tests sweep with sweepNow. */
const base: Partial<HubConfig> = { cleanupIntervalMs: 3_600_000 };

/** PeerService.Subscribe, once per streaming wire, on a fresh hub per test. */
describe.each(streamProtocols)("Subscribe over $name", (protocol) => {
  const peer = (t: TestHub, who: AgentCreds) => createClient(PeerService, protocol.make(t.baseUrl, [withHeaders(who.headers)]));
  const presenceOf = (t: TestHub, who: AgentCreds) =>
    createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders(who.headers)]));

  /** Opens a Subscribe stream on its own transport (own HTTP/2 connection). */
  const subscribe = (s: StreamScope, t: TestHub, who: AgentCreds, afterSeq?: bigint) =>
    s.add((signal) => peer(t, who).subscribe(afterSeq === undefined ? {} : { afterSeq }, { signal }));

  const send = async (t: TestHub, from: AgentCreds, to: AgentCreds, content: string, extra: { ttlMs?: number; allowOffline?: boolean } = {}) =>
    (await peer(t, from).sendMessage({ target: to.name, content, ...extra })).message!;

  /** Reads the ready frame and checks it names `who`. */
  async function ready(f: Frames<SubscribeResponse>, who: AgentCreds, cursor = 0n) {
    const r = await f.next();
    expect(r.event.case).toBe("ready");
    expect(r.cursor).toBe(cursor);
    if (r.event.case !== "ready") throw new Error("unreachable");
    expect(r.event.value.agent?.id).toBe(who.id);
    return r.event.value.agent!;
  }

  /** Reads one frame and checks its kind and cursor; returns its message. */
  async function expectEvent(f: Frames<SubscribeResponse>, kind: "message" | "reply" | "cancelled" | "expired", cursor: bigint) {
    const r = await f.next();
    expect({ kind: r.event.case, cursor: r.cursor }).toEqual({ kind, cursor });
    if (r.event.case !== kind) throw new Error("unreachable");
    return r.event.value;
  }

  /**
   * Nothing else is pending on `f`: once the `sleepers` open streams idle, moving the hub clock
   * by the keep-alive interval yields a keep-alive as the very next frame.
   */
  async function quiet(t: TestHub, f: Frames<SubscribeResponse>, sleepers = 1) {
    await idle(t.clock, sleepers);
    t.clock.advance(keepAliveMs);
    expect((await f.next()).event.case).toBe("keepAlive");
  }

  /** Closes a stream and waits until the hub has let go of it. */
  async function drop(t: TestHub, f: Frames<SubscribeResponse>, sleepersLeft = 0) {
    f.close();
    await until(() => t.clock.sleepers <= sleepersLeft, "the hub to end the stream");
  }

  it("replays an offline-queued message on every connect until acked; opening the stream revives the agent", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    t.clock.advance(staleAfterMs + 1);
    await t.hub.sweepNow();
    const m = await send(t, a, b, "while you were out", { allowOffline: true });
    expect(m.seq).toBe(1n);

    const s1 = subscribe(s, t, b);
    const agent = await ready(s1, b);
    expect(agent).toMatchObject({ online: true, presence: PresenceState.ONLINE });
    expect((await expectEvent(s1, "message", 1n)).content).toBe("while you were out");
    await quiet(t, s1);
    await drop(t, s1);

    const s2 = subscribe(s, t, b);
    await ready(s2, b);
    expect((await expectEvent(s2, "message", 1n)).id).toBe(m.id);
    await quiet(t, s2);
    await drop(t, s2);

    await peer(t, b).ackMessage({ messageId: m.id });
    const s3 = subscribe(s, t, b);
    await ready(s3, b, 1n);
    await quiet(t, s3);
  });

  it("replays a large backlog a page at a time: every pending message in order, no read of more than 100", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const first = await send(t, a, b, "m1");
    for (let i = 2; i <= 230; i++) await send(t, a, b, `m${i}`);
    await peer(t, b).ackMessage({ messageId: first.id });
    const store = t.hub.store.messages;
    const pending = store.pendingMessages.bind(store);
    const rows: number[] = [];
    store.pendingMessages = async (...args) => {
      const page = await pending(...args);
      rows.push(page.length);
      return page;
    };
    const s1 = subscribe(s, t, b);
    await ready(s1, b, 1n);
    for (let seq = 2; seq <= 230; seq++) expect((await expectEvent(s1, "message", BigInt(seq))).content).toBe(`m${seq}`);
    await quiet(t, s1);
    expect(rows).toEqual([100, 100, 29]);
  });

  it("a stream whose agent is unregistered while the call is authenticated ends, and does not bring it back online", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    // The unregister commits after beta's call was authenticated, before its stream listens.
    const agents = t.hub.store.agents;
    const peek = agents.peekCaller.bind(agents);
    let armed = true;
    agents.peekCaller = async (id) => {
      const r = await peek(id);
      if (armed && id === b.id) {
        armed = false;
        expect((await t.rest(`/v1/agents/${b.id}`, { method: "DELETE", headers: b.headers })).status).toBe(204);
      }
      return r;
    };
    const f = subscribe(s, t, b);
    const end = await f.next().then((r) => `frame ${r.event.case}`, (e: unknown) => refusalOf(e).reason);
    expect(end).toBe("INVALID_AGENT_IDENTITY");
    agents.peekCaller = peek;
    const listed = await presenceOf(t, a).listAgents({ includeOffline: true });
    expect(listed.agents.find((x) => x.id === b.id)?.online).toBe(false);
  });

  it("resumes from afterSeq after a dropped connection: nothing lost, nothing repeated", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const s1 = subscribe(s, t, b);
    await ready(s1, b);
    await send(t, a, b, "m1");
    await send(t, a, b, "m2");
    const before = await s1.take(2);
    await drop(t, s1);
    await send(t, a, b, "m3");
    await send(t, a, b, "m4");

    const last = before.at(-1)!.cursor;
    const s2 = subscribe(s, t, b, last);
    await ready(s2, b, last);
    const after = await s2.take(2);
    await send(t, a, b, "m5");
    after.push(await s2.next());
    await quiet(t, s2);

    const seen = [...before, ...after].map((f) => ({
      cursor: f.cursor,
      content: f.event.case === "message" ? f.event.value.content : f.event.case,
    }));
    expect(seen).toEqual([1, 2, 3, 4, 5].map((i) => ({ cursor: BigInt(i), content: `m${i}` })));
  });

  it("delivers crossing messages (A to B and B to A at once) to both", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const sa = subscribe(s, t, a);
    const sb = subscribe(s, t, b);
    await ready(sa, a);
    await ready(sb, b);
    await Promise.all([send(t, a, b, "to beta"), send(t, b, a, "to alpha")]);
    expect(await expectEvent(sa, "message", 1n)).toMatchObject({ content: "to alpha", fromAgentId: b.id });
    expect(await expectEvent(sb, "message", 1n)).toMatchObject({ content: "to beta", fromAgentId: a.id });
  });

  it("sends reply to the sender, cancelled to the recipient, expired to both", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const sa = subscribe(s, t, a);
    const sb = subscribe(s, t, b);
    await ready(sa, a);
    await ready(sb, b);

    const m1 = await send(t, a, b, "ping");
    await expectEvent(sb, "message", 1n);
    await peer(t, b).replyMessage({ messageId: m1.id, content: "pong" });
    const replied = await expectEvent(sa, "reply", 1n);
    expect(replied).toMatchObject({ id: m1.id, status: MessageStatus.REPLIED, reply: { content: "pong" } });

    const m2 = await send(t, a, b, "never mind");
    await expectEvent(sb, "message", 2n);
    await peer(t, a).cancelMessage({ messageId: m2.id });
    expect(await expectEvent(sb, "cancelled", 3n)).toMatchObject({ id: m2.id, status: MessageStatus.CANCELLED });

    const m3 = await send(t, a, b, "short-lived", { ttlMs: 1_000 });
    expect(m3.seq).toBe(4n);
    await expectEvent(sb, "message", 4n);
    t.clock.advance(1_001);
    await t.hub.sweepNow();
    expect(await expectEvent(sa, "expired", 2n)).toMatchObject({ id: m3.id, status: MessageStatus.EXPIRED });
    expect(await expectEvent(sb, "expired", 5n)).toMatchObject({ id: m3.id, status: MessageStatus.EXPIRED });
  });

  it("reports peers registering, unregistering and resuming, but not the subscriber itself", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const b = await t.register("beta");
    const sb = subscribe(s, t, b);
    await ready(sb, b);
    const c = await t.register("gamma");
    const presence = async () => {
      const f = await sb.next();
      expect({ kind: f.event.case, cursor: f.cursor }).toEqual({ kind: "presence", cursor: 0n });
      if (f.event.case !== "presence") throw new Error("unreachable");
      return f.event.value;
    };
    expect(await presence()).toMatchObject({ id: c.id, name: "gamma", online: true, presence: PresenceState.ONLINE });
    await presenceOf(t, c).unregisterAgent({ agentId: c.id });
    expect(await presence()).toMatchObject({ id: c.id, online: false, presence: PresenceState.OFFLINE });
    const again = await t.register("gamma");
    expect(again.id).toBe(c.id);
    expect(await presence()).toMatchObject({ id: c.id, online: true });
    await presenceOf(t, b).heartbeat({ agentId: b.id });
    await quiet(t, sb);
  });

  it("gives every stream of one agent every event", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const streams = [subscribe(s, t, b), subscribe(s, t, b), subscribe(s, t, b)];
    for (const f of streams) await ready(f, b);
    const m1 = await send(t, a, b, "one");
    const m2 = await send(t, a, b, "two");
    for (const f of streams) {
      expect((await expectEvent(f, "message", 1n)).id).toBe(m1.id);
      expect((await expectEvent(f, "message", 2n)).id).toBe(m2.id);
    }
  });

  it("counts opening a stream as activity: a swept agent is online again and peers hear of it", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    t.clock.advance(staleAfterMs + 1);
    await t.hub.sweepNow();
    const sa = subscribe(s, t, a);
    expect(await ready(sa, a)).toMatchObject({ online: true, presence: PresenceState.ONLINE });
    const listed = await presenceOf(t, a).listAgents({ includeOffline: true });
    expect(listed.agents.find((x) => x.id === b.id)).toMatchObject({ online: false, presence: PresenceState.OFFLINE });

    const sb = subscribe(s, t, b);
    expect(await ready(sb, b)).toMatchObject({ online: true });
    const f = await sa.next();
    expect(f.event.case).toBe("presence");
    expect(f.event.value).toMatchObject({ id: b.id, online: true, presence: PresenceState.ONLINE });
    expect(ms((f.event.value as { lastSeenAt?: never }).lastSeenAt)).toBe(t.clock.now());
  });

  it("sends keep-alives on an idle stream each time the hub clock moves streamKeepAliveMs", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const b = await t.register("beta");
    const sb = subscribe(s, t, b);
    await ready(sb, b);
    const start = t.clock.now();
    await idle(t.clock);
    t.clock.advance(keepAliveMs - 1);
    expect(t.clock.sleepers).toBe(1);
    t.clock.advance(1);
    const k1 = await sb.next();
    expect({ kind: k1.event.case, cursor: k1.cursor }).toEqual({ kind: "keepAlive", cursor: 0n });
    if (k1.event.case !== "keepAlive") throw new Error("unreachable");
    expect(ms(k1.event.value.at)).toBe(start + keepAliveMs);
    await quiet(t, sb);
  });

  it("refuses an afterSeq older than what retention purged (CURSOR_EXPIRED)", async () => {
    await using t = await startTestHub({ config: { ...base, messageRetentionMs: 60_000 } });
    using s = new StreamScope();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const m = await send(t, a, b, "soon gone");
    await peer(t, b).replyMessage({ messageId: m.id, content: "done" });
    t.clock.advance(60_001);
    await t.hub.sweepNow();

    const e = refusalOf(await subscribe(s, t, b, 0n).error());
    expect(e).toMatchObject({ code: "out_of_range", reason: "CURSOR_EXPIRED", metadata: { afterSeq: "0", oldestSeq: "1" } });
    // The sender's reply event went with the message.
    expect(refusalOf(await subscribe(s, t, a, 0n).error())).toMatchObject({ reason: "CURSOR_EXPIRED" });
    // From the purge point on, the stream resumes.
    await ready(subscribe(s, t, b, 1n), b, 1n);
  });

  it("refuses a negative afterSeq, and one past 2^53, with PROTOCOL_ERROR, as ReadInbox refuses such a cursor", async () => {
    await using t = await startTestHub({ config: base });
    using s = new StreamScope();
    const b = await t.register("beta");
    for (const afterSeq of [-1n, -(2n ** 63n), 2n ** 53n]) {
      expect(refusalOf(await subscribe(s, t, b, afterSeq).error()), String(afterSeq)).toMatchObject({ code: "invalid_argument", reason: "PROTOCOL_ERROR" });
    }
  });

  // Over HTTP/1.1 the kernel's socket buffers take megabytes before a non-reading client blocks
  // the hub; HTTP/2 flow control blocks the stream after a few frames.
  it.skipIf(protocol.name.includes("HTTP/1.1"))(
    "cuts off a slow consumer with SUBSCRIBER_TOO_SLOW and a resume cursor; a fast one gets everything",
    async () => {
      await using t = await startTestHub({ config: { ...base, streamMaxLag: 8 } });
      using s = new StreamScope();
      const a = await t.register("alpha");
      const b = await t.register("beta");
      const fast = subscribe(s, t, b);
      const slow = subscribe(s, t, b);
      await ready(fast, b);
      await ready(slow, b);

      const total = 80;
      // Random text: the hub compresses frames, so repeated characters would not fill any buffer.
      const bodies = Array.from({ length: total + 1 }, (_, i) => `${i}:${randomBytes(15_000).toString("base64")}`);
      const big = (i: number) => bodies[i]!;
      for (let i = 1; i <= total; i++) {
        await send(t, a, b, big(i));
        // The fast stream reads each message before the next is sent: it never lags.
        expect((await expectEvent(fast, "message", BigInt(i))).content).toBe(big(i));
      }

      const cursors: bigint[] = [];
      let err: unknown;
      for (;;) {
        try {
          const f = await slow.next();
          expect(f.event.case).toBe("message");
          cursors.push(f.cursor);
        } catch (e) {
          err = e;
          break;
        }
      }
      const e = refusalOf(err);
      expect(e).toMatchObject({ code: "resource_exhausted", reason: "SUBSCRIBER_TOO_SLOW" });
      const resumeAfter = BigInt(e.metadata.resumeAfterSeq!);
      expect(cursors.length).toBeGreaterThan(0);
      expect(cursors.length).toBeLessThan(total);
      expect(cursors.at(-1)).toBe(resumeAfter);

      const resumed = subscribe(s, t, b, resumeAfter);
      await ready(resumed, b, resumeAfter);
      for (let i = Number(resumeAfter) + 1; i <= total; i++) cursors.push((await resumed.next()).cursor);
      expect(cursors).toEqual(Array.from({ length: total }, (_, i) => BigInt(i + 1)));
      await quiet(t, resumed, 2);
    },
  );
});
