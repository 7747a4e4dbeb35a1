import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ChildHubs } from "../fixtures/child-hub.js";
import { afterEach, describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { expectRestOk, type Json } from "../fixtures/rest.js";
import { syncEvent } from "./fixtures.js";

/**
 * Sync events survive a restart and a SIGKILL: every event answered `accepted` is on disk, so
 * pushing it again answers `duplicate` (the runtime's retry after a crash stores nothing twice
 * and loses nothing). Each batch is one transaction committed before the answer is written.
 */

const RT = "rtm_runtime0001";
const PRJ = "prj_project0001";
const tokens = { p: "tok-p", q: "tok-q" };

const tempDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "kxm-sync-"));
const body = (events: unknown[], runtimeId = RT, project = "p") => ({ project, runtimeId, events });
const outcomes = (b: Json) => b.results.map((r: Json) => r.code ?? r.outcome);

describe("sync events across a restart", () => {
  it("keeps events, cursors, project owners and home runtimes", async () => {
    const dir = tempDir();
    const config = { dataPath: path.join(dir, "state", "kxm.db"), projectTokens: tokens };
    const push = async (t: TestHub, events: unknown[], runtimeId = RT, project: "p" | "q" = "p") =>
      expectRestOk(await t.rest("/v1/sync/events", { headers: { authorization: `Bearer ${tokens[project]}` }, json: body(events, runtimeId, project) }));
    const seq = (sequence: number, over: Record<string, unknown> = {}) => syncEvent({ sequence, ...over });
    try {
      {
        await using t = await startTestHub({ config });
        expect(outcomes(await push(t, [seq(1), seq(2), seq(4)]))).toEqual(["accepted", "accepted", "accepted"]);
      }
      await using t = await startTestHub({ config });
      const again = await push(t, [seq(1), seq(2), seq(4), seq(2, { payload: { status: "failed" } })]);
      expect(outcomes(again)).toEqual(["duplicate", "duplicate", "duplicate", "sync_sequence_reused"]);
      expect(again.cursors).toEqual([{ projectId: PRJ, runId: "run_run0000001", cursor: 2 }]);
      const cursor = await t.rest(`/v1/sync/runs/${PRJ}/run_run0000001/cursor?project=p`, { headers: { authorization: "Bearer tok-p" } });
      expect((await expectRestOk(cursor)).cursor.cursor).toBe(2);
      expect((await push(t, [seq(3)])).cursors[0].cursor).toBe(4);
      expect(outcomes(await push(t, [seq(5)], RT, "q"))).toEqual(["sync_project_mismatch"]);
      expect(outcomes(await push(t, [seq(5, { homeRuntimeId: "rtm_runtime0002" })], "rtm_runtime0002"))).toEqual([
        "sync_home_runtime_mismatch",
      ]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

/** Starts a hub process on the data file; resolves with its URL. */
const startChild = (dir: string, dataPath: string) => hubs.start(dir, dataPath, { KXM_PROJECT_TOKENS: JSON.stringify(tokens) });

const WORKERS = 6;
const BATCH = 5;
const BATCHES_BEFORE_KILL = 40;
const runOf = (w: number) => `run_worker0000${w}`;
const batchOf = (w: number, b: number) =>
  Array.from({ length: BATCH }, (_, i) => syncEvent({ runId: runOf(w), sequence: b * BATCH + i + 1, payload: { status: "running", summary: `w${w} b${b} e${i}` } }));

async function pushTo(url: string, events: unknown[]): Promise<Json> {
  const res = await fetch(`${url}/v1/sync/events`, {
    method: "POST",
    headers: { authorization: "Bearer tok-p", "content-type": "application/json" },
    body: JSON.stringify(body(events)),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Json;
}

describe("sync events across a SIGKILL", () => {
  it("answers duplicate after the restart for every event answered accepted before the kill", async () => {
    const dir = tempDir();
    const dataPath = path.join(dir, "state", "kxm.db");
    try {
      const first = await startChild(dir, dataPath);
      /** Per worker: how many batches were answered (all accepted), and how many were sent. */
      const answered = Array<number>(WORKERS).fill(0);
      const sent = Array<number>(WORKERS).fill(0);
      let total = 0;
      let killed = false;
      await Promise.all(
        Array.from({ length: WORKERS }, async (_, w) => {
          for (let b = 0; !killed; b++) {
            sent[w] = b + 1;
            let res: Json;
            try {
              res = await pushTo(first.url, batchOf(w, b));
            } catch (e) {
              if (e instanceof TypeError) return; // the hub is gone
              throw e;
            }
            expect(outcomes(res)).toEqual(Array(BATCH).fill("accepted"));
            answered[w] = b + 1;
            if (++total >= BATCHES_BEFORE_KILL && !killed) killed = first.child.kill("SIGKILL"); // others are in flight
          }
        }),
      );
      await first.exited;
      expect(first.child.signalCode).toBe("SIGKILL");
      expect(total).toBeGreaterThanOrEqual(BATCHES_BEFORE_KILL);

      const second = await startChild(dir, dataPath);
      for (let w = 0; w < WORKERS; w++) {
        for (let b = 0; b < sent[w]!; b++) {
          const res = await pushTo(second.url, batchOf(w, b));
          // answered before the kill: stored; in flight at the kill: stored or not, never half
          if (b < answered[w]!) expect(outcomes(res), `worker ${w} batch ${b}`).toEqual(Array(BATCH).fill("duplicate"));
          else expect([Array(BATCH).fill("duplicate"), Array(BATCH).fill("accepted")]).toContainEqual(outcomes(res));
        }
        const cursor = await fetch(`${second.url}/v1/sync/runs/${PRJ}/${runOf(w)}/cursor?project=p`, { headers: { authorization: "Bearer tok-p" } });
        expect(((await cursor.json()) as Json).cursor.cursor).toBe(sent[w]! * BATCH);
      }
      second.child.kill("SIGTERM");
      await second.exited;
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
