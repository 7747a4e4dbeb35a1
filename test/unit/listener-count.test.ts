import { describe, expect, it } from "vitest";
import { createBus } from "../../src/events/bus.js";
import { ListenerCount } from "../../src/events/listening.js";

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
