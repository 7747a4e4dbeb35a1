import { randomBytes } from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { describe, expect, it } from "vitest";
import { checkFence, connect, HubError, LeaseService, type Session } from "../../clients/ts/src/index.js";
import { serveCli } from "../fixtures/cli.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { eventually, idle, until } from "../fixtures/streams.js";

/**
 * The TypeScript library's behaviour against a real hub: leases kept and lost, blocking acquire,
 * the resuming inbox, typed errors. In-process hubs share their FakeClock with the library, so
 * renewals and lapses happen when the test moves time; the outage tests run `kxm-hub serve` and
 * SIGKILL it, on real time.
 */
const freePort = () =>
  new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });

/** Counts the calls each session makes, by method name. */
function counted() {
  const calls = new Map<string, number>();
  const count: Interceptor = (next) => (req) => {
    calls.set(req.method.name, (calls.get(req.method.name) ?? 0) + 1);
    return next(req);
  };
  return { calls, transport: (url: string) => (interceptors: Interceptor[]) => createConnectTransport({ baseUrl: url, httpVersion: "2", interceptors: [count, ...interceptors] }) };
}

const open = (t: TestHub, name: string, extra: Partial<Parameters<typeof connect>[0]> = {}) =>
  connect({ url: t.baseUrl, project: "p", name, clock: t.clock, heartbeatMs: 60_000, ...extra });

