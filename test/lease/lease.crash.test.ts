import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ChildHubs } from "../fixtures/child-hub.js";
import { afterEach, describe, expect, it } from "vitest";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { defaultConfig, loadConfig } from "../../src/config.js";
import { fdatasyncWal } from "../../src/store/sqlite/batch.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { clientFor, hubClients, protocols, withHeaders, type HubClients } from "../fixtures/clients.js";
import { refusalOf } from "../fixtures/rpc.js";

/**
 * The SIGKILL test (decision D43: a fencing token handed to a client is never handed out again,
 * also across a crash). A real hub runs as a child process on a temp SQLite file; agents hammer
 * acquire/release over several resources and protocols; the child is SIGKILLed mid-load and a
 * new one is started on the same file. Every token answered before the kill must stay behind
 * the fence: after the restart each resource's grants are above every pre-crash token.
 *
 * Why it holds: each lease decision is a savepoint of a group-commit batch, and its answer
 * leaves only after the batch's COMMIT is in the WAL and (FULL, the default) the WAL is
 * fdatasynced. A SIGKILL loses only the process, not the OS page cache, so committed frames
 * survive it under either level; FULL's sync extends the guarantee to an OS crash or power loss
 * (NORMAL would not). test/store/group-commit.test.ts holds the sync to show the order.
 * Leases here use the real clock (the child has no fake clock), so tokens grow through
 * release + re-acquire rather than takeovers.
 */

const RESOURCES = ["alpha", "beta", "gamma", "delta"];
const WORKERS = 8;
const GRANTS_BEFORE_KILL = 300;
const GRANTS_AFTER_RESTART = 120;

interface Grant {
  resource: string;
  token: number;
  holder: string;
  /** The holder re-acquired its own live lease (same token). */
  renewed: boolean;
}

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

/** Starts a hub process on the data file; resolves with its URL. */
const startChild = (dir: string, dataPath: string) => hubs.start(dir, dataPath);

/**
 * WORKERS agents loop acquire -> release over the resources until `enough()` or a call fails
 * (the hub was killed). Returns every grant answered. `onGrant` may kill the hub.
 */
async function hammer(clients: { name: string; c: HubClients }[], enough: () => boolean, onGrant: (g: Grant) => void) {
  let stopped = false;
  const worker = async ({ name, c }: { name: string; c: HubClients }, w: number) => {
    for (let i = w; !stopped && !enough(); i++) {
      const resource = RESOURCES[i % RESOURCES.length]!;
      try {
        const r = await c.leases.acquireLease({ name: resource, ttlMs: 5_000 });
        onGrant({ resource, token: Number(r.lease!.fencingToken), holder: name, renewed: r.renewed });
        await c.leases.releaseLease({ name: resource, fencingToken: r.lease!.fencingToken });
      } catch (e) {
        let reason: string | undefined;
        try {
          reason = refusalOf(e).reason;
        } catch {
          stopped = true; // transport failure: the hub is gone
          return;
        }
        expect(["LEASE_HELD", "LEASE_NOT_FOUND", "LEASE_SUPERSEDED"]).toContain(reason);
      }
    }
  };
  await Promise.all(clients.map(worker));
}

const connect = (url: string, agents: { name: string; headers: Record<string, string> }[]) =>
  agents.map((a, i) => ({ name: a.name, c: hubClients(protocols[i % protocols.length]!.make(url, [withHeaders(a.headers)])) }));

describe("fencing tokens across a SIGKILL", () => {
  it("FULL is the default durability setting: the WAL is synced after each writing batch", async () => {
    expect(defaultConfig.sqliteSynchronous).toBe("full");
    expect(loadConfig([], {}).sqliteSynchronous).toBe("full");
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-full-"));
    let syncs = 0;
    const store = new SqliteStore({
      path: path.join(dir, "kxm.db"),
      synchronous: defaultConfig.sqliteSynchronous,
      walSync: (file) => {
        const real = fdatasyncWal(file);
        return { sync: () => (syncs++, real.sync()), close: real.close };
      },
    });
    try {
      await store.leases.decideLease({ project: "p", name: "r" }, () => ({
        write: { project: "p", name: "r", holderAgentId: "a", holderAgentName: "a", fencingToken: 1, acquiredAtMs: 1, expiresAtMs: 2 },
        result: undefined,
      }));
      expect(syncs).toBe(1);
    } finally {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("no token answered before the kill is handed out again after the restart", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-crash-"));
    const dataPath = path.join(dir, "state", "kxm.db");
    try {
      const first = await startChild(dir, dataPath);
      const register = clientFor(PresenceService, protocols[0].make(first.url, []));
      const agents = [];
      for (let i = 0; i < WORKERS; i++) {
        const r = await register.registerAgent({ name: `worker-${i}`, project: "p" });
        agents.push({ name: `worker-${i}`, headers: { "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey } });
      }

      const before: Grant[] = [];
      let killed = false;
      await hammer(connect(first.url, agents), () => killed, (g) => {
        before.push(g);
        if (before.length >= GRANTS_BEFORE_KILL && !killed) {
          killed = first.child.kill("SIGKILL"); // mid-load: other workers have calls in flight
        }
      });
      await first.exited;
      expect(first.child.signalCode).toBe("SIGKILL");
      expect(before.length).toBeGreaterThanOrEqual(GRANTS_BEFORE_KILL);

      const second = await startChild(dir, dataPath);
      const after: Grant[] = [];
      await hammer(connect(second.url, agents), () => after.length >= GRANTS_AFTER_RESTART, (g) => after.push(g));
      second.child.kill("SIGTERM");
      await second.exited;
      expect(after.length).toBeGreaterThanOrEqual(GRANTS_AFTER_RESTART);

      for (const resource of RESOURCES) {
        const pre = before.filter((g) => g.resource === resource);
        const post = after.filter((g) => g.resource === resource);
        expect(pre.length, `${resource} pre-crash grants`).toBeGreaterThan(0);
        expect(post.length, `${resource} post-restart grants`).toBeGreaterThan(0);
        // before the crash: each token value granted once, increasing per resource
        const preTokens = pre.map((g) => g.token);
        expect(new Set(preTokens).size, resource).toBe(preTokens.length);
        const fence = Math.max(...preTokens);
        // after the restart: a pre-crash token only ever comes back to its own holder (a live
        // lease it re-acquires, renewed); every new grant is above the fence
        const holderOf = new Map(pre.map((g) => [g.token, g.holder]));
        for (const g of post) {
          const where = `${resource} token ${g.token} to ${g.holder} after restart`;
          if (holderOf.has(g.token)) expect(holderOf.get(g.token), where).toBe(g.holder);
          if (!g.renewed) expect(g.token, where).toBeGreaterThan(fence);
        }
        const newTokens = post.filter((g) => !g.renewed).map((g) => g.token);
        expect(new Set(newTokens).size, resource).toBe(newTokens.length);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000); // real processes on the real clock: slow on a loaded machine, never a hang
});
