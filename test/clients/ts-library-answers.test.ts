import net from "node:net";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { describe, expect, it } from "vitest";
import { connect, HubError, RunFactSync, SyncEventSchema } from "../../clients/ts/src/index.js";
import { startTestHub } from "../fixtures/hub.js";
import { syncEvent } from "../sync/fixtures.js";
import { makeCerts } from "../fixtures/certs.js";

/**
 * The TypeScript library's answers where the hub's answer alone does not settle them: refusals
 * typed as HubErrors everywhere, a body over the hub's limit never taken for something to retry,
 * a lease an acquire's lost answer left behind taken over by the retry, a TTL the request cannot
 * carry refused as the caller's mistake.
 */

describe("TypeScript library", () => {
  it("InboxEvent.ack()/reply() refusals are HubErrors with the hub's code (as Go and Python give)", async () => {
    await using t = await startTestHub();
    const a = await connect({ url: t.baseUrl, project: "p", name: "alice", clock: t.clock, heartbeatMs: 600_000 });
    const b = await connect({ url: t.baseUrl, project: "p", name: "bob", clock: t.clock, heartbeatMs: 600_000 });
    try {
      await a.send("bob", "please review");
      const ac = new AbortController();
      const it = b.inbox({ signal: ac.signal })[Symbol.asyncIterator]();
      const ev = (await it.next()).value!;
      expect(ev.kind).toBe("message");
      await ev.reply("done");
      // A second reply: the hub refuses it with duplicate_reply.
      const err = await ev.reply("done again").then(
        () => undefined,
        (e: unknown) => e,
      );
      ac.abort();
      await it.return?.(undefined);
      expect(err).toBeInstanceOf(HubError);
      expect((err as HubError).code).toBe("duplicate_reply");
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("RunFactSync.push of a batch over the hub's body limit (a maxBatchBytes above the hub's) fails instead of re-sending it forever", async () => {
    await using t = await startTestHub();
    // Each fact is valid on its own (summary 1..1000 chars; fieldsOmitted up to 128 names of up to 128 chars).
    const fact = (sequence: number) =>
      fromJson(
        SyncEventSchema,
        syncEvent({
          runId: "run_bigbatch01",
          sequence,
          sourceEventId: `evt_big_${String(sequence).padStart(4, "0")}`,
          redaction: { version: "v1", fieldsOmitted: Array.from({ length: 16 }, (_, i) => `f${i}`.padEnd(128, "x")), valuesReplaced: 0 },
          payload: { status: "running", workflowId: "wf-build", displayTitle: "Build it", summary: "s".repeat(1000) },
        }) as JsonObject,
      );
    // One such fact alone is accepted.
    const one = new RunFactSync({ url: t.baseUrl, project: "p", runtimeId: "rtm_runtime0001" });
    expect((await one.push([fact(1)])).results[0]?.code ?? "").toBe("");
    one.close();

    let pushes = 0;
    const codes: string[] = [];
    const count: Interceptor = (next) => async (req) => {
      if (req.method.name === "PushEvents") pushes++;
      try {
        return await next(req);
      } catch (e) {
        const h = HubError.from(e);
        codes.push(`${h.code}${h.transient ? " (transient)" : ""}`);
        throw e;
      }
    };
    const sync = new RunFactSync({
      url: t.baseUrl,
      project: "p",
      runtimeId: "rtm_runtime0001",
      clock: t.clock,
      // A limit above the hub's (its 256 KiB are the default, under which the batch is cut in two).
      maxBatchBytes: 10_000_000,
      transport: (i) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2", interceptors: [count, ...i] }),
    });
    const ac = new AbortController();
    const facts = Array.from({ length: 100 }, (_, i) => fact(i + 2));
    let settled: unknown = "pending";
    const pushed = sync.push(facts, { signal: ac.signal }).then(
      () => (settled = "resolved"),
      (e: unknown) => (settled = e),
    );
    // Give it 60 s of (fake) back-off time.
    for (let i = 0; i < 60 && settled === "pending"; i++) {
      for (let k = 0; k < 200 && t.clock.sleepers === 0 && settled === "pending"; k++) await new Promise((r) => setTimeout(r, 5));
      t.clock.advance(1_000);
    }
    const pending = settled === "pending";
    ac.abort();
    await pushed;
    sync.close();
    expect(pending).toBe(false);
    expect(pushes).toBe(1);
    expect(settled).toBeInstanceOf(HubError);
    expect((settled as HubError).code).toBe("payload_too_large");
    expect((settled as HubError).transient).toBe(false);
  });
});

describe("TypeScript acquire whose answer was lost while the hub was briefly unreachable", () => {
  it("retrying the acquire gets the lease (or lets it lapse) instead of renewing an orphan forever", async () => {
    await using t = await startTestHub();
    // The hub grants the first AcquireLease, its answer is lost (a reset); the session's look
    // after it (GetLease) finds the hub unreachable too. Everything after goes through.
    let acquires = 0;
    let looks = 0;
    const flaky: Interceptor = (next) => async (req) => {
      if (req.method.name === "AcquireLease" && acquires++ === 0) {
        await next(req);
        throw new ConnectError("read ECONNRESET", Code.Unavailable);
      }
      if (req.method.name === "GetLease" && looks++ === 0) throw new ConnectError("connect ECONNREFUSED", Code.Unavailable);
      return next(req);
    };
    const s = await connect({
      url: t.baseUrl, project: "p", name: "builder", clock: t.clock, heartbeatMs: 600_000,
      transport: (i) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2", interceptors: [flaky, ...i] }),
    });
    const other = await connect({ url: t.baseUrl, project: "p", name: "other", clock: t.clock, heartbeatMs: 600_000 });
    try {
      const first = await s.acquire("deploy", { ttlMs: 10_000 }).catch((e: unknown) => e as HubError);
      expect((first as HubError).code).toBe("unavailable");
      // The caller retries (an unavailable hub is transient), every 5 s, for 2 minutes (12 TTLs).
      const seen: string[] = [];
      let got: unknown;
      for (let i = 0; i < 24 && !got; i++) {
        await new Promise((r) => setTimeout(r, 20)); // the look settles
        t.clock.advance(5_000);
        got = await s.acquire("deploy", { ttlMs: 10_000 }).then(
          (h) => h,
          (e: HubError) => void seen.push(e.code),
        );
      }
      const othersTry = await other.acquire("deploy", { ttlMs: 10_000 }).then(() => "granted", (e: HubError) => e.code);
      expect({ seen: [...new Set(seen)], got: got !== undefined || othersTry === "granted" }).toMatchObject({ got: true });
      // The retry took the lease over: the same token the lost answer carried, released by its holder now.
      expect((got as { token: bigint }).token).toBe(1n);
      await (got as { release(): Promise<void> }).release();
    } finally {
      await s.close();
      await other.close();
    }
  });
});

describe("TypeScript acquire with a TTL that is not a whole number of ms", () => {
  it("is refused as the caller's mistake (Python: protocol_error), not as a transient 'unavailable' hub", async () => {
    await using t = await startTestHub();
    const s = await connect({ url: t.baseUrl, project: "p", name: "x", clock: t.clock, heartbeatMs: 600_000 });
    try {
      const e = await s.acquire("a", { ttlMs: (10_000 / 3) * 4 }).catch((e: unknown) => e);
      expect(e).toBeInstanceOf(HubError);
      expect((e as HubError).transient).toBe(false);
      expect((e as HubError).code).toBe("protocol_error");
    } finally {
      await s.close();
    }
  });
});


/**
 * A TCP proxy in front of the hub. `partition()` turns every connection open now into a black hole
 * (bytes are dropped both ways, nothing is closed: a NAT entry or load balancer gone, a peer
 * powered off); connections opened after it are forwarded as before (the hub is reachable).
 */
async function partitionableProxy(hubUrl: string) {
  const target = new URL(hubUrl);
  const sockets = new Set<net.Socket>();
  const dead = new WeakSet<net.Socket>();
  let opened = 0;
  const server = net.createServer((c) => {
    opened++;
    const u = net.connect(Number(target.port), target.hostname);
    sockets.add(c).add(u);
    c.on("data", (d) => void (!dead.has(c) && u.write(d)));
    u.on("data", (d) => void (!dead.has(u) && c.write(d)));
    const end = () => {
      if (dead.has(c)) return;
      c.destroy();
      u.destroy();
    };
    c.on("close", end).on("error", end);
    u.on("close", end).on("error", end);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    get opened() {
      return opened;
    },
    partition() {
      for (const s of sockets) dead.add(s);
    },
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

describe("TypeScript library over a connection gone silent, and TLS options it cannot apply", () => {
  it("loses the session once its heartbeats go unanswered (each waits one interval at most)", async () => {
    await using t = await startTestHub();
    const proxy = await partitionableProxy(t.baseUrl);
    // The library's own clock and timers: heartbeats every 300 ms.
    const s = await connect({ url: proxy.url, project: "p", name: "silent", heartbeatMs: 300 });
    try {
      proxy.partition();
      // Three heartbeats of 300 ms each, unanswered: the session is lost (at most 10 s of real time for the event).
      const lost = await Promise.race([
        new Promise<string>((resolve) => (s.lost.aborted ? resolve("lost") : s.lost.addEventListener("abort", () => resolve("lost"), { once: true }))),
        new Promise<string>((resolve) => setTimeout(() => resolve("still not lost after 10 s"), 10_000).unref()),
      ]);
      expect(lost).toBe("lost");
      expect((s.lost.reason as HubError).code).toBe("unavailable");
    } finally {
      const closed = s.close();
      proxy.close();
      await closed.catch(() => undefined);
    }
  }, 20_000);

  it("send and release take a signal: an abort ends a call the silent hub never answers, with HubError cancelled", async () => {
    await using t = await startTestHub();
    const proxy = await partitionableProxy(t.baseUrl);
    const s = await connect({ url: proxy.url, project: "p", name: "sender", heartbeatMs: 600_000 });
    await t.register("bob");
    try {
      const held = await s.acquire("db", { ttlMs: 60_000 });
      proxy.partition();
      const codeOf = (call: Promise<unknown>) => call.then(() => "answered", (e: unknown) => (e instanceof HubError ? e.code : String(e)));
      const sending = new AbortController();
      const sent = codeOf(s.send("bob", "hello", { signal: sending.signal }));
      const releasing = new AbortController();
      const released = codeOf(held.release({ signal: releasing.signal }));
      sending.abort();
      releasing.abort();
      expect(await sent).toBe("cancelled");
      expect(await released).toBe("cancelled");
    } finally {
      const closed = s.close();
      proxy.close();
      await closed.catch(() => undefined);
    }
  }, 20_000);

  it("refuses TLS options for an http:// hub instead of sending the token and agent key in clear", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    const certs = makeCerts();
    try {
      const r = await connect({ url: t.baseUrl, project: "p", name: "tls-typo", token: "tok-p", heartbeatMs: 600_000, tls: { ca: certs.ca.cert, cert: certs.client.cert, key: certs.client.key } }).then(
        async (s) => {
          await s.close();
          return "connected in clear text";
        },
        (e: unknown) => e,
      );
      expect(r).toBeInstanceOf(HubError);
      expect((r as HubError).code).toBe("invalid_tls_config");
      expect(t.events.filter((e) => e.event === "agent_registered")).toEqual([]);
    } finally {
      certs.remove();
    }
  });
});
