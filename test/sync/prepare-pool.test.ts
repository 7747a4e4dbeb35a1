import path from "node:path";
import { Worker } from "node:worker_threads";
import { afterAll, describe, expect, it } from "vitest";
import { fc } from "@fast-check/vitest";
import { createPreparePool } from "../../src/sync/prepare-pool.js";
import { prepareEvent } from "../../src/sync/prepare.js";
import { richPayload, syncEvent, typed } from "./fixtures.js";

/**
 * Pushed events may be checked and hashed on worker threads: every answer must equal
 * `prepareEvent` on the calling thread, for valid events and for anything hostile.
 */

const valid = (i: number) =>
  i % 2 === 0 ? typed("effect.settled", richPayload(), { sequence: i + 1 }) : syncEvent({ sequence: i + 1, sourceEventId: `evt_event${1000 + i}` });

/** JSON values with the keys a hostile client would try. */
const hostile = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    fc.constantFrom(null, true, false, 0, -0, 1e21, 2 ** 53, -1.5, "", "\u2028", "é", "\ud83d\ude00"),
    fc.string(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(fc.oneof(fc.constantFrom("__proto__", "constructor", "toString", "payload", "eventType"), fc.string()), tie("value"), {
      maxKeys: 5,
    }),
  ),
})).value;

describe("the prepare pool", () => {
  const pool = createPreparePool({ threads: 1, minEvents: 1 });
  afterAll(() => pool.close());

  it("answers as the calling thread would, for valid and hostile events", async () => {
    await pool.warm();
    const events: unknown[] = Array.from({ length: 40 }, (_, i) => valid(i));
    // JSON.parse makes `__proto__` an own property, as a REST body would.
    events.push(JSON.parse('{"__proto__": {"eventType": "run.created"}, "schema": "kxm.sync-event.v1"}'));
    expect(await pool.prepare(events)).toEqual(events.map(prepareEvent));
    expect(events.slice(0, 40).every((e) => prepareEvent(e) !== undefined)).toBe(true);

    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(hostile, fc.integer({ min: 0, max: 39 }).map(valid)), { minLength: 1, maxLength: 12 }), async (batch) => {
        expect(await pool.prepare(batch)).toEqual(batch.map(prepareEvent));
      }),
      { numRuns: 200 },
    );
    expect(pool.stats.offloaded).toBeGreaterThan(200);
  });

  it("prepares small batches on the calling thread, and everything with no threads", async () => {
    const few = createPreparePool({ threads: 1, minEvents: 8 });
    const none = createPreparePool({ threads: 0 });
    try {
      const events = [valid(0), valid(1)];
      expect(await few.prepare(events)).toEqual(events.map(prepareEvent));
      expect(await none.prepare(Array.from({ length: 20 }, (_, i) => valid(i)))).toHaveLength(20);
      expect(few.stats).toEqual({ offloaded: 0, inline: 1 });
      expect(none.stats).toEqual({ offloaded: 0, inline: 1 });
    } finally {
      await few.close();
      await none.close();
    }
  });

  it("a batch still on a worker when it stops is prepared on the calling thread", async () => {
    const p = createPreparePool({ threads: 1, minEvents: 1 });
    await p.warm();
    const events = Array.from({ length: 100 }, (_, i) => valid(i));
    const answer = p.prepare(events);
    expect(p.stats.offloaded).toBe(1);
    await p.close();
    expect(await answer).toEqual(events.map(prepareEvent));
    // Closed: the calling thread from now on.
    expect(await p.prepare(events.slice(0, 10))).toHaveLength(10);
    expect(p.stats.inline).toBe(1);
  });
});

describe("the build's worker", () => {
  // The hub runs from its build (scripts/build.mjs; test/fixtures/build.global.ts built it for
  // this run), where the pool starts dist/prepare-worker.mjs rather than the sources' entry.
  it("dist/prepare-worker.mjs starts without a TypeScript loader and answers as prepareEvent does", async () => {
    const worker = new Worker(path.resolve(import.meta.dirname, "../../dist/prepare-worker.mjs"));
    try {
      const messages: unknown[] = [];
      const next = () => new Promise((resolve, reject) => (worker.once("message", resolve), worker.once("error", reject)));
      messages.push(await next());
      const events: unknown[] = [...Array.from({ length: 10 }, (_, i) => valid(i)), { schema: "kxm.sync-event.v1" }];
      worker.postMessage({ id: 7, events });
      messages.push(await next());
      expect(messages).toEqual(["ready", { id: 7, prepared: events.map(prepareEvent) }]);
    } finally {
      await worker.terminate();
    }
  });
});
