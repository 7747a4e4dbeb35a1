import { expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import type { HubConfig } from "../../src/config.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { StreamScope } from "../fixtures/streams.js";

const config: Partial<HubConfig> = {
  authToken: "tok-admin",
  cleanupIntervalMs: 3_600_000,
  agentRetentionMs: 60_000,
};
const protocol = protocols[1]; // connect-binary (HTTP/2)

/** Applies a WatchPresence stream's snapshot and changes to a map of agents by id, until a keep-alive after the snapshot. */

/**
 * WatchPresence sends a snapshot, then every change (docs/streams.md): an agent that retention
 * forgets leaves a watcher's view with a `forgotten` frame, so that snapshot plus changes stays a
 * new snapshot.
 */
it("WatchPresence: an agent forgotten by retention leaves the watcher's view (snapshot + changes = a new snapshot)", async () => {
  await using t = await startTestHub({ config });
  using s = new StreamScope();
  const presence = createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders({ authorization: "Bearer tok-admin" })]));
  const a = await t.register("alpha", "p", "tok-admin");
  await createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders(a.headers)])).unregisterAgent({ agentId: a.id });

  const w = s.add((signal) => presence.watchPresence({ project: "p" }, { signal }));
  const followed = new Map<string, string>();
  const first = await w.next();
  if (first.event.case !== "snapshot") throw new Error("expected a snapshot");
  for (const x of first.event.value.agents) followed.set(x.id, x.name);
  expect([...followed.values()]).toEqual(["alpha"]);

  // Past the agent retention: the sweep forgets alpha (offline, nothing open names it).
  t.clock.advance(61_000);
  await t.hub.sweepNow();
  expect(t.events.some((e) => e.event === "agent_forgotten")).toBe(true);
  // The next frame but keep-alives (the clock moved past the keep-alive interval) says so, on
  // the cursor after the agent's last change.
  let next = await w.next();
  while (next.event.case === "keepAlive") next = await w.next();
  expect({ case: next.event.case, cursor: next.cursor }).toEqual({ case: "forgotten", cursor: 3n });
  if (next.event.case === "forgotten") followed.delete(next.event.value.id);

  // A fresh snapshot is what the hub says the project has now.
  const w2 = s.add((signal) => presence.watchPresence({ project: "p" }, { signal }));
  const fresh = new Map<string, string>();
  const snap = await w2.next();
  if (snap.event.case !== "snapshot") throw new Error("expected a snapshot");
  for (const x of snap.event.value.agents) fresh.set(x.id, x.name);
  expect(fresh.size).toBe(0);
  // The watcher that followed every change shows what a fresh snapshot shows.
  expect([...followed.values()]).toEqual([...fresh.values()]);
});
