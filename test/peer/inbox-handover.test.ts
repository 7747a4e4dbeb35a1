import { describe, expect, it } from "vitest";
import { takeContiguous } from "../../src/events/contiguous.js";
import type { InboxEvent } from "../../src/domain.js";

const ev = (seq: number) => ({ agentId: "a", seq, kind: "message" }) as InboxEvent;
const seqs = (events: InboxEvent[]) => events.map((e) => e.seq);

describe("events handed over by the bus", () => {
  it("are taken only while they continue the stream exactly", () => {
    const handed = [ev(3), ev(4), ev(5), ev(7)];
    expect(seqs(takeContiguous(handed, 2))).toEqual([3, 4, 5]);
    // 6 never arrived: the store must be read; 7 stays until the stream is past it.
    expect(takeContiguous(handed, 5)).toEqual([]);
    expect(seqs(handed)).toEqual([7]);
    expect(seqs(takeContiguous(handed, 6))).toEqual([7]);
    expect(handed).toEqual([]);
  });

  it("drops what the stream already sent (read from the store meanwhile)", () => {
    const handed = [ev(1), ev(2), ev(3), ev(4)];
    expect(seqs(takeContiguous(handed, 2))).toEqual([3, 4]);
    const stale = [ev(1), ev(2)];
    expect(takeContiguous(stale, 9)).toEqual([]);
    expect(stale).toEqual([]);
  });

  it("never takes an event out of order", () => {
    const handed = [ev(5), ev(4)];
    expect(takeContiguous(handed, 3)).toEqual([]);
    expect(seqs(handed)).toEqual([5, 4]);
    expect(seqs(takeContiguous(handed, 4))).toEqual([5]);
  });
});
