import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { ChildHubs } from "../fixtures/child-hub.js";
import { serveCli } from "../fixtures/cli.js";
import { tearRootPage } from "../fixtures/torn-page.js";

/**
 * docs/operations.md, "Start-up refusals": `runtime_store_invalid` is "the data file is not a
 * SQLite database (or a damaged one)". A store whose header and schema are intact but one of
 * whose tables is damaged (a torn page, a bad sector) is refused at start, not served with lease
 * calls that answer internal_error.
 */

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

describe("a damaged store", () => {
  it("is refused at start (runtime_store_invalid), not served with internal errors", async ({ onTestFinished }) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-damaged-"));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    const dataPath = path.join(dir, "kxm.db");
    // A store made by the hub itself, stopped cleanly.
    const first = await hubs.start(dir, dataPath);
    first.child.kill("SIGTERM");
    await first.exited;
    // Some leases, so that the table spans several pages.
    const db = new Database(dataPath);
    const put = db.prepare("INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at) VALUES ('p', ?, NULL, NULL, ?, 0, 0)");
    db.transaction(() => {
      for (let i = 0; i < 2000; i++) put.run(`resource-${String(i).padStart(5, "0")}-${"x".repeat(40)}`, i + 1);
    })();
    tearRootPage(db, dataPath, "leases");

    const env = { KXM_PORT: "0", KXM_DATA_PATH: dataPath, KXM_LOG_PATH: path.join(dir, "hub2.jsonl") };
    let served: Awaited<ReturnType<typeof serveCli>> | undefined;
    let refusal = "";
    try {
      served = await serveCli(["serve"], { env });
    } catch (e) {
      refusal = (e as Error).message;
    }
    if (served) {
      onTestFinished(() => void served!.child.kill("SIGKILL"));
      const reg = await fetch(`${served.url}/v1/agents/register`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "a", project: "p" }) });
      const agent = (await reg.json()) as { agent: { id: string }; agentKey: string };
      const res = await fetch(`${served.url}/v1/leases/resource-00007-${"x".repeat(40)}/acquire`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-kxm-agent-id": agent.agent.id, "x-kxm-agent-key": agent.agentKey },
        body: JSON.stringify({ ttlMs: 10_000 }),
      });
      expect.fail(`the hub started on a damaged store; an acquire there answers ${res.status} ${await res.text()}`);
    }
    expect(refusal).toMatch(/kxm-hub: runtime_store_invalid: /);
  }, 60_000);
});
