import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { mcpAgent } from "../fixtures/mcp.js";
import { until } from "../fixtures/streams.js";
import { heldCommits } from "./held-commits.js";

const accept = "application/json, text/event-stream";
const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "probe", version: "0" } } };

async function post(t: TestHub, body: unknown, headers: Record<string, string>) {
  const res = await fetch(`${t.baseUrl}/mcp`, { method: "POST", headers: { "content-type": "application/json", accept, ...headers }, body: JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
}

/**
 * The 2026-07-28 MCP face holds at most `mcpMaxSessions` clients at once (src/mcp/stateless.ts).
 * A client's place is taken before its agent registers: one that finds no room is refused before
 * anything is registered, never after its registration (a takeover, even) has committed.
 */
describe("MCP 2026-07-28: room for clients", () => {
  it("refuses a client for room before its agent registers, while another client's registration is still committing", async () => {
    await using commits = heldCommits();
    const { state } = commits;
    const t = await startTestHub({ overrides: { store: commits.store }, config: { mcpMaxSessions: 1 } });
    try {
      state.hold = true;
      // Alpha's first request registers it; the commit waits for the held WAL sync.
      const alpha = (async () => {
        const a = await mcpAgent(t, "alpha", { era: "modern" });
        const read = a.call("read_inbox", { wait_ms: 60_000 });
        read.catch(() => undefined); // looked at below; a failed test must not leave it unhandled
        return { a, read };
      })();
      alpha.catch(() => undefined);
      await until(() => state.registrations === 1 && state.held.length > 0, "alpha's registration committing");
      // Beta arrives while alpha's registration commits: the one place is alpha's already.
      let betaDone = false;
      const beta = (async () => {
        const b = await mcpAgent(t, "beta", { era: "modern" });
        return b.call("whoami");
      })().then(
        (r) => ({ answered: r }),
        (e: unknown) => ({ refused: String(e) }),
      );
      void beta.then(() => (betaDone = true));
      await until(() => betaDone || state.registrations === 2, "beta refused, or beta registering");
      commits.release();
      const outcome = await beta;
      // Refused at its first request (the client's version probe), for room.
      // Alpha holds the one place, its project's whole share too: beta, of the same project, is refused for it.
      expect(outcome).toMatchObject({ refused: expect.stringMatching(/\b503\b/) });
      const listed = (await (await t.rest("/v1/agents?project=p&includeOffline=true")).json()) as { agents: { name: string }[] };
      expect(listed.agents.map((a) => a.name)).toEqual(["alpha"]);
      // Alpha holds its place and is served: its read ends at its wait, empty.
      const { a, read } = await alpha;
      await until(() => t.clock.sleepers > 0, "alpha's read waiting");
      t.clock.advance(60_000);
      expect((await read).isError).toBeFalsy();
      await a.client.close();
    } finally {
      commits.release();
      await t.hub.close();
    }
  });
});

/**
 * A 2025-era initialize takes its place in the session table (and its project's quarter) before
 * its agent registers: initializes whose registrations overlap cannot open more than there is.
 */
describe("MCP sessions: room under concurrent initializes", () => {
  it("initializes whose registrations overlap get no more than the project's quarter, and another project still gets in", async () => {
    await using commits = heldCommits();
    const { state } = commits;
    const t = await startTestHub({
      overrides: { store: commits.store },
      config: { authToken: "admin-secret", projectTokens: { "evil/repo": "evil-token", "good/repo": "good-token" }, mcpMaxSessions: 8 },
    });
    try {
      const evil = { "x-kxm-project": "evil/repo", authorization: "Bearer evil-token" };
      state.hold = true;
      const statuses: number[] = [];
      const answers = Array.from({ length: 12 }, (_, i) =>
        post(t, init, { ...evil, "x-kxm-agent": `e${i}` }).then((a) => {
          statuses.push(a.status);
          return a;
        }),
      );
      // Two take the project's two places and register (their commits held); the other ten are refused
      // for room without registering anything.
      await until(() => state.registrations === 2 && state.held.length > 0 && statuses.length === 10, "two registrations decided (their commits held), ten refused");
      expect(statuses).toEqual(Array(10).fill(503));
      expect(state.registrations).toBe(2);
      commits.release();
      const opened = (await Promise.all(answers)).filter((a) => a.status === 200).length;
      const good = await post(t, init, { "x-kxm-project": "good/repo", "x-kxm-agent": "worker", authorization: "Bearer good-token" });
      expect({ opened, good: good.status }).toEqual({ opened: 2, good: 200 });
    } finally {
      commits.release();
      await t.hub.close();
    }
  });
});
