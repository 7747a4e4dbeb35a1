import v8 from "node:v8";
import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { InFlight, type InFlightEntry } from "../../src/in-flight.js";
import { exposedGc } from "./support.js";

// Any order of additions and deletions (a deletion repeated, or of an entry long gone, included):
// the registry holds what a list of the live values would, oldest first.
test.prop([fc.array(fc.oneof(fc.constant("add" as const), fc.nat({ max: 60 })), { maxLength: 200 })])(
  "holds exactly the values added and not yet deleted, oldest first",
  (ops) => {
    const registry = new InFlight<number>();
    const entries: InFlightEntry[] = [];
    const live: number[] = [];
    let next = 0;
    for (const op of ops) {
      if (op === "add") {
        entries.push(registry.add(next));
        live.push(next++);
      } else if (entries.length > 0) {
        const i = op % entries.length;
        registry.delete(entries[i]!);
        const at = live.indexOf(i);
        if (at >= 0) live.splice(at, 1);
      }
      expect(registry.size).toBe(live.length);
    }
    expect(registry.values()).toEqual(live);
  },
);

describe("InFlight under V8's young generation (D88)", () => {
  const gc = exposedGc();
  const oldSpaceUsed = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === "old_space")!.space_used_size;

  /**
   * Bytes the old generation grew by while 6,000 values of about 1 KB each (from `make`) passed
   * through a registry eight at a time (as requests through a server), the registry itself old by
   * then. The young collections come at a fixed pace, whatever the size this process's young
   * generation has grown to, and now and then two come together, so that the values in flight
   * then grow old before they end, as a slow call's do. Each caller makes its values at its own
   * allocation site: V8 allocates in the old generation straight away from a site whose values
   * it saw survive.
   */
  function promotedThrough(registry: { add(v: object): unknown; remove(handle: unknown): void }, make: (i: number) => object): number {
    registry.remove(registry.add({ seed: true }));
    gc({ type: "major" });
    gc({ type: "major" });
    const before = oldSpaceUsed();
    const window: unknown[] = [];
    for (let i = 1; i <= 6_000; i++) {
      window.push(registry.add(make(i)));
      if (window.length > 8) registry.remove(window.shift());
      if (i % 300 === 0) gc({ type: "minor" });
      if (i % 1_500 === 0) gc({ type: "minor" });
    }
    for (const handle of window.splice(0)) registry.remove(handle);
    gc({ type: "minor" });
    gc({ type: "minor" });
    return oldSpaceUsed() - before;
  }

  it("promotes nothing of what passed through, where a Set promotes all of it", () => {
    const inFlight = new InFlight<object>();
    const viaInFlight = promotedThrough(
      { add: (v) => inFlight.add(v), remove: (entry) => inFlight.delete(entry as InFlightEntry) },
      (i) => ({ i, payload: new Array(120).fill(i) }),
    );
    const set = new Set<object>();
    const viaSet = promotedThrough(
      { add: (v) => (set.add(v), v), remove: (v) => set.delete(v as object) },
      (i) => ({ i, payload: new Array(120).fill(i) }),
    );
    // The Set is the control: if this V8 no longer keeps what its replaced tables held, the test
    // says nothing about InFlight, and D88's reason is gone.
    expect(viaSet, "a Set that values pass through promotes them").toBeGreaterThan(3_000_000);
    expect(viaInFlight).toBeLessThan(500_000);
  });
});