describe("TypeScript library: leases", () => {
  it("keeps a lease through three times its TTL by renewing it", async () => {
    await using t = await startTestHub();
    const s = await open(t, "keeper");
    const held = await s.acquire("repo/main", { ttlMs: 6_000 });
    for (let elapsed = 0; elapsed < 18_000; elapsed += 2_000) {
      await idle(t.clock, 2); // the keeper and the heartbeat asleep: the last renewal is done
      t.clock.advance(2_000);
    }
    await idle(t.clock, 2);
    expect(held.lost.aborted).toBe(false);
    const now = (await s.leases.getLease({ name: "repo/main" })).lease!;
    expect(now.fencingToken).toBe(held.token);
    expect(Number(now.expiresAt!.seconds) * 1000).toBeGreaterThan(t.clock.now());
    // close releases the lease and unregisters the agent.
    const observer = await open(t, "observer");
    await s.close();
    expect((await observer.leases.getLease({ name: "repo/main" }).catch((e: unknown) => HubError.from(e))) instanceof HubError).toBe(true);
    const agents = (await observer.presence.listAgents({ includeOffline: true })).agents;
    expect(agents.find((a) => a.id === s.agent.id)?.online).toBe(false);
  });

  it("signals loss when the hub says the lease was superseded", async () => {
    await using t = await startTestHub();
    const late = new FakeClock(t.clock.now()); // this process's timers, running late against the hub's
    const a = await open(t, "alpha", { clock: late });
    const b = await open(t, "beta");
    const held = await a.acquire("db", { ttlMs: 5_000 });
    t.clock.advance(5_001);
    const taken = await b.acquire("db", { ttlMs: 5_000 });
    expect(taken.token).toBe(held.token + 1n);
    late.advance(5_000 / 3); // the keeper renews: the hub refuses
    await new Promise<void>((resolve) => held.lost.addEventListener("abort", () => resolve(), { once: true }));
    const reason = held.lost.reason as HubError;
    expect(reason).toBeInstanceOf(HubError);
    expect(reason.code).toBe("lease_superseded");
    expect(reason.lease?.holderAgentName).toBe("beta");
    expect(() => held.check()).toThrow(HubError);
  });

  it("hands a lease over to 5 waiters in the order they came, one AcquireLease call each", async () => {
    await using t = await startTestHub();
    const holder = await open(t, "holder");
    const first = await holder.acquire("deploy", { ttlMs: 30_000 });
    const { calls, transport } = counted();
    const waiters: Session[] = [];
    const got: Promise<Awaited<ReturnType<Session["acquire"]>>>[] = [];
    for (let i = 0; i < 5; i++) {
      const w = await open(t, `waiter-${i}`, { transport: transport(t.baseUrl) });
      waiters.push(w);
      got.push(w.acquire("deploy", { ttlMs: 30_000, waitMs: 120_000 }));
      await idle(t.clock, 2 + 2 * (i + 1)); // holder: heartbeat + keeper; each waiter: heartbeat + its wait
    }
    await first.release();
    let token = first.token;
    for (let i = 0; i < 5; i++) {
      const held = await got[i]!;
      expect([held.lease.holderAgentName, held.token]).toEqual([`waiter-${i}`, token + 1n]);
      token = held.token;
      await held.release();
    }
    expect(calls.get("AcquireLease")).toBe(5);
  });

  /**
   * A holder's lease handed to a waiter whose blocking acquire never sees the grant: the hub's
   * answer to the waiter's first AcquireLease reaches the hub's side of the wire and no further,
   * and the call ends only when its caller gives up, as when a grant crosses a cancellation.
   * Returns once the grant is sent; `lookHeld` holds the waiter's GetLease calls until it settles.
   */
  async function grantNeverSeen(t: TestHub, lookHeld?: Promise<void>) {
    const holder = await open(t, "holder");
    const first = await holder.acquire("deploy", { ttlMs: 30_000 });
    const sent = new Map<string, number>();
    let answered: (() => void) | undefined;
    const grantSent = new Promise<void>((resolve) => (answered = resolve));
    const lose: Interceptor = (next) => async (req) => {
      sent.set(req.method.name, (sent.get(req.method.name) ?? 0) + 1);
      if (req.method.name === "GetLease") await lookHeld;
      const res = await next(req);
      if (req.method.name !== "AcquireLease" || !answered) return res;
      answered();
      answered = undefined;
      return new Promise<never>((_, reject) =>
        req.signal.addEventListener("abort", () => reject(new ConnectError("the caller gave up", Code.Canceled)), { once: true }),
      );
    };
    const waiter = await open(t, "waiter", { transport: (i) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2", interceptors: [lose, ...i] }) });
    const giveUp = new AbortController();
    const waiting = waiter.acquire("deploy", { ttlMs: 30_000, waitMs: 120_000, signal: giveUp.signal });
    waiting.catch(() => undefined); // looked at by the test; a failed test must not leave it unhandled
    await idle(t.clock, 4); // holder: heartbeat + keeper; waiter: heartbeat + its wait
    await first.release();
    await grantSent;
    return { holder, first, waiter, waiting, giveUp, sent };
  }

  it("releases a lease granted to an acquire whose answer never came (cancelled while the grant was on its way)", async () => {
    await using t = await startTestHub();
    const { holder, first, waiter, waiting, giveUp } = await grantNeverSeen(t);
    expect((await holder.leases.getLease({ name: "deploy" })).lease).toMatchObject({ holderAgentName: "waiter", fencingToken: first.token + 1n });
    giveUp.abort();
    await expect(waiting).rejects.toMatchObject({ code: "cancelled" });
    // The session looked the lease up and released the grant it never saw: its next acquire is a
    // grant of its own (not "already held by this agent"), and so is another agent's.
    const again = await waiter.acquire("deploy", { ttlMs: 30_000 }).catch((e: unknown) => e);
    expect(again).toMatchObject({ token: first.token + 2n });
    await (again as Awaited<ReturnType<Session["acquire"]>>).release();
    expect((await holder.acquire("deploy", { ttlMs: 30_000 })).token).toBe(first.token + 3n);
  });

  it("an acquire cancelled while the session still looks at a grant it never saw ends at once, sending nothing", async () => {
    await using t = await startTestHub();
    let openLook!: () => void;
    const lookHeld = new Promise<void>((resolve) => (openLook = resolve));
    const { first, waiter, waiting, giveUp, sent } = await grantNeverSeen(t, lookHeld);
    giveUp.abort();
    await expect(waiting).rejects.toMatchObject({ code: "cancelled" });
    // The look is held; an acquire cancelled meanwhile ends without waiting for it or sending.
    const again = new AbortController();
    const cancelled = waiter.acquire("deploy", { ttlMs: 30_000, signal: again.signal });
    cancelled.catch(() => undefined);
    again.abort();
    await expect(cancelled).rejects.toMatchObject({ code: "cancelled" });
    expect(sent.get("AcquireLease")).toBe(1);
    openLook();
    expect((await waiter.acquire("deploy", { ttlMs: 30_000 })).token).toBe(first.token + 2n);
  });

  it("releases a grant whose answer never came once another acquire of the name, in flight meanwhile, ends without the lease", async () => {
    await using t = await startTestHub();
    const holder = await open(t, "holder");
    const first = await holder.acquire("deploy", { ttlMs: 30_000 });
    // The waiter's first AcquireLease (A) is granted, its answer lost; its second (B, no wait)
    // is answered lease_held, the answer held back until the test lets it through.
    let calls = 0;
    let aGranted!: () => void;
    const granted = new Promise<void>((resolve) => (aGranted = resolve));
    let bArrived!: () => void;
    const arrived = new Promise<void>((resolve) => (bArrived = resolve));
    let bGoes!: () => void;
    const goes = new Promise<void>((resolve) => (bGoes = resolve));
    const gate: Interceptor = (next) => async (req) => {
      if (req.method.name !== "AcquireLease") return next(req);
      if (++calls === 2) {
        try {
          return await next(req);
        } finally {
          bArrived();
          await goes;
        }
      }
      await next(req);
      aGranted();
      return new Promise<never>((_, reject) =>
        req.signal.addEventListener("abort", () => reject(new ConnectError("the caller gave up", Code.Canceled)), { once: true }),
      );
    };
    const waiter = await open(t, "waiter", { transport: (i) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2", interceptors: [gate, ...i] }) });
    const giveUp = new AbortController();
    const a = waiter.acquire("deploy", { ttlMs: 30_000, waitMs: 120_000, signal: giveUp.signal });
    a.catch(() => undefined);
    await idle(t.clock, 4); // holder: heartbeat + keeper; waiter: heartbeat + A's wait
    const b = waiter.acquire("deploy", { ttlMs: 30_000 });
    b.catch(() => undefined);
    await arrived;
    await first.release();
    await granted;
    giveUp.abort();
    await expect(a).rejects.toMatchObject({ code: "cancelled" });
    bGoes();
    await expect(b).rejects.toMatchObject({ code: "lease_held" });
    // The look, put off while B was in flight, released A's grant: another agent gets the lease
    // (skipped, the grant stayed the waiter's, renewed and released by nobody, until its TTL).
    let next: Awaited<ReturnType<Session["acquire"]>> | undefined;
    await eventually(async () => {
      next = await holder.acquire("deploy", { ttlMs: 30_000 }).catch(() => undefined);
      return next !== undefined;
    }, "another agent granted the lease");
    expect(next!.token).toBe(first.token + 2n);
  });

  it("signals the session lost when the hub refuses the agent's heartbeat", async () => {
    await using t = await startTestHub();
    const s = await open(t, "ghost", { heartbeatMs: 10_000 });
    await s.presence.unregisterAgent({ agentId: s.agent.id }); // rotates the key this session holds away
    await idle(t.clock);
    t.clock.advance(10_000);
    await new Promise<void>((resolve) => s.lost.addEventListener("abort", () => resolve(), { once: true }));
    expect((s.lost.reason as HubError).code).toBe("invalid_agent_identity");
  });

  it("checks a fencing token for a guarded resource, as the agent and with a client of no agent", async () => {
    await using t = await startTestHub();
    const s = await open(t, "writer");
    const held = await s.acquire("deploy/prod", { ttlMs: 6_000 });
    expect(await s.checkFence("deploy/prod", held.token)).toEqual({ valid: true, reason: "current", lease: expect.objectContaining({ fencingToken: held.token, holderAgentName: "writer" }) });
    // A resource is not an agent: a plain client naming the project (a loopback hub without tokens).
    const resource = createClient(LeaseService, createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1" }));
    expect(await checkFence(resource, "deploy/prod", held.token + 1n, { project: "p" })).toEqual({ valid: false, reason: "unknown" });
    await held.release();
    expect(await checkFence(resource, "deploy/prod", held.token, { project: "p" })).toEqual({ valid: false, reason: "released" });
    await expect(s.checkFence("deploy/prod", 0)).rejects.toMatchObject({ name: "HubError", code: "protocol_error" });
    await s.close();
  });

  it("refuses with a typed lease_held that carries the holder's lease", async () => {
    await using t = await startTestHub();
    const a = await open(t, "alpha");
    const b = await open(t, "beta");
    const held = await a.acquire("db");
    const e = await b.acquire("db").catch((x: unknown) => x);
    expect(e).toBeInstanceOf(HubError);
    expect(e).toMatchObject({ code: "lease_held", metadata: { holderAgentName: "alpha" }, transient: false });
    expect((e as HubError).lease?.fencingToken).toBe(held.token);
  });

  it("counts the first renewal from the grant, not from the answer: an answer that took half the TTL is renewed at once", async () => {
    await using t = await startTestHub();
    // The answer to AcquireLease arrives 3 s (hub and library clock) after it was sent.
    const slow: Interceptor = (next) => async (req) => {
      const res = await next(req);
      if (req.method.name === "AcquireLease") t.clock.advance(3_000);
      return res;
    };
    const { calls, transport } = counted();
    const s = await open(t, "slow", { transport: (interceptors) => transport(t.baseUrl)([slow, ...interceptors]) });
    const held = await s.acquire("res", { ttlMs: 6_000 });
    // Past grant + TTL/3 already: the keeper's renewal is due now, not another TTL/3 later.
    await idle(t.clock, 2);
    t.clock.advance(0);
    await idle(t.clock, 2);
    expect(calls.get("RenewLease")).toBe(1);
    t.clock.advance(2_000);
    await idle(t.clock, 2);
    expect(calls.get("RenewLease")).toBe(2);
    expect(held.lost.aborted).toBe(false);
  });

  it("waits out a rate limit's retryAfterMs before renewing again, and keeps the lease", async () => {
    // One call per agent and 20 s window: the acquire at 0 s uses it, so the renewal at 10 s is
    // refused with retryAfterMs = 10 s; retrying each second until then would only be refused.
    await using t = await startTestHub({ config: { rateLimit: { windowMs: 20_000, maxRequests: 1 } } });
    const { calls, transport } = counted();
    const s = await open(t, "patient", { transport: transport(t.baseUrl) });
    const held = await s.acquire("res", { ttlMs: 30_000 });
    const renewals = () => calls.get("RenewLease") ?? 0;
    for (let elapsed = 0; elapsed < 19_000; elapsed += 1_000) {
      await idle(t.clock, 2);
      t.clock.advance(1_000);
    }
    await idle(t.clock, 2);
    expect(renewals()).toBe(1); // the refused one at 10 s, none since
    t.clock.advance(1_000); // 20 s: a new window
    await until(() => renewals() === 2);
    await idle(t.clock, 2);
    expect(held.lost.aborted).toBe(false);
    // Renewed now, at 20 s (this window's one call): the hub's lease runs a TTL from now.
    expect(Number(held.lease.expiresAt!.seconds)).toBe(Math.floor((t.clock.now() + 30_000) / 1000));
  });

  it("loses what it holds with the session when the hub refuses its agent for good (taken over), not at the next renewal", async () => {
    await using t = await startTestHub();
    const old = await open(t, "builder", { heartbeatMs: 10_000 });
    const held = await old.acquire("repo/main", { ttlMs: 300_000 }); // next renewal in 100 s
    await open(t, "builder", { takeover: true });
    const other = await open(t, "other");
    await other.acquire("repo/main", { ttlMs: 300_000 });
    await idle(t.clock, 2);
    t.clock.advance(10_000); // the old instance's heartbeat is refused
    await until(() => old.lost.aborted, "the old session's loss");
    expect(old.lost.reason).toMatchObject({ code: "invalid_agent_identity" });
    expect(held.lost.aborted).toBe(true);
    expect(held.lost.reason).toMatchObject({ code: "invalid_agent_identity" });
    expect(() => held.check()).toThrow();
  });

  it("refuses a second acquire of a lease the agent holds with lease_held: one token, one holder", async () => {
    await using t = await startTestHub();
    const a = await open(t, "alpha");
    const held = await a.acquire("db");
    for (const o of [{}, { waitMs: 10_000 }]) {
      const e = await a.acquire("db", o).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(HubError);
      expect(e).toMatchObject({ code: "lease_held", transient: false });
      expect((e as HubError).lease?.fencingToken).toBe(held.token);
    }
    // The first holder still holds it, and once it releases, another agent gets the next token.
    expect(held.lost.aborted).toBe(false);
    await held.release();
    const b = await open(t, "beta");
    expect((await b.acquire("db")).token).toBe(held.token + 1n);
  });
});

describe("TypeScript library: a hub that goes away", () => {
  async function hubProcess(port: number, dataPath: string) {
    return serveCli(["--port", String(port), "--data-path", dataPath, "--log-path", "-"]);
  }

  it("keeps the lease through a SIGKILL and restart shorter than the TTL; signals loss before the TTL ends when the outage is longer", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-lib-"));
    const port = await freePort();
    const dataPath = path.join(dir, "kxm.db");
    let hub = await hubProcess(port, dataPath);
    try {
      const s = await connect({ url: hub.url, project: "p", name: "survivor", heartbeatMs: 60_000 });
      const ttlMs = 6_000;
      const held = await s.acquire("db", { ttlMs });

      // Short: down for about a second, then back on the same file and port.
      hub.child.kill("SIGKILL");
      await new Promise((r) => hub.child.once("close", r));
      await new Promise((r) => setTimeout(r, 1_000));
      hub = await hubProcess(port, dataPath);
      await new Promise((r) => setTimeout(r, ttlMs));
      expect(held.lost.aborted).toBe(false);
      expect((await s.leases.getLease({ name: "db" })).lease?.fencingToken).toBe(held.token);

      // Long: down for good. The loss comes before the lease, as the hub last confirmed it, ends.
      hub.child.kill("SIGKILL");
      await new Promise<void>((resolve) => held.lost.addEventListener("abort", () => resolve(), { once: true }));
      const lostAt = Date.now();
      expect((held.lost.reason as HubError).code).toBe("lease_unconfirmed");
      const expiresAt = Number(held.lease.expiresAt!.seconds) * 1000 + Math.floor(held.lease.expiresAt!.nanos / 1e6);
      expect(lostAt).toBeLessThan(expiresAt);
    } finally {
      hub.child.kill("SIGKILL");
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("TypeScript library: inbox", () => {
  it("loses and repeats nothing across a hub restart and a forced subscriber_too_slow", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-lib-inbox-"));
    const port = await freePort();
    const clock = new FakeClock();
    const config = { port, dataPath: path.join(dir, "kxm.db"), streamMaxLag: 4 };
    try {
      let t = await startTestHub({ clock, config });
      const sender = await open(t, "sender");
      const { calls, transport } = counted();
      const reader = await open(t, "reader", { transport: transport(t.baseUrl) });
      const seen: string[] = [];
      const ac = new AbortController();
      const it = reader.inbox({ signal: ac.signal })[Symbol.asyncIterator]();
      const next = async () => {
        const r = await it.next();
        if (r.done) throw new Error("inbox ended");
        seen.push(r.value.message.content.slice(0, 11));
        return r.value;
      };
      // Random text: the hub compresses frames, so repeated characters would fill no buffer.
      const big = (i: number) => `message ${String(i).padStart(3, "0")} ${randomBytes(15_000).toString("base64")}`;

      await sender.send("reader", big(0));
      await next();
      // The reader stops reading while 60 large messages arrive: HTTP/2 flow control holds the
      // hub's writes, the stream falls more than 4 events behind and is cut off; the inbox
      // resumes where the hub says.
      for (let i = 1; i <= 60; i++) await sender.send("reader", big(i));
      for (let i = 1; i <= 60; i++) await next();
      expect(calls.get("Subscribe")).toBeGreaterThan(1); // it was cut off, and resumed

      // The hub restarts on the same file and port.
      await t.close();
      t = await startTestHub({ clock, config });
      const subscribes = calls.get("Subscribe")!;
      // The restarted hub has every agent offline until it calls: the inbox reconnecting (its
      // back-off runs on the shared clock) brings the reader back online.
      const reconnected = next();
      for (let i = 0; i < 200 && calls.get("Subscribe") === subscribes; i++) {
        clock.advance(5_000);
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(calls.get("Subscribe")).toBeGreaterThan(subscribes);
      for (let i = 0; i < 200 && !(await t.sql("SELECT online FROM agents WHERE name = 'reader'"))[0]?.online; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      for (let i = 61; i <= 65; i++) await sender.send("reader", big(i));
      await reconnected;
      for (let i = 62; i <= 65; i++) await next();

      expect(seen).toEqual(Array.from({ length: 66 }, (_, i) => `message ${String(i).padStart(3, "0")}`));
      ac.abort();
      await t.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
