/**
 * A waiting ReadInbox ends early, answering what it has, when its call ends (the client gone) or
 * the hub shuts down, including when that came before the read began: a call made in-process
 * (REST, plain Connect, MCP) carries its client's signal, which may already be aborted (the client
 * left while the call was authenticated), and not the hub's. It waited out its whole waitMs,
 * keeping its agent online, and a shutdown waited for it until the grace ran out.
 */
import { afterEach, describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import type { AgentCaller } from "../../src/caller.js";
import type { InboxNotice } from "../../src/domain.js";
import { createBus } from "../../src/events/bus.js";
import { createInboxReader } from "../../src/peer/inbox-read.js";
import type { Messages } from "../../src/peer/messages.js";
import type { Presence } from "../../src/presence/presence.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { mcpAgent } from "../fixtures/mcp.js";
import { idle, settlesWithin } from "../fixtures/streams.js";

describe("a waiting read handed an ended call or a stopped hub", () => {
  async function reader(shutdown?: AbortSignal) {
    const clock = new FakeClock();
    const store = new SqliteStore({ path: ":memory:", synchronous: "full", clock });
    let activity = 0;
    const readInbox = createInboxReader({
      store,
      clock,
      messages: { expireDue: async () => 0 } as unknown as Messages,
      presence: { requireKey: async () => {}, recordActivity: async () => void activity++ } as unknown as Pick<Presence, "requireKey" | "recordActivity">,
      inboxBus: createBus<InboxNotice>((n) => n.agentId),
      keepAliveMs: 15_000,
      ...(shutdown && { shutdown }),
    });
    const caller: AgentCaller = { kind: "agent", agentId: "agt_reader", agentName: "reader", project: "p" };
    return { clock, store, read: (signal?: AbortSignal) => readInbox(caller, { waitMs: 60_000 }, signal), activity: () => activity };
  }

  it("answers at once when its client was gone before it began, sleeping on nothing and keeping nobody online", async () => {
    const r = await reader();
    try {
      const gone = new AbortController();
      gone.abort("client gone");
      const read = r.read(gone.signal);
      expect({ settled: await settlesWithin(read), sleepers: r.clock.sleepers, activity: r.activity() }).toEqual({ settled: true, sleepers: 0, activity: 0 });
      expect(await read).toEqual({ events: [], nextCursor: 0 });
    } finally {
      await r.store.close();
    }
  });

  it("answers at once when the hub stopped before it began, or stops while it waits", async () => {
    const stopping = new AbortController();
    const r = await reader(stopping.signal);
    try {
      const waiting = r.read(new AbortController().signal);
      await idle(r.clock);
      stopping.abort();
      expect(await settlesWithin(waiting)).toBe(true);
      const late = r.read(new AbortController().signal);
      expect({ settled: await settlesWithin(late), sleepers: r.clock.sleepers }).toEqual({ settled: true, sleepers: 0 });
    } finally {
      await r.store.close();
    }
  });
});

describe("a waiting ReadInbox when the hub shuts down, on every face", () => {
  let hubs: TestHub[] = [];
  afterEach(async () => {
    await Promise.all(hubs.map((h) => h.close()));
    hubs = [];
  });
  async function hub() {
    const t = await startTestHub({ config: { shutdownGraceMs: 1_500 } });
    hubs.push(t);
    return t;
  }
  const forced = (t: TestHub) => t.events.find((e) => e.event === "hub_stopped")?.fields.forced;

  it("over REST it is answered, and the close does not have to force it", async () => {
    const t = await hub();
    const b = await t.register("beta");
    const read = t.rest("/v1/inbox?waitMs=60000", { headers: b.headers }).then(
      (r) => r.status,
      (e: Error) => `failed: ${e.message}`,
    );
    await idle(t.clock);
    await t.close();
    expect({ read: await read, forced: forced(t) }).toEqual({ read: 200, forced: false });
  });

  for (const proto of [protocols[0], protocols.find((p) => p.name.startsWith("grpc "))!]) {
    it(`over ${proto.name} it is answered, and the close does not have to force it`, async () => {
      const t = await hub();
      const b = await t.register("beta");
      const peer = createClient(PeerService, proto.make(t.baseUrl, [withHeaders(b.headers)]));
      const read = peer.readInbox({ waitMs: 60_000 }).then(
        () => "answered",
        (e: Error) => `failed: ${e.message}`,
      );
      await idle(t.clock);
      await t.close();
      expect({ read: await read, forced: forced(t) }).toEqual({ read: "answered", forced: false });
    });
  }

  // The MCP connection itself is still cut at the end of the grace (its session's own close), so
  // only the answer is asserted here.
  it("through MCP's read_inbox it is answered", async () => {
    const t = await hub();
    const beta = await mcpAgent(t, "beta");
    const read = beta.call("read_inbox", { wait_ms: 60_000 }).then(
      (r) => (r.isError ? `error ${String(r.structuredContent?.code)}` : "answered"),
      (e: Error) => `failed: ${e.message}`,
    );
    await idle(t.clock);
    let state = "waiting";
    void read.then((r) => (state = r));
    await t.close();
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    await beta.client.close().catch(() => {});
    expect(state).toBe("answered");
  });
});
