import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { mcpAgent } from "../fixtures/mcp.js";

/**
 * docs/agents.md: "One project holds at most a quarter of them ... so that no project's sessions
 * keep every other project out. A 2026-07-28 client (no session) counts the same way". A binding
 * with an open subscriptions/listen stream is busy and never evicted, so the share is what keeps
 * one project's listeners from filling the table; and one client holds at most four listen
 * streams of the SDK's hub-wide count.
 */
const config = { authToken: "admin-secret", projectTokens: { "evil/repo": "evil-token", "good/repo": "good-token" }, mcpMaxSessions: 4 };

describe("MCP 2026-07-28: a project's share of the bindings, a client's listen streams", () => {
  it("one project's listening clients (4 agents) do not keep another project out of /mcp", async () => {
    await using t = await startTestHub({ config });
    const evil = [];
    for (let i = 0; i < 4; i++) {
      const a = await mcpAgent(t, `e${i}`, { era: "modern", project: "evil/repo", token: "evil-token" }).catch(() => undefined);
      if (!a) break;
      const sub = await a.client.listen({ resourceSubscriptions: ["kxm://leases"] }).catch(() => undefined);
      if (!sub) break;
      evil.push({ a, sub });
    }
    // Far past KXM_MCP_SESSION_IDLE_MS with no call made: the listeners are still never idle.
    t.clock.advance(2 * 1_800_000); // twice the default KXM_MCP_SESSION_IDLE_MS
    let outcome: string;
    try {
      const good = await mcpAgent(t, "worker", { era: "modern", project: "good/repo", token: "good-token" });
      outcome = String((await good.call("whoami")).structuredContent?.agent?.name);
      await good.client.close();
    } catch (e) {
      outcome = String(e);
    }
    for (const e of evil) await e.sub.close();
    await Promise.all(evil.map((e) => e.a.client.close()));
    // Fails: "SdkHttpError: Version negotiation failed: the server answered the probe with HTTP 503"
    expect(outcome).toBe("worker");
    // and evil held every place (the quarter would have stopped it at 1)
    expect(evil.length).toBeLessThanOrEqual(1);
  });

  it("one agent's listen streams do not use up every other client's subscriptions/listen", async () => {
    await using t = await startTestHub({ config });
    const e = await mcpAgent(t, "e0", { era: "modern", project: "evil/repo", token: "evil-token" });
    const subs = [];
    for (let i = 0; i < 4; i++) subs.push(await e.client.listen({ resourceSubscriptions: ["kxm://leases"] }));
    const good = await mcpAgent(t, "worker", { era: "modern", project: "good/repo", token: "good-token" });
    const outcome = await good.client.listen({ resourceSubscriptions: ["kxm://leases"] }).then(
      async (s) => {
        await s.close();
        return "listening";
      },
      (err: unknown) => String(err),
    );
    for (const s of subs) await s.close();
    await Promise.all([e.client.close(), good.client.close()]);
    // Fails: "... Subscription limit reached" (JSON-RPC -32603, the code D35 keeps for a fault of the hub)
    expect(outcome).toBe("listening");
  });
});
