import { describe, expect, it } from "vitest";
import { createShutdownSignal } from "../../src/server/shutdown-signal.js";

describe("the shutdown signal", () => {
  it("calls each listener once with the signal as this, with its reason; removed ones are not called", () => {
    const s = createShutdownSignal();
    const seen: unknown[] = [];
    function keep(this: AbortSignal) {
      seen.push(["keep", this.reason, this === s.signal]);
    }
    function gone() {
      seen.push("gone");
    }
    s.signal.addEventListener("abort", keep);
    s.signal.addEventListener("abort", keep); // the same listener twice is one listener
    s.signal.addEventListener("abort", gone);
    s.signal.removeEventListener("abort", gone);
    expect(s.listeners).toBe(1);
    expect(s.signal.aborted).toBe(false);
    s.abort("bye");
    s.abort("again");
    expect(seen).toEqual([["keep", "bye", true]]);
    expect(s.signal.aborted).toBe(true);
    expect(s.signal.reason).toBe("bye");
    expect(() => s.signal.throwIfAborted()).toThrow();
    expect(s.listeners).toBe(0);
  });

  it("adds and removes many listeners (one per open call) and ends with none", () => {
    const s = createShutdownSignal();
    const many = Array.from({ length: 20_000 }, () => () => {});
    for (const fn of many) s.signal.addEventListener("abort", fn);
    for (const fn of many) s.signal.removeEventListener("abort", fn);
    expect(s.listeners).toBe(0);
  });
});
