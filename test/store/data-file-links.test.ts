import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ChildHubs } from "../fixtures/child-hub.js";

/**
 * docs/operations.md, "One process per data file": "A second hub on the same file is refused at
 * once with runtime_store_locked". The lock is a companion file named after the data *path*
 * (`<path>.lock`), and SQLite names the WAL after the path too; a second name for the same file
 * (a hard link, e.g. a state directory reached through a second, hard-linked name, or a bind
 * mount) gives a second lock file and a second WAL, so two hubs serve one database, each blind
 * to the other's commits.
 */

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

async function post(url: string, p: string, headers: Record<string, string>, json: unknown) {
  const res = await fetch(`${url}${p}`, { method: "POST", headers: { ...headers, "content-type": "application/json" }, body: JSON.stringify(json) });
  return { status: res.status, body: (await res.json().catch(() => undefined)) as Record<string, any> | undefined };
}

describe("one process per data file", () => {
  // The lock and the WAL are named after the path: a second name (a hard link) would get its own,
  // and two hubs would hand out one token twice. A data file of several names is refused.
  it("a second hub on another name of the same file (a hard link) is refused", async ({ onTestFinished }) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-link-"));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    const dataPath = path.join(dir, "a", "kxm.db");
    const first = await hubs.start(dir, dataPath);
    fs.mkdirSync(path.join(dir, "b"));
    const otherName = path.join(dir, "b", "kxm.db");
    fs.linkSync(dataPath, otherName); // the same inode
    expect(fs.statSync(otherName).ino).toBe(fs.statSync(dataPath).ino);

    let second: Awaited<ReturnType<typeof hubs.start>> | undefined;
    let refusal = "";
    try {
      second = await hubs.start(dir, otherName, { KXM_LOG_PATH: path.join(dir, "hub-b.jsonl") });
    } catch (e) {
      refusal = (e as Error).message;
    }
    if (second) {
      // Both serve the same database: the same resource is granted by both, to two holders.
      const tokens: number[] = [];
      for (const [i, url] of [first.url, second.url].entries()) {
        const reg = await post(url, "/v1/agents/register", {}, { name: `agent-${i}`, project: "p" });
        const h = { "x-kxm-agent-id": reg.body!.agent.id, "x-kxm-agent-key": reg.body!.agentKey };
        const a = await post(url, "/v1/leases/deploy/acquire", h, { ttlMs: 60_000 });
        tokens.push(a.status === 200 ? Number(a.body!.lease.fencingToken) : -a.status);
      }
      expect.fail(`a second hub started on a hard link to the same database; lease 'deploy' was granted by both: tokens ${tokens.join(" and ")}`);
    }
    expect(refusal).toMatch(/runtime_path_invalid: .* must have one name/);
  }, 60_000);
});
