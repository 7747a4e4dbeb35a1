import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { merge } from "../../src/events/merge.js";
import { exposedGc } from "./support.js";

/** A source that yields `items`, pausing `pauses[k]` microtask turns before the k-th. */
async function* source<T>(items: T[], pauses: number[]): AsyncGenerator<T> {
  for (let k = 0; k < items.length; k++) {
    for (let p = 0; p < (pauses[k % pauses.length] ?? 0); p++) await Promise.resolve();
    yield items[k]!;
  }
}

async function drain<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const v of it) out.push(v);
  return out;
}

// Whatever pace each source keeps, the merge gives every item once, each source's in its order.
test.prop([fc.array(fc.record({ n: fc.nat({ max: 30 }), pauses: fc.array(fc.nat({ max: 4 }), { minLength: 1, maxLength: 5 }) }), { maxLength: 5 })])(
  "gives every item of every source once, each source's in its own order, and ends when all have",
  async (specs) => {
    const stop = new AbortController();
    const out = await drain(merge(specs.map((s, i) => source(Array.from({ length: s.n }, (_, k) => `${i}:${k}`), s.pauses)), stop));
    expect(out.length).toBe(specs.reduce((a, s) => a + s.n, 0));
    specs.forEach((s, i) => expect(out.filter((v) => v.startsWith(`${i}:`))).toEqual(Array.from({ length: s.n }, (_, k) => `${i}:${k}`)));
    expect(stop.signal.aborted).toBe(true);
  },
);

describe("merge", () => {
  it("fails with the source that fails, aborts stop and closes the others", async () => {
    const stop = new AbortController();
    let closed = false;
    const endless = (async function* () {
      try {
        for (;;) {
          await new Promise((r) => setImmediate(r));
          yield "tick";
        }
      } finally {
        closed = true;
      }
    })();
    const failing = (async function* () {
      yield "one";
      throw new Error("source failed");
    })();
    await expect(drain(merge<string>([endless, failing], stop))).rejects.toThrow("source failed");
    expect(stop.signal.aborted).toBe(true);
    expect(closed).toBe(true);
  });

  it("holds nothing per item of the others while a source stays quiet", async () => {
    const gc = exposedGc();
    let release!: () => void;
    const quiet = (async function* () {
      await new Promise<void>((r) => (release = r));
    })();
    const busy = (async function* () {
      for (let i = 0; i < 100_000; i++) yield i;
    })();
    gc();
    const before = process.memoryUsage().heapUsed;
    let n = 0;
    let grew = 0;
    for await (const _ of merge<number | undefined>([busy, quiet], new AbortController())) {
      if (++n === 100_000) {
        gc();
        grew = process.memoryUsage().heapUsed - before;
        release();
      }
    }
    expect(n).toBe(100_000);
    // Racing the pending results at each item held about 400 bytes an item here (40 MB).
    expect(grew).toBeLessThan(5_000_000);
  });
});
