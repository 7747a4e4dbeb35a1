import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { mcpAgent } from "../fixtures/mcp.js";

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
    // A refusal for room: a server-defined JSON-RPC code, not -32603 (kept for a fault of the hub).
    expect(JSON.parse(third.text)).toMatchObject({ error: { code: -32000, data: { code: "resource_exhausted" } } });
    expect(await t.sql("SELECT id FROM agents")).toEqual([]);
    const good = await post(t, init, { "x-kxm-project": "good/repo", "x-kxm-agent": "worker", authorization: "Bearer good-token" });
    expect(good.status, good.text).toBe(200);
  });

  it("answers a refusal for room with JSON-RPC -32000 and resource_exhausted, as the SDK's client sees it in both eras", async () => {
    await using t = await startTestHub({ config: { mcpMaxSessions: 1 } });
    /** The JSON-RPC error of an SDK client's refusal (SdkHttpError: the HTTP status and the body's text). */
    const refusal = (e: unknown) => {
      const data = (e as { data?: { status?: number; text?: string } }).data;
      return { status: data?.status, error: (JSON.parse(data?.text ?? "{}") as { error?: unknown }).error };
    };
    const expected = { status: 503, error: { code: -32000, data: { code: "resource_exhausted" } } };
    const a = await mcpAgent(t, "a");
    expect(refusal(await mcpAgent(t, "b").catch((e: unknown) => e))).toMatchObject(expected);
    const m = await mcpAgent(t, "m", { era: "modern" });
    await m.call("whoami");
    expect(refusal(await mcpAgent(t, "n", { era: "modern" }).catch((e: unknown) => e))).toMatchObject(expected);
    await Promise.all([a.client.close(), m.client.close()]);
  });
});
