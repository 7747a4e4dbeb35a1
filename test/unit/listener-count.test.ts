import { describe, expect, it } from "vitest";
import { createBus } from "../../src/events/bus.js";
import { ListenerCount } from "../../src/events/listening.js";
import { createInboxReader } from "../../src/peer/inbox-read.js";
import type { Messages } from "../../src/peer/messages.js";
import type { Presence } from "../../src/presence/presence.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import type { AgentCaller } from "../../src/caller.js";
import type { InboxNotice } from "../../src/domain.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { idle } from "../fixtures/streams.js";

/** The count of everyone listening on a hub's buses, which paces the store's tail (postgres/tail.ts). */
describe("ListenerCount over the buses", () => {
  it("counts every subscription of every bus it is given while it lasts, and says when listening starts", () => {
    const count = new ListenerCount();
    let starts = 0;
    const stopWatching = count.onStart(() => starts++);
    const leases = createBus<{ project: string }>((c) => c.project, count);
    const inbox = createBus<{ agentId: string }>((n) => n.agentId, count);
    const uncounted = createBus<{ project: string }>((c) => c.project);
    expect(count.active).toBe(false);

    const offA = leases.subscribe("p", () => {});
    expect([count.active, starts]).toEqual([true, 1]);
    const offB = inbox.subscribe("agt_1", () => {});
    const offC = leases.subscribe("q", () => {});
    expect(starts).toBe(1);
    const offUncounted = uncounted.subscribe("p", () => {});

    offA();
    offA(); // a second call ends nothing more
    offB();
    expect(count.active).toBe(true);
    offC();
    expect(count.active).toBe(false);
    offUncounted();
    expect(count.active).toBe(false);

    // Starting again is a new start; one who stopped watching is not told.
    const offD = inbox.subscribe("agt_2", () => {});
    expect([count.active, starts]).toEqual([true, 2]);
    offD();
    stopWatching();
    inbox.subscribe("agt_3", () => {})();
    expect(starts).toBe(2);
  });
});

describe("ReadInbox and the count", () => {
  it("a read that waits counts while it waits; one that does not wait never counts", async () => {
    const clock = new FakeClock();
    const store = new SqliteStore({ path: ":memory:", synchronous: "full", clock });
    try {
      const count = new ListenerCount();
      let starts = 0;
      count.onStart(() => starts++);
      const inboxBus = createBus<InboxNotice>((n) => n.agentId, count);
      const readInbox = createInboxReader({
        store,
        clock,
        messages: { expireDue: async () => 0 } as unknown as Messages,
        presence: { requireKey: async () => {}, recordActivity: async () => {} } as unknown as Pick<Presence, "requireKey" | "recordActivity">,
        inboxBus,
        keepAliveMs: 15_000,
      });
      const caller = { kind: "agent", agentId: "agt_reader", agentName: "reader", project: "p" } as AgentCaller;
      expect(await readInbox(caller, {})).toEqual({ events: [], nextCursor: 0 });
      expect([starts, count.active]).toEqual([0, false]);
      const waiting = readInbox(caller, { waitMs: 5_000 });
      await idle(clock, 1);
      expect([starts, count.active]).toEqual([1, true]);
      clock.advance(5_000);
      expect(await waiting).toEqual({ events: [], nextCursor: 0 });
      expect(count.active).toBe(false);
    } finally {
      await store.close();
    }
  });
});
