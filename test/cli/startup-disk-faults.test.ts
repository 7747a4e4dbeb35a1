import { execFileSync } from "node:child_process";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, it } from "vitest";
import { ChildHubs } from "../fixtures/child-hub.js";
import { canMount, fill, mountTmpfs } from "../fixtures/tmpfs.js";
import { expectRefusal, runCli } from "../fixtures/cli.js";

/**
 * docs/operations.md, "Start-up refusals": "A start the hub refuses prints one line
 * `kxm-hub: <code>: <message>` on stderr and exits with 1: no stack trace". A data file on a disk
 * that is full, or on a file system mounted read-only, cannot be served: the start must be refused
 * that way (runtime_path_invalid: "the data path ... cannot be created or opened"), not end in
 * `internal_error` and a stack trace.
 */

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());




/** A store with three registered agents, its hub killed (its WAL left as a crash leaves it). */
async function storeOn(disk: string): Promise<string> {
  const dataPath = path.join(disk, "state", "kxm.db");
  const hub = await hubs.start(disk, dataPath, { KXM_LOG_PATH: path.join(os.tmpdir(), `kxm-faults-${process.pid}.jsonl`) });
  for (const name of ["a", "b", "c"]) {
    const res = await fetch(`${hub.url}/v1/agents/register`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name, project: "p" }) });
    if (res.status !== 201) throw new Error(`register: ${res.status}`);
  }
  hub.child.kill("SIGKILL");
  await hub.exited;
  return dataPath;
}

const start = (dataPath: string) =>
  runCli(["serve"], { env: { KXM_PORT: "0", KXM_DATA_PATH: dataPath, KXM_LOG_PATH: path.join(os.tmpdir(), `kxm-faults-start-${process.pid}.jsonl`) } });

describe.runIf(canMount)("starting on a disk the hub cannot write", () => {
  it("a full disk: one refusal line, no internal_error and no stack trace", async () => {
    const disk = mountTmpfs(4096);
    try {
      const dataPath = await storeOn(disk.dir);
      fill(path.join(disk.dir, "filler"));
      expectRefusal(await start(dataPath), "runtime_path_invalid");
    } finally {
      disk.umount();
    }
  }, 60_000);

  it("a file system mounted read-only: one refusal line, no internal_error and no stack trace", async () => {
    const disk = mountTmpfs(4096);
    try {
      const dataPath = await storeOn(disk.dir);
      execFileSync("mount", ["-o", "remount,ro", disk.dir]);
      expectRefusal(await start(dataPath), "runtime_path_invalid");
    } finally {
      disk.umount();
    }
  }, 60_000);
});
