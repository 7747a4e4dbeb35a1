import { describe, expect, it } from "vitest";
import { byHomeRuntime } from "../../src/operator/snapshot.js";
import { checkSyncEvent } from "../../src/sync/schema.js";
import { syncEvent } from "../sync/fixtures.js";

/**
 * Two readings of run facts the schema (reference-hub.md §5.3) and the operator's snapshot must
 * get exactly: a `counts` key is an identifier (1..64), and runs are the newest by time.
 */
describe("run facts as the schema and the snapshot read them", () => {
  it("refuses a counts key over 64 characters, as every identifier", () => {
    expect(checkSyncEvent(syncEvent({ payload: { counts: { ["a".repeat(65)]: 1 } } }))).toBeDefined();
    expect(checkSyncEvent(syncEvent({ payload: { counts: { ["a".repeat(64)]: 1 } } }))).toBeUndefined();
  });

  it("lists a runtime's runs newest first by time, whether or not a timestamp has a fraction", () => {
    const run = (runId: string, updatedAt: string) => ({ projectId: "prj_project0001", runId, homeRuntimeId: "rtm_runtime0001", cursor: 1, stored: 1, updatedAt });
    const [rt] = byHomeRuntime([run("run_older00001", "2026-01-01T12:00:00Z"), run("run_newer00001", "2026-01-01T12:00:00.500Z"), run("run_oldest0001", "2026-01-01T11:59:59.999Z")], []);
    expect(rt!.runs.map((r) => r.runId)).toEqual(["run_newer00001", "run_older00001", "run_oldest0001"]);
  });
});
