import { describe, expect, it } from "vitest";
import { createBus } from "../../src/events/bus.js";
import { watch } from "../../src/events/watch.js";
import { HubError } from "../../src/errors.js";
import { FakeClock } from "../fixtures/fake-clock.js";

/**
 * A watch stream's cut-off (src/events/watch.ts), pulled frame by frame as a reader reads: over
 * the wire the transport's buffers read ahead for the client, so only the generator itself shows
 * a reader's pace. A burst larger than the lag is read at the reader's pace; a reader that stays
 * behind for longer than a keep-alive is cut off with its cursor.
 */

interface Change {
  project: string;
  seq: number;
}

function stream(clock: FakeClock) {
  const bus = createBus<Change>((c) => c.project);
  const stored: Change[] = [];
  const ac = new AbortController();
  const frames = watch<object, Change>({
    bus,
    key: "p",
    snapshot: async () => ({ snapshot: {}, cursor: 0 }),
    read: async (after, limit) => ({ changes: stored.filter((c) => c.seq > after).slice(0, limit), head: stored.length }),
    clock,
    keepAliveMs: 5_000,
    maxBuffered: 8,
    signal: ac.signal,
  });
  /** One commit of `n` changes at once (one sweep), told to the bus as the store does. */
  const commit = (n: number) => {
    const made = Array.from({ length: n }, () => ({ project: "p", seq: stored.length + 1 })).map((c, i) => ({ ...c, seq: c.seq + i }));
    stored.push(...made);
    for (const c of made) bus.publish(c);
  };
  return { frames, commit, stop: () => ac.abort() };
}

describe("a watch stream's lag", () => {
  it("hands over a burst larger than the lag whole, to a reader that reads it at once", async () => {
    const clock = new FakeClock();
    const { frames, commit, stop } = stream(clock);
    expect((await frames.next()).value).toMatchObject({ kind: "snapshot", cursor: 0 });
    commit(20);
    const cursors: number[] = [];
    for (let i = 0; i < 20; i++) cursors.push(((await frames.next()).value as { cursor: number }).cursor);
    expect(cursors).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    stop();
    await frames.return(undefined);
  });

  it("cuts off a reader that stays more than the lag behind for longer than a keep-alive, with its cursor", async () => {
    const clock = new FakeClock();
    const { frames, commit } = stream(clock);
    await frames.next();
    commit(20);
    expect(((await frames.next()).value as { cursor: number }).cursor).toBe(1);
    clock.jump(4_000);
    expect(((await frames.next()).value as { cursor: number }).cursor).toBe(2); // behind, not for long yet
    clock.jump(1_001);
    const refused = await frames.next().then(() => undefined, (e: unknown) => e);
    expect(refused).toBeInstanceOf(HubError);
    expect(refused).toMatchObject({ code: "subscriber_too_slow" });
  });

  it("forgets how long a reader was behind once it caught up", async () => {
    const clock = new FakeClock();
    const { frames, commit, stop } = stream(clock);
    await frames.next();
    commit(10);
    for (let i = 0; i < 10; i++) await frames.next(); // caught up
    clock.jump(4_000);
    commit(10);
    await frames.next(); // behind again, from now
    clock.jump(4_000);
    expect(((await frames.next()).value as { cursor: number }).cursor).toBe(12);
    stop();
    await frames.return(undefined);
  });
});
