import { describe, expect, it } from "vitest";
import { Checkpointer } from "../../src/store/sqlite/checkpointer.js";

/**
 * A checkpoint worker that cannot start (a thread limit, memory) never fails or holds a batch:
 * the checkpoint ends as failed, what waits on it is answered, the WAL is left to grow, and the
 * next commit that is due asks again (the checkpointer does not stay "in flight" for ever).
 */
describe("a checkpoint worker that cannot start", () => {
  it("fails the checkpoint, not the commit; answers a fold; and is asked for again", async () => {
    let starts = 0;
    const c = new Checkpointer("/nonexistent/kxm.db", undefined, () => {
      starts++;
      throw Object.assign(new Error("uv_thread_create: Resource temporarily unavailable"), { code: "ERR_WORKER_INIT_FAILED" });
    });
    for (let i = 0; i < 2_000; i++) c.committed(); // never throws, whenever a checkpoint comes due
    const afterCommits = starts;
    expect(afterCommits).toBeGreaterThan(1); // asked again after each failure, not stuck
    expect(c.last).toMatchObject({ ok: false });
    await c.fold(); // answered, not left waiting
    expect(starts).toBeGreaterThan(afterCommits);
    await c.close();
  });
});
