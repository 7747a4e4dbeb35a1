import { expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { HubConfig } from "../../src/config.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { StreamScope } from "../fixtures/streams.js";

const config: Partial<HubConfig> = { cleanupIntervalMs: 3_600_000, agentRetentionMs: 60_000, staleAfterMs: 600_000 };

/**
 * Subscribe tells an agent of its project's other agents (docs/streams.md): one that retention
 * forgets comes as a `forgotten` frame, as on WatchPresence, so a peer list kept from its
 * `presence` frames loses it too.
 */
it.each([protocols[0]!, protocols[1]!])("Subscribe over $name: a peer forgotten by retention comes as a forgotten frame", async (protocol) => {
  await using t = await startTestHub({ config });
  using s = new StreamScope();
  const watcher = await t.register("watcher");
  const gone = await t.register("gone");
  await createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders(gone.headers)])).unregisterAgent({ agentId: gone.id });
  const peer = createClient(PeerService, protocol.make(t.baseUrl, [withHeaders(watcher.headers)]));
  const sub = s.add((signal) => peer.subscribe({}, { signal }));
  expect((await sub.next()).event.case).toBe("ready");

  t.clock.advance(61_000);
  await t.hub.sweepNow();
  expect(t.events.some((e) => e.event === "agent_forgotten" && e.fields.agentId === gone.id)).toBe(true);
  let next = await sub.next();
  while (next.event.case === "keepAlive") next = await sub.next();
  expect(next.event).toEqual({ case: "forgotten", value: expect.objectContaining({ id: gone.id, name: "gone" }) });
});
