import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ChildHubs } from "../fixtures/child-hub.js";
import { canMount, fill, mountTmpfs, postPatiently as post } from "../fixtures/tmpfs.js";

/**
 * The data file's disk fills up under a running hub (its log on another disk): a decision that
 * cannot be written is store_unavailable (503, a retry is safe: it was rolled back), as a
 * PostgreSQL hub's unreachable database is, and /ready answers 503 until a write succeeds again.
 * Needs root (a small tmpfs); skipped otherwise.
 */

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

describe.runIf(canMount)("a full data disk (the log elsewhere)", () => {
  it("is reported: /ready 503 and a typed, retry-safe refusal, not 500 internal_error with /ready 200", async () => {
    const disk = mountTmpfs(4096);
    const logDir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-full-log-"));
    try {
      const dataPath = path.join(disk.dir, "state", "kxm.db");
      const hub = await hubs.start(logDir, dataPath); // log: <logDir>/hub.jsonl, another disk
      const reg = await post(hub.url, "/v1/agents/register", {}, { name: "a", project: "p" });
      const headers = { "x-kxm-agent-id": reg.body!.agent.id, "x-kxm-agent-key": reg.body!.agentKey };
      fill(path.join(disk.dir, "filler"));
      // new resources, each a new row: every acquire must write
      const answers: string[] = [];
      for (let i = 0; i < 60 && !answers.some((a) => a.startsWith("500")); i++) {
        const a = await post(hub.url, `/v1/leases/r-${i}/acquire`, headers, { ttlMs: 60_000 });
        answers.push(`${a.status} ${a.body?.code ?? ""}`.trim());
      }
      const ready = await fetch(`${hub.url}/ready`);
      const last = answers[answers.length - 1];
      fs.rmSync(path.join(disk.dir, "filler"));
      expect({ write: last, ready: ready.status }, `answers while full: ${answers.join(", ")}`).toEqual({
        write: "503 store_unavailable",
        ready: 503,
      });
      // Space again: the next decision is written, and the hub is ready.
      expect((await post(hub.url, "/v1/leases/after/acquire", headers, { ttlMs: 60_000 })).status).toBe(200);
      expect((await fetch(`${hub.url}/ready`)).status).toBe(200);
    } finally {
      hubs.killAll();
      disk.umount();
      fs.rmSync(logDir, { recursive: true, force: true });
    }
  }, 120_000);
});
