import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import type { WalSync } from "../../src/store/sqlite/batch.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { startTestHub } from "../fixtures/hub.js";
import { mcpAgent } from "../fixtures/mcp.js";
import { until } from "../fixtures/streams.js";

/**
 * The 2026-07-28 MCP face holds at most `mcpMaxSessions` clients at once (src/mcp/stateless.ts).
 * A client's place is taken before its agent registers: one that finds no room is refused before
 * anything is registered, never after its registration (a takeover, even) has committed.
 */
describe("MCP 2026-07-28: room for clients", () => {
  it("refuses a client for room before its agent registers, while another client's registration is still committing", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-mcp-room-"));
    let hold = false;
    const held: (() => void)[] = [];
    const walSync = (): WalSync => ({ sync: () => (hold ? new Promise<void>((r) => held.push(r)) : Promise.resolve()), close: () => {} });
    const store = new SqliteStore({ path: path.join(dir, "kxm.db"), synchronous: "full", walSync });
    // Registrations decided (every registration is a decideAgentLeases).
    let registrations = 0;
    const decideAgentLeases = store.agents.decideAgentLeases.bind(store.agents);
    store.agents.decideAgentLeases = (...args) => {
      registrations++;
      return decideAgentLeases(...args);
    };
    const t = await startTestHub({ overrides: { store }, config: { mcpMaxSessions: 1 } });
    try {
      hold = true;
      // Alpha's first request registers it; the commit waits for the held WAL sync.
      const alpha = (async () => {
        const a = await mcpAgent(t, "alpha", { era: "modern" });
        const read = a.call("read_inbox", { wait_ms: 60_000 });
        read.catch(() => undefined); // looked at below; a failed test must not leave it unhandled
        return { a, read };
      })();
      alpha.catch(() => undefined);
      await until(() => registrations === 1 && held.length > 0, "alpha's registration committing");
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
      await until(() => betaDone || registrations === 2, "beta refused, or beta registering");
      hold = false;
      for (const release of held.splice(0)) release();
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
      hold = false;
      for (const release of held.splice(0)) release();
      await t.hub.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
