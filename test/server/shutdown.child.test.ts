import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { ChildHubs } from "../fixtures/child-hub.js";
import { withHeaders } from "../fixtures/clients.js";
import { reasonOf } from "../fixtures/wire.js";

/**
 * SIGTERM on a real hub process with clients connected: the open Subscribe stream ends with
 * `unavailable` (so the client reconnects, to another replica when there is one), the idle
 * keep-alive connection is closed by the hub, and the process exits on its own once nothing is
 * in flight: `hub_stopped` says it was not forced by the grace time.
 */

const hubs = new ChildHubs();
afterEach(() => hubs.killAll());

describe("SIGTERM", () => {
  it("ends the Subscribe stream with unavailable, closes keep-alive connections and exits without the grace time", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-hub-sigterm-"));
    try {
      const hub = await hubs.start(dir, path.join(dir, "kxm.db"));
      const presence = createClient(PresenceService, createConnectTransport({ baseUrl: hub.url, httpVersion: "2" }));
      const reg = await presence.registerAgent({ name: "alpha", project: "p" });
      const agent = { "x-kxm-agent-id": reg.agent!.id, "x-kxm-agent-key": reg.agentKey };
      const peer = createClient(PeerService, createConnectTransport({ baseUrl: hub.url, httpVersion: "2", interceptors: [withHeaders(agent)] }));
      const inbox = peer.subscribe({})[Symbol.asyncIterator]();
      expect((await inbox.next()).value?.event.case).toBe("ready");

      // A keep-alive HTTP/1.1 connection left idle in the agent's pool.
      const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 1 });
      await new Promise<void>((resolve, reject) =>
        http.get(`${hub.url}/health`, { agent: keepAlive }, (res) => res.resume().on("end", resolve)).on("error", reject),
      );
      const idle = Object.values(keepAlive.freeSockets).flat()[0]!;
      const idleClosed = new Promise((r) => idle.once("close", r));

      const end = inbox.next().then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      hub.child.kill("SIGTERM");
      const ended = await end;
      expect([ended?.code, reasonOf(ended)]).toEqual([Code.Unavailable, "HUB_SHUTTING_DOWN"]);
      await idleClosed;
      expect(await hub.exited).toBe(0);
      keepAlive.destroy();

      const log = fs.readFileSync(path.join(dir, "hub.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
      expect(log.find((e) => e.event === "hub_stopped")).toMatchObject({ forced: false });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
