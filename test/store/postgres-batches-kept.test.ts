import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";
import type { AgentRow } from "../../src/domain.js";

/**
 * A project's batches (its GroupCommit) are kept while idle: dropped and made again each time
 * they went idle, many times a second under load, they churned a Map that V8 then made keep
 * every project's last batch (D88). Kept for every project ever decided on, they would grow
 * without end: past 256 projects the idle ones are dropped together. Nothing outside the store
 * shows either, so this reads the store's own Map.
 */

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

const agent = (project: string): AgentRow => ({
  id: `agt_${project}`,
  project,
  name: "a",
  purpose: "testing",
  keyHash: "00",
  connectedAtMs: 1_000,
  lastSeenAtMs: 1_000,
  online: true,
});

describe("PostgreSQL store: a project's batches", () => {
  it("are kept while idle, and past 256 projects the idle ones are dropped together", async () => {
    const store = await PostgresStore.open({ url: await server.createDatabase(), poolSize: 2 });
    const kept = (store as unknown as { batches: Map<string, unknown> }).batches;
    try {
      await store.agents.decideAgentLeases({ project: "p0", nameKey: "a" }, () => ({ write: agent("p0"), result: 0 }));
      expect([...kept.keys()]).toEqual(["p0"]);
      for (let i = 1; i < 300; i++) {
        const project = `p${i}`;
        await store.agents.decideAgentLeases({ project, nameKey: "a" }, () => ({ write: agent(project), result: 0 }));
        // Kept while there are no more than 256...
        if (i < 256) expect(kept.size).toBe(i + 1);
        // ...and the idle ones dropped together once there are more.
        expect(kept.size).toBeLessThanOrEqual(257);
      }
      expect(kept.size).toBeLessThan(300 - 256);
      // A project whose batches were dropped gets new ones, and its decisions go on.
      const again = await store.agents.decideAgentLeases({ project: "p0", nameKey: "a" }, (a) => ({ result: a?.id }));
      expect(again).toBe("agt_p0");
      expect(kept.has("p0")).toBe(true);
    } finally {
      await store.close();
    }
  });
});
