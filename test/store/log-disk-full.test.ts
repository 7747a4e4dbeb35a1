import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ChildHubs } from "../fixtures/child-hub.js";
import { canMount, fill, mountTmpfs, postPatiently as post } from "../fixtures/tmpfs.js";

/**
 * The log file's disk fills up under a running hub (by default the log sits next to the data
 * file): the hub goes on answering, and once space is freed it serves as before. A failed log
 * write was an uncaught error, after which the exit's synchronous flush retried for good: the
 * hub answered nothing, ignored SIGTERM and kept its store locked. Needs root (a small tmpfs);
 * skipped otherwise.
 */
const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

describe.runIf(canMount)("a full disk under a running hub", () => {
  it("keeps answering while the disk is full, and serves again once space is freed", async () => {
    const disk = mountTmpfs(4096);
    try {
      const dataPath = path.join(disk.dir, "state", "kxm.db");
      const hub = await hubs.start(disk.dir, dataPath); // log: <disk>/hub.jsonl
      const reg = await post(hub.url, "/v1/agents/register", {}, { name: "a", project: "p" });
      expect(reg.status).toBe(201);
      const headers = { "x-kxm-agent-id": reg.body!.agent.id, "x-kxm-agent-key": reg.body!.agentKey };
      const answered: number[] = [];
      const a0 = await post(hub.url, "/v1/leases/r/acquire", headers, { ttlMs: 60_000 });
      expect(a0.status).toBe(200);
      answered.push(Number(a0.body!.lease.fencingToken));
      await post(hub.url, "/v1/leases/r/release", headers, { fencingToken: a0.body!.lease.fencingToken });

      fill(path.join(disk.dir, "filler"));
      const statuses: number[] = [];
      for (let i = 0; i < 30 && !statuses.includes(-1); i++) {
        const a = await post(hub.url, `/v1/leases/r/acquire`, headers, { ttlMs: 60_000 });
        statuses.push(a.status);
        if (a.status === 200) {
          answered.push(Number(a.body!.lease.fencingToken));
          statuses.push((await post(hub.url, "/v1/leases/r/release", headers, { fencingToken: a.body!.lease.fencingToken })).status);
        }
      }
      const exitedWhileFull = hub.child.exitCode !== null || hub.child.signalCode !== null;
      // A second hub on the same file: refused only while the first one really serves.
      const second = spawnSync(process.execPath, ["bin/kxm-hub.mjs", "serve"], {
        cwd: path.resolve(import.meta.dirname, "../.."),
        env: { ...process.env, KXM_PORT: "0", KXM_DATA_PATH: dataPath, KXM_LOG_PATH: path.join(os.tmpdir(), `kxm-second-${process.pid}.jsonl`) },
        encoding: "utf8",
        timeout: 15_000,
      });
      fs.rmSync(path.join(disk.dir, "filler"));
      expect(
        { unanswered: statuses.filter((s) => s === -1).length, exitedWhileFull },
        `statuses while full: ${statuses.join(",")}; a second hub: ${second.stderr}`,
      ).toEqual({ unanswered: 0, exitedWhileFull: false });

      const after = await post(hub.url, "/v1/leases/r/acquire", headers, { ttlMs: 60_000 });
      expect(after.status).toBe(200);
      expect(Number(after.body!.lease.fencingToken)).toBeGreaterThan(Math.max(...answered));
    } finally {
      hubs.killAll();
      disk.umount();
    }
  }, 120_000);
});
