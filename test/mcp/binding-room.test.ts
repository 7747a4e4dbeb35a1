import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { mcpAgent, tokenOf } from "../fixtures/mcp.js";

/**
 * The 2026-07-28 leg keeps an agent's key in a bounded table of bindings (src/mcp/stateless.ts).
 * Registering again takes the agent over, which releases its leases: so a binding used within the
 * longest lease TTL is neither evicted for another client nor forgotten as idle, one project holds
 * at most a quarter of the table, and one client at most a few listen streams.
 */
describe("MCP 2026-07-28: the bindings' table", () => {
  it("other projects' clients never evict a binding in use: they are refused for room, and the agent keeps its lease", async () => {
    await using t = await startTestHub({ config: { mcpMaxSessions: 3 } });
    const alpha = await mcpAgent(t, "alpha", { era: "modern" });
    const got = await alpha.call("acquire_lease", { name: "db", ttl_ms: 60_000 });
    expect(got.isError).toBeFalsy();
    const x = await mcpAgent(t, "x", { era: "modern", project: "q" });
    await x.call("whoami");
    const y = await mcpAgent(t, "y", { era: "modern", project: "r" });
    await y.call("whoami");
    t.clock.advance(1_000);
    // The table is full of bindings used within the longest lease TTL: a fourth client is refused.
    await expect(mcpAgent(t, "z", { era: "modern", project: "s" }).then((z) => z.call("whoami"))).rejects.toThrow(/503/);
    const renewed = await alpha.call("renew_lease", { name: "db", fencing_token: tokenOf(got), ttl_ms: 60_000 });
    expect(renewed.isError, JSON.stringify(renewed.structuredContent)).toBeFalsy();
    expect(t.events.filter((e) => e.event === "agent_taken_over")).toEqual([]);
    await Promise.all([alpha.client.close(), x.client.close(), y.client.close()]);
  });

  it("a binding idle past KXM_MCP_SESSION_IDLE_MS but within the lease's TTL keeps its agent's lease", async () => {
    await using t = await startTestHub({ config: { mcpSessionIdleMs: 10_000 } });
    const alpha = await mcpAgent(t, "alpha", { era: "modern" });
    const token = tokenOf(await alpha.call("acquire_lease", { name: "db", ttl_ms: 60_000 }));
    t.clock.advance(15_000);
    await t.hub.sweepNow();
    const renewed = await alpha.call("renew_lease", { name: "db", fencing_token: token, ttl_ms: 60_000 });
    expect(renewed.isError, JSON.stringify(renewed.structuredContent)).toBeFalsy();
    await alpha.client.close();
  });
});
