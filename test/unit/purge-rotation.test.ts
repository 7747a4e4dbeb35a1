import { describe, expect, it } from "vitest";
import { purgeRotation } from "../../src/store/change-feed.js";

/** The order a purge visits streams in, call after call (change-feed.ts purgeRotation). */
describe("purgeRotation", () => {
  const s = (project: string, stream: string) => ({ project, stream });
  const names = (hs: { project: string; stream: string }[]) => hs.map((h) => `${h.project}/${h.stream}`);
  const heads = [s("b", "leases"), s("a", "presence"), s("a", "leases"), s("c", "runs")];

  it("starts at the first stream, sorted by project then stream", () => {
    expect(names(purgeRotation().order(heads))).toEqual(["a/leases", "a/presence", "b/leases", "c/runs"]);
  });

  it("starts the next call at the stream the last one stopped in, the streams before it last", () => {
    const r = purgeRotation();
    r.stopped(s("b", "leases"));
    expect(names(r.order(heads))).toEqual(["b/leases", "c/runs", "a/leases", "a/presence"]);
  });

  it("starts after a stream that is gone, and from the first once a call finished", () => {
    const r = purgeRotation();
    r.stopped(s("b", "messages"));
    expect(names(r.order(heads))).toEqual(["c/runs", "a/leases", "a/presence", "b/leases"]);
    r.stopped(s("d", "leases"));
    expect(names(r.order(heads))).toEqual(["a/leases", "a/presence", "b/leases", "c/runs"]);
    r.stopped(undefined);
    expect(names(r.order(heads))).toEqual(["a/leases", "a/presence", "b/leases", "c/runs"]);
  });

  it("does not take a project that ends where another begins for the same key", () => {
    const r = purgeRotation();
    r.stopped(s("a", "leases"));
    expect(names(r.order([s("a/leases", "x"), s("a", "leases")]))[0]).toBe("a/leases");
    expect(r.order([s("a/leases", "x"), s("a", "leases")])[0]).toEqual(s("a", "leases"));
  });
});
