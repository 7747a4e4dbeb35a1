import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import net from "node:net";
import { describe, expect, it } from "vitest";
import { connect, HubError } from "../../clients/ts/src/index.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { idle } from "../fixtures/streams.js";

/**
 * The TypeScript library through what a new team hit first: a lease granted after a wait longer
 * than its TTL, a reply that came before the sender looked for it, and an agent restarted under
 * its name at once. The hub and the library share the test's FakeClock.
 */

const open = (t: TestHub, name: string, extra: Partial<Parameters<typeof connect>[0]> = {}) =>
  connect({ url: t.baseUrl, project: "p", name, clock: t.clock, heartbeatMs: 60_000, ...extra });

/** Counts the calls a session makes, by method name. */
function counted(url: string) {
  const calls = new Map<string, number>();
  const count: Interceptor = (next) => (req) => {
    calls.set(req.method.name, (calls.get(req.method.name) ?? 0) + 1);
    return next(req);
  };
  return { calls, transport: (interceptors: Interceptor[]) => createConnectTransport({ baseUrl: url, httpVersion: "2", interceptors: [count, ...interceptors] }) };
}

const until = async (cond: () => boolean, what: string) => {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
};

describe("TypeScript library: a lease granted after a long wait", () => {
  it("is kept renewed through three more TTLs when the wait lasted more than twice the TTL", async () => {
    await using t = await startTestHub();
    const ttlMs = 6_000;
    const holder = await open(t, "holder");
    const waiter = await open(t, "waiter");
    const first = await holder.acquire("repo/main", { ttlMs });
    const granted = waiter.acquire("repo/main", { ttlMs, waitMs: 60_000 });
    // 16 s of hub time (more than twice the TTL): the holder renews, the waiter waits in the queue.
    for (let elapsed = 0; elapsed < 16_000; elapsed += 2_000) {
      await idle(t.clock, 4); // two heartbeats, the holder's keeper, the waiting acquire
      t.clock.advance(2_000);
    }
    await idle(t.clock, 4);
    await first.release();
    const held = await granted;
    expect(held.token).toBe(first.token + 1n);
    expect(held.lost.aborted).toBe(false); // before the fix: lease_unconfirmed at once

    for (let elapsed = 0; elapsed < 3 * ttlMs; elapsed += 2_000) {
      await idle(t.clock, 3); // two heartbeats, the waiter's keeper
      t.clock.advance(2_000);
    }
    await idle(t.clock, 3);
    expect(held.lost.aborted, String((held.lost.reason as Error | undefined)?.message)).toBe(false);
    const now = (await holder.leases.getLease({ name: "repo/main" })).lease!;
    expect([now.holderAgentName, now.fencingToken]).toEqual(["waiter", held.token]);
    expect(Number(now.expiresAt!.seconds) * 1000).toBeGreaterThan(t.clock.now());
    await Promise.all([holder.close(), waiter.close()]);
  });
});

describe("TypeScript library: replies", () => {
  it("gives the sender a reply that came before it looked, and one that comes while it waits", async () => {
    await using t = await startTestHub();
    const { calls, transport } = counted(t.baseUrl);
    const builder = await open(t, "builder", { transport });
    const reviewer = await open(t, "reviewer");

    const early = await builder.send("reviewer", "pushed main");
    await reviewer.peer.ackMessage({ messageId: early.id });
    await reviewer.peer.replyMessage({ messageId: early.id, content: "reviewed" });
    const read = await builder.awaitReply(early);
    expect([read.id, read.reply?.content]).toEqual([early.id, "reviewed"]);

    const late = await builder.send("reviewer", "pushed again");
    const waiting = builder.awaitReply(late.id);
    await until(() => calls.get("GetMessage") === 2, "the second awaitReply to read its message");
    await reviewer.peer.replyMessage({ messageId: late.id, content: "looked again" });
    expect((await waiting).reply?.content).toBe("looked again");
    expect(calls.get("GetMessage")).toBe(2); // one read per wait: the reply came on the stream

    // A message that ends without a reply says so; one this agent did not send is refused.
    const dropped = await builder.send("reviewer", "never mind");
    await builder.peer.cancelMessage({ messageId: dropped.id });
    await expect(builder.awaitReply(dropped)).rejects.toMatchObject({ code: "message_ended", metadata: { status: "cancelled" } });
    const toReviewer = await builder.send("reviewer", "for you");
    await expect(reviewer.awaitReply(toReviewer)).rejects.toMatchObject({ code: "message_forbidden" });
    await Promise.all([builder.close(), reviewer.close()]);
  });
});

