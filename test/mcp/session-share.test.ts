import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

const accept = "application/json, text/event-stream";
const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "probe", version: "0" } } };

async function post(t: TestHub, body: unknown, headers: Record<string, string>) {
  const res = await fetch(`${t.baseUrl}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept, ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text(), session: res.headers.get("mcp-session-id") };
}

/**
 * One project holds at most a quarter of the hub's MCP sessions: its sessions (with an agent each,
 * or with none yet) never keep another project out of /mcp.
 */
describe("MCP sessions: a project's share of the table", () => {
  it("refuses a project's initialize past a quarter of the table (503), and still serves another project", async () => {
    await using t = await startTestHub({
      config: { authToken: "admin-secret", projectTokens: { "evil/repo": "evil-token", "good/repo": "good-token" }, mcpMaxSessions: 8 },
    });
    const evil = { "x-kxm-project": "evil/repo", authorization: "Bearer evil-token" };
    for (let i = 0; i < 2; i++) expect((await post(t, init, evil)).status).toBe(200);
    const third = await post(t, init, evil);
    expect(third.status).toBe(503);
    expect(JSON.parse(third.text)).toMatchObject({ error: { data: { code: "resource_exhausted" } } });
    expect(await t.sql("SELECT id FROM agents")).toEqual([]);
    const good = await post(t, init, { "x-kxm-project": "good/repo", "x-kxm-agent": "worker", authorization: "Bearer good-token" });
    expect(good.status, good.text).toBe(200);
  });
});
