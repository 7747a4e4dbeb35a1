import { describe, expect, it } from "vitest";
import type { AgentCaller } from "../../src/caller.js";
import type { InboxEvent, InboxNotice, MessageRow } from "../../src/domain.js";
import { createBus } from "../../src/events/bus.js";
import { createInboxStreams, type InboxFrame } from "../../src/peer/inbox-stream.js";
import type { Messages } from "../../src/peer/messages.js";
import type { AgentView, Presence, PresenceChange } from "../../src/presence/presence.js";
import type { MessageStore } from "../../src/store/message-store.js";
import { FakeClock } from "../fixtures/fake-clock.js";

/**
 * A Subscribe stream reads the store only for events the bus announced without handing them
 * over (another hub's, heard from the tail) or that came before it was live. A wake for a peer,
 * or a notice of an event it has already sent (the tail echoes this hub's own events on
 * PostgreSQL), reads nothing: on PostgreSQL each such read was a statement per tail tick per
 * stream.
 */
describe("inbox stream reads", () => {
  const caller = { kind: "agent", agentId: "agt_reader", agentName: "reader", project: "p" } as AgentCaller;
  const view = (id: string) => ({ id, name: id, project: "p" }) as unknown as AgentView;
  const message = (seq: number) => ({ id: `msg_${seq}`, seq, content: `m${seq}` }) as unknown as MessageRow;
  const event = (seq: number): InboxEvent => ({ agentId: caller.agentId, seq, kind: "message", message: message(seq) });

  function setUp(stored: InboxEvent[]) {
    const clock = new FakeClock();
    const reads: number[] = [];
    const store = {
      messages: {
        inboxState: async () => ({ head: 0, ackedCursor: 0, purgedThrough: 0 }),
        pendingMessages: async () => [],
        readInbox: async (_agentId: string, after: number, limit: number) => {
          reads.push(after);
          return stored.filter((e) => e.seq > after).slice(0, limit);
        },
      } as unknown as MessageStore,
    };
    const inboxBus = createBus<InboxNotice>((n) => n.agentId);
    const presenceBus = createBus<PresenceChange>((c) => c.project);
    const open = createInboxStreams({
      store,
      clock,
      messages: { expireDue: async () => 0 } as unknown as Messages,
      presence: {
        requireKey: async () => view(caller.agentId),
        recordActivity: async () => {},
      } as unknown as Presence,
      inboxBus,
      presenceBus,
      keepAliveMs: 15_000,
      maxLag: 1_000,
    });
    const abort = new AbortController();
    const frames = open(caller, undefined, abort.signal);
    const next = async (): Promise<InboxFrame> => (await frames.next()).value as InboxFrame;
    return { reads, inboxBus, presenceBus, next, clock, close: () => abort.abort() };
  }

  it("a peer's change and a notice of an event already sent read nothing; a notice past it reads once", async () => {
    const t = setUp([event(1), event(2)]);
    try {
      expect((await t.next()).kind).toBe("ready");
      const pending = t.next();
      t.presenceBus.publish({ seq: 1, project: "p", agent: view("agt_peer") });
      expect(await pending).toMatchObject({ kind: "presence", agent: { id: "agt_peer" } });

      // This hub's own event, handed over with it, then the same event heard again without it.
      const own = t.next();
      t.inboxBus.publish({ agentId: caller.agentId, seq: 1, event: event(1) });
      expect(await own).toMatchObject({ kind: "event", cursor: 1 });
      const echoed = t.next();
      t.inboxBus.publish({ agentId: caller.agentId, seq: 1 });
      t.presenceBus.publish({ seq: 2, project: "p", agent: view("agt_other") });
      expect(await echoed).toMatchObject({ kind: "presence", agent: { id: "agt_other" } });
      expect(t.reads).toEqual([]);

      // Another hub's event, announced without it: the stream reads it from the store.
      const theirs = t.next();
      t.inboxBus.publish({ agentId: caller.agentId, seq: 2 });
      expect(await theirs).toMatchObject({ kind: "event", cursor: 2, event: { message: { content: "m2" } } });
      expect(t.reads).toEqual([1]);
    } finally {
      t.close();
    }
  });

  it("an announced event the store no longer has (purged while the stream lagged) is read for once, not without end", async () => {
    const stored: InboxEvent[] = [];
    const t = setUp(stored);
    try {
      expect((await t.next()).kind).toBe("ready");
      const gone = t.next();
      gone.catch(() => undefined);
      t.inboxBus.publish({ agentId: caller.agentId, seq: 1 }); // announced, then purged before the read
      await new Promise((r) => setImmediate(r));
      t.clock.advance(15_000);
      expect(await gone).toMatchObject({ kind: "keepAlive", cursor: 0 });
      expect(t.reads).toEqual([0]);
      // What comes after it is read and sent as ever, past the gap.
      stored.push(event(3));
      const after = t.next();
      t.inboxBus.publish({ agentId: caller.agentId, seq: 3 });
      expect(await after).toMatchObject({ kind: "event", cursor: 3 });
      expect(t.reads).toEqual([0, 0]);
    } finally {
      t.close();
    }
  });
});
