import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import type { WalSync } from "../../src/store/sqlite/batch.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { until } from "../fixtures/streams.js";

const accept = "application/json, text/event-stream";
const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "probe", version: "0" } } };

async function post(t: TestHub, body: unknown, headers: Record<string, string>) {
  const res = await fetch(`${t.baseUrl}/mcp`, { method: "POST", headers: { "content-type": "application/json", accept, ...headers }, body: JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
}

/**
 * A 2025-era initialize takes its place in the session table (and its project's quarter) before
 * its agent registers: initializes whose registrations overlap cannot open more than there is.
 */
describe("MCP sessions: room under concurrent initializes", () => {
  it("initializes whose registrations overlap get no more than the project's quarter, and another project still gets in", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-mcp-race-"));
    let hold = false;
    const held: (() => void)[] = [];
    const walSync = (): WalSync => ({ sync: () => (hold ? new Promise<void>((r) => held.push(r)) : Promise.resolve()), close: () => {} });
    const store = new SqliteStore({ path: path.join(dir, "kxm.db"), synchronous: "full", walSync });
    let registrations = 0;
    const decideAgentLeases = store.agents.decideAgentLeases.bind(store.agents);
    store.agents.decideAgentLeases = (...args) => {
      registrations++;
      return decideAgentLeases(...args);
    };
    const t = await startTestHub({
      overrides: { store },
      config: { authToken: "admin-secret", projectTokens: { "evil/repo": "evil-token", "good/repo": "good-token" }, mcpMaxSessions: 8 },
    });
    try {
      const evil = { "x-kxm-project": "evil/repo", authorization: "Bearer evil-token" };
      hold = true;
      const statuses: number[] = [];
      const answers = Array.from({ length: 12 }, (_, i) =>
        post(t, init, { ...evil, "x-kxm-agent": `e${i}` }).then((a) => {
          statuses.push(a.status);
          return a;
        }),
      );
      // Let the initializes reach their registration while the first commit is held.
      // Two take the project's two places and register (their commits held); the other ten are refused
      // for room without registering anything.
      await until(() => registrations === 2 && held.length > 0 && statuses.length === 10, "two registrations decided (their commits held), ten refused");
      expect(statuses).toEqual(Array(10).fill(503));
      expect(registrations).toBe(2);
      hold = false;
      for (const release of held.splice(0)) release();
      const opened = (await Promise.all(answers)).filter((a) => a.status === 200).length;
      const good = await post(t, init, { "x-kxm-project": "good/repo", "x-kxm-agent": "worker", authorization: "Bearer good-token" });
      expect({ opened, good: good.status }).toEqual({ opened: 2, good: 200 });
    } finally {
      hold = false;
      for (const release of held.splice(0)) release();
      await t.hub.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
