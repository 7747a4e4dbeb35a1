import { describe, expect, it } from "vitest";
import { CoalescedReads } from "../../src/store/postgres/coalesce.js";

/**
 * Point reads that arrive together go as one statement (store/postgres/coalesce.ts). The
 * statement is held by hand here, to see which reads each one answers.
 */

/** A `readMany` the test answers by hand; records the keys of every statement. */
function heldReads() {
  const statements: { keys: string[]; answer(rows: Record<string, number>): void; fail(e: Error): void }[] = [];
  const readMany = (keys: string[]) =>
    new Promise<Map<string, number>>((resolve, reject) => {
      statements.push({ keys, answer: (rows) => resolve(new Map(Object.entries(rows))), fail: reject });
    });
  return { statements, readMany };
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("coalesced point reads", () => {
  it("sends the reads of one turn as one statement of distinct keys, and answers each with its row or none", async () => {
    const { statements, readMany } = heldReads();
    const reads = new CoalescedReads(readMany);
    const a = reads.read("a");
    const b = reads.read("b");
    const a2 = reads.read("a");
    const missing = reads.read("zz");
    await turn();
    expect(statements.map((s) => s.keys)).toEqual([["a", "b", "zz"]]);
    statements[0]!.answer({ a: 1, b: 2 });
    expect(await Promise.all([a, b, a2, missing])).toEqual([1, 2, 1, undefined]);
  });

  it("answers a read only with a statement that started after it was asked", async () => {
    const { statements, readMany } = heldReads();
    const reads = new CoalescedReads(readMany);
    const first = reads.read("a");
    await turn();
    // Asked while the first statement runs: that statement must not answer it, even for the same key.
    const again = reads.read("a");
    const other = reads.read("b");
    await turn();
    expect(statements).toHaveLength(1);
    statements[0]!.answer({ a: 1 });
    expect(await first).toBe(1);
    await turn();
    expect(statements.map((s) => s.keys)).toEqual([["a"], ["a", "b"]]);
    statements[1]!.answer({ a: 10, b: 20 });
    expect(await Promise.all([again, other])).toEqual([10, 20]);
  });

  it("fails the reads of a failed statement with its error, and the next statement runs", async () => {
    const { statements, readMany } = heldReads();
    const reads = new CoalescedReads(readMany);
    const a = reads.read("a");
    await turn();
    const b = reads.read("b");
    statements[0]!.fail(new Error("gone"));
    await expect(a).rejects.toThrow("gone");
    await turn();
    expect(statements.map((s) => s.keys)).toEqual([["a"], ["b"]]);
    statements[1]!.answer({ b: 2 });
    expect(await b).toBe(2);
  });

  it("puts at most `max` keys in a statement; the rest go in the next", async () => {
    const { statements, readMany } = heldReads();
    const reads = new CoalescedReads(readMany, 2);
    const all = ["a", "b", "c"].map((k) => reads.read(k));
    await turn();
    expect(statements.map((s) => s.keys)).toEqual([["a", "b"]]);
    statements[0]!.answer({ a: 1, b: 2 });
    await turn();
    expect(statements.map((s) => s.keys)).toEqual([["a", "b"], ["c"]]);
    statements[1]!.answer({ c: 3 });
    expect(await Promise.all(all)).toEqual([1, 2, 3]);
  });

  it("is idle again once nothing is queued: a later read starts a statement of its own", async () => {
    const { statements, readMany } = heldReads();
    const reads = new CoalescedReads(readMany);
    const a = reads.read("a");
    await turn();
    statements[0]!.answer({ a: 1 });
    await a;
    await turn();
    const b = reads.read("b");
    await turn();
    expect(statements.map((s) => s.keys)).toEqual([["a"], ["b"]]);
    statements[1]!.answer({ b: 2 });
    expect(await b).toBe(2);
  });
});
