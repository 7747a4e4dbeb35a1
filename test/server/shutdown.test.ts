import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { streamProtocols, until } from "../fixtures/streams.js";
import { mcpAgent } from "../fixtures/mcp.js";
import type { WalSync } from "../../src/store/sqlite/batch.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { reasonOf } from "../fixtures/wire.js";

/** What a call that was refused or cut off ended with (undefined: it did not end in an error). */
const failure = (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => ConnectError.from(e));

describe.each(streamProtocols)("shutdown over $name", (p) => {
  it("ends open streams with unavailable, refuses new calls on the old connection, and stops without the grace time", async () => {
    // A grace time far beyond the test timeout: close() must not need it.
    const t = await startTestHub({ config: { shutdownGraceMs: 600_000 } });
    const a = await t.register("alpha");
    const transport = p.make(t.baseUrl, [withHeaders(a.headers)]);
    const inbox = createClient(PeerService, transport).subscribe({})[Symbol.asyncIterator]();
    const watch = createClient(PresenceService, transport).watchPresence({})[Symbol.asyncIterator]();
    expect((await inbox.next()).value?.event.case).toBe("ready");
    expect((await watch.next()).value?.event.case).toBe("snapshot");

    const inboxEnd = failure(inbox.next());
    const watchEnd = failure(watch.next());
    const closed = t.close();
    for (const end of [await inboxEnd, await watchEnd]) {
      expect([end?.code, reasonOf(end)]).toEqual([Code.Unavailable, "HUB_SHUTTING_DOWN"]);
    }
    // The same client (same connection, if it is still there) gets no new call through.
    const late = await failure(createClient(PresenceService, transport).listAgents({}));
    expect(late).toBeInstanceOf(ConnectError);
    await closed;
    expect(t.events.find((e) => e.event === "hub_stopped")?.fields).toMatchObject({ forced: false });
  }, 15_000);
});

describe("shutdown over HTTP/1.1 keep-alive", () => {
  it("closes idle keep-alive connections at once instead of waiting out the grace time", async () => {
    const t = await startTestHub({ config: { shutdownGraceMs: 600_000 } });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const get = (path: string) =>
      new Promise<{ status: number; connection?: string; code?: string }>((resolve, reject) => {
        http
          .get(t.baseUrl + path, { agent }, (res) => {
            let body = "";
            res.on("data", (d: Buffer) => (body += d));
            res.on("end", () =>
              resolve({ status: res.statusCode!, connection: res.headers.connection, code: body ? JSON.parse(body).code : undefined }),
            );
          })
          .on("error", reject);
      });
    expect((await get("/health")).status).toBe(200);
    const idle = Object.values(agent.freeSockets).flat()[0]!;
    const idleClosed = new Promise((r) => idle.once("close", r));
    await t.close();
    await idleClosed; // the idle keep-alive connection was closed by the hub, not left open
    expect(t.events.find((e) => e.event === "hub_stopped")?.fields).toMatchObject({ forced: false });
    agent.destroy();
  });
});

/**
 * A tool call under way when the hub begins to shut down is answered before its MCP session (or
 * its 2026-07-28 exchange) is closed: the lease it was granted is committed, and the agent is told.
 */
describe("shutdown and MCP calls under way", () => {
  it.each(["legacy", "modern"] as const)("the %s era's tool call in flight gets its answer", async (era) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-shutdown-mcp-"));
    let hold = false;
    const waiting: (() => void)[] = [];
    const walSync = (): WalSync => ({ sync: () => (hold ? new Promise<void>((r) => waiting.push(r)) : Promise.resolve()), close: () => {} });
    const store = new SqliteStore({ path: path.join(dir, "kxm.db"), synchronous: "full", walSync });
    const t = await startTestHub({ overrides: { store }, config: { shutdownGraceMs: 5_000 } });
    try {
      const agent = await mcpAgent(t, "alice", { era });
      hold = true;
      const answer = agent.call("acquire_lease", { name: "main", ttl_ms: 30_000 });
      // Committed; its answer waits for the WAL's sync.
      await until(() => waiting.length > 0, "the acquire's sync");
      const closing = t.hub.close();
      // The shutdown has begun (new calls are refused) before the sync is let go.
      for (;;) {
        const status = await fetch(`${t.baseUrl}/health`).then((r) => r.status, () => 0);
        if (status !== 200) break;
      }
      hold = false;
      for (const done of waiting.splice(0)) done();
      expect(JSON.stringify(await answer)).toMatch(/fencingToken|fencing_token/);
      await closing;
    } finally {
      await t.hub.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