describe("TypeScript library: takeover", () => {
  it("restarts an agent under its name at once; the old instance is refused and its token never handed out again", async () => {
    await using t = await startTestHub();
    const old = await open(t, "worker");
    const held = await old.acquire("repo/main", { ttlMs: 30_000 });
    const oldInbox = old.inbox()[Symbol.asyncIterator]();
    const oldInboxEnds = oldInbox.next().then(
      () => "no error",
      (e: unknown) => HubError.from(e).code,
    );

    await expect(open(t, "worker")).rejects.toMatchObject({ code: "duplicate_agent_name" });
    const fresh = await open(t, "worker", { takeover: true });
    expect([fresh.agent.id, fresh.takenOver, fresh.releasedLeases]).toEqual([old.agent.id, true, ["repo/main"]]);

    // The old instance: its calls and its inbox stream are refused.
    await expect(old.leases.getLease({ name: "repo/main" })).rejects.toSatisfy((e: unknown) => HubError.from(e).code === "invalid_agent_identity");
    expect(await oldInboxEnds).toBe("invalid_agent_identity");

    // The new instance's lease is above the old one's, and the old token is refused.
    const again = await fresh.acquire("repo/main", { ttlMs: 30_000 });
    expect(again.token).toBeGreaterThan(held.token);
    const stale = await fresh.leases.renewLease({ name: "repo/main", fencingToken: held.token, ttlMs: 30_000 }).catch((e: unknown) => HubError.from(e));
    expect(stale).toMatchObject({ code: "lease_superseded" });
    await fresh.close();
  });
});

/** A TCP relay in front of the hub that, once armed, resets the next connection that sends a byte. */
async function resettingRelay(target: string) {
  const { hostname, port } = new URL(target);
  let armed = false;
  let resets = 0;
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname);
    client.on("data", (chunk) => {
      if (!armed) return void upstream.write(chunk);
      armed = false;
      resets++;
      client.resetAndDestroy(); // the client reads ECONNRESET, as when a hub is killed mid-call
      upstream.destroy();
    });
    upstream.on("data", (chunk) => client.write(chunk));
    upstream.on("error", () => client.destroy());
    client.on("error", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    client.on("close", () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port: relayPort } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${relayPort}`,
    arm: () => void (armed = true),
    resets: () => resets,
    [Symbol.asyncDispose]: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe("TypeScript library: a connection reset under a renewal", () => {
  it("tries the renewal again instead of giving the lease up, and keeps it", async () => {
    await using t = await startTestHub();
    await using relay = await resettingRelay(t.baseUrl);
    const s = await connect({ url: relay.url, project: "p", name: "holder", clock: t.clock, heartbeatMs: 60_000 });
    const ttlMs = 6_000;
    const held = await s.acquire("db", { ttlMs });

    relay.arm();
    await idle(t.clock, 2); // the heartbeat, the keeper
    t.clock.advance(ttlMs / 3); // the renewal's connection is reset while the call is in flight
    await until(() => relay.resets() === 1, "the relay to reset the renewal's connection");
    await idle(t.clock, 2);
    expect(held.lost.aborted, String((held.lost.reason as Error | undefined)?.message)).toBe(false); // before: lost with "unknown"

    t.clock.advance(1_000); // the retry, on a new connection
    await until(() => Number(held.lease.expiresAt!.seconds) * 1000 > t.clock.now() + ttlMs - 1_000, "the retried renewal");
    expect(held.lost.aborted).toBe(false);
    const now = (await s.leases.getLease({ name: "db" })).lease!;
    expect([now.holderAgentName, now.fencingToken]).toEqual(["holder", held.token]);
    await s.close();
  });
});

describe("TypeScript library: a renewal cut as cancelled from the hub's side", () => {
  it("tries the renewal again instead of giving the lease up with 'cancelled', and keeps it", async () => {
    await using t = await startTestHub();
    // connect-node reports an HTTP/2 stream the hub's end closed (a hub killed under the call) as
    // Canceled, though the caller cancelled nothing: the first renewal ends that way.
    let cut = 0;
    const cutOnce: Interceptor = (next) => async (req) => {
      if (req.method.name !== "RenewLease" || cut > 0) return next(req);
      cut++;
      throw new ConnectError("http/2 stream closed with error code CANCEL (0x8)", Code.Canceled);
    };
    const s = await open(t, "holder", { transport: (i) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2", interceptors: [cutOnce, ...i] }) });
    const ttlMs = 6_000;
    const held = await s.acquire("db", { ttlMs });

    await idle(t.clock, 2); // the heartbeat, the keeper
    t.clock.advance(ttlMs / 3); // the renewal, cut
    await until(() => cut === 1, "the renewal to be cut");
    await idle(t.clock, 2);
    expect(held.lost.aborted, String((held.lost.reason as Error | undefined)?.message)).toBe(false); // before: lost with "cancelled"

    t.clock.advance(1_000); // the retry
    await until(() => Number(held.lease.expiresAt!.seconds) * 1000 > t.clock.now() + ttlMs - 1_000, "the retried renewal");
    expect(held.lost.aborted).toBe(false);
    const now = (await s.leases.getLease({ name: "db" })).lease!;
    expect([now.holderAgentName, now.fencingToken]).toEqual(["holder", held.token]);

    // The caller's own cancel is still "cancelled": a release given an aborted signal.
    const stop = new AbortController();
    stop.abort();
    await expect(held.release({ signal: stop.signal })).rejects.toMatchObject({ code: "cancelled" });
    await s.close();
  });
});

/** Cuts the first `times` calls of `method` as connect-node reports a stream the hub's end closed. */
function cutAsCancelled(url: string, method: string, times = 1) {
  const cut = { count: 0, transport: (i: Interceptor[]) => createConnectTransport({ baseUrl: url, httpVersion: "2", interceptors: [cutter, ...i] }) };
  const cutter: Interceptor = (next) => async (req) => {
    if (req.method.name !== method || cut.count >= times) return next(req);
    cut.count++;
    throw new ConnectError("http/2 stream closed with error code CANCEL (0x8)", Code.Canceled);
  };
  return cut;
}

describe("TypeScript library: calls cut as cancelled from the hub's side", () => {
  it("the inbox reads on after its stream is cut, though it was given no signal", async () => {
    await using t = await startTestHub();
    const cut = cutAsCancelled(t.baseUrl, "Subscribe");
    const reader = await open(t, "reader", { transport: cut.transport });
    const sender = await open(t, "sender");
    await sender.send("reader", "m1");
    const sleepers = t.clock.sleepers; // the two heartbeats
    const inbox = reader.inbox()[Symbol.asyncIterator]();
    const next = inbox.next(); // before: rejected with "cancelled", the inbox ended
    await until(() => cut.count === 1 && t.clock.sleepers > sleepers, "the inbox's back-off after the cut");
    t.clock.advance(5_000);
    expect((await next).value.message.content).toBe("m1");
    await inbox.return(undefined);
    await Promise.all([reader.close(), sender.close()]);
  });

  it("awaitReply reads on after its stream is cut, and returns the reply", async () => {
    await using t = await startTestHub();
    const cut = cutAsCancelled(t.baseUrl, "Subscribe");
    const sender = await open(t, "sender", { transport: cut.transport });
    const reader = await open(t, "reader");
    const m = await sender.send("reader", "question");
    const sleepers = t.clock.sleepers;
    const reply = sender.awaitReply(m); // before: rejected with "cancelled"
    await until(() => cut.count === 1 && t.clock.sleepers > sleepers, "awaitReply's back-off after the cut");
    await reader.peer.replyMessage({ messageId: m.id, content: "answer" });
    t.clock.advance(5_000);
    expect((await reply).reply?.content).toBe("answer");
    await Promise.all([reader.close(), sender.close()]);
  });

  it("a call without a signal, cut, is unavailable and transient; one whose signal the caller aborted is cancelled", async () => {
    await using t = await startTestHub();
    const cut = cutAsCancelled(t.baseUrl, "SendMessage");
    const sender = await open(t, "sender", { transport: cut.transport });
    const reader = await open(t, "reader");
    await expect(sender.send("reader", "cut")).rejects.toMatchObject({ code: "unavailable", transient: true }); // before: "cancelled", not transient
    const stop = new AbortController();
    stop.abort();
    await expect(sender.send("reader", "never sent", { signal: stop.signal })).rejects.toMatchObject({ code: "cancelled", transient: false });
    expect((await sender.send("reader", "sent")).content).toBe("sent");
    await Promise.all([reader.close(), sender.close()]);
  });
});

describe("TypeScript library: the inbox's default start, then a reconnect", () => {
  it("resumes where the stream stood, not from its last message: what the default start skipped does not come back", async () => {
    const fs = await import("node:fs");
    const os = await import("node:os");
    const path = await import("node:path");
    const { FakeClock } = await import("../fixtures/fake-clock.js");
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-inbox-resume-"));
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = s.address() as net.AddressInfo;
        s.close(() => resolve(port));
      });
    });
    const clock = new FakeClock();
    const config = { port, dataPath: path.join(dir, "kxm.db") };
    try {
      let t = await startTestHub({ clock, config });
      const sender = await open(t, "sender");
      const reader = await open(t, "reader");
      await sender.send("reader", "m1 pending");
      const m2 = await sender.send("reader", "m2 cancelled before the inbox opened");
      await sender.peer.cancelMessage({ messageId: m2.id });
      const ac = new AbortController();
      const it = reader.inbox({ signal: ac.signal })[Symbol.asyncIterator]();
      const seen = [(await it.next()).value.message.content];
      // The hub restarts; the inbox reconnects and reads on.
      await t.close();
      t = await startTestHub({ clock, config });
      const next = it.next();
      await until(() => clock.sleepers > 0, "the inbox's back-off");
      for (let i = 0; i < 20 && clock.sleepers > 0; i++) {
        clock.advance(5_000);
        await new Promise((r) => setTimeout(r, 20));
      }
      await sender.send("reader", "m3 live after the reconnect");
      seen.push((await next).value.message.content);
      ac.abort();
      await t.close();
      expect(seen).toEqual(["m1 pending", "m3 live after the reconnect"]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
