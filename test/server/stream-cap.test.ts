import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { maxStreams } from "../../src/server/interceptors/stream-cap.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { refusalOf } from "../fixtures/rpc.js";
import { eventually, StreamScope, streamProtocols } from "../fixtures/streams.js";

/**
 * One agent holds at most maxStreams.agent server streams open on a hub, one project token at most
 * maxStreams.token (D73): one more is refused with too_many_streams before its first frame, and
 * closing one gives its place back. Another agent is not held by it.
 */
const openStreams = async (t: TestHub) => {
  const text = await (await t.rest("/metrics")).text();
  let n = 0;
  for (const m of text.matchAll(/^kxm_open_streams\{kind="[a-z_]+"\} (\d+)$/gm)) n += Number(m[1]);
  return n;
};

describe.each(streamProtocols)("streams per caller over $name", (protocol) => {
  it("refuses one past an agent's cap; another agent is not held by it; a closed stream gives its place back", async () => {
    await using t = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 } });
    const a = await t.register("a");
    const b = await t.register("b");
    const asAgent = (headers: Record<string, string>) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(headers)]));
    using s = new StreamScope();
    const held = [];
    for (let i = 0; i < maxStreams.agent; i++) {
      const f = s.add((signal) => asAgent(a.headers).watchLeases({}, { signal }));
      await f.next(); // its snapshot
      held.push(f);
    }
    const refusal = refusalOf(await s.add((signal) => asAgent(a.headers).watchLeases({}, { signal })).error());
    expect(refusal).toMatchObject({ code: "resource_exhausted", reason: "TOO_MANY_STREAMS" });
    expect(refusal.metadata.maxStreams).toBe(String(maxStreams.agent));
    await s.add((signal) => asAgent(b.headers).watchLeases({}, { signal })).next();
    held.pop()!.close();
    await eventually(async () => (await openStreams(t)) === maxStreams.agent, "the closed stream ended");
    await s.add((signal) => asAgent(a.headers).watchLeases({}, { signal })).next();
  }, 60_000);
});

describe("streams per project token", () => {
  it("refuses one past the token's cap; the project's agents are not held by it", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" }, cleanupIntervalMs: 3_600_000 } });
    const a = await t.register("a", "p", "tok-p");
    using s = new StreamScope();
    // HTTP/2, on two connections (one holds at most 1,000 streams).
    const protocol = streamProtocols.find((p) => p.name.startsWith("connect-binary"))!;
    const transports = [0, 1].map(() => protocol.make(t.baseUrl, [withHeaders({ authorization: "Bearer tok-p" })]));
    const watch = (i: number) => s.add((signal) => createClient(PresenceService, transports[i % 2]!).watchPresence({ project: "p" }, { signal }));
    await Promise.all(Array.from({ length: maxStreams.token }, (_, i) => watch(i).next()));
    const refusal = refusalOf(await watch(0).error());
    expect(refusal).toMatchObject({ reason: "TOO_MANY_STREAMS", metadata: { maxStreams: String(maxStreams.token) } });
    const asAgent = createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(a.headers)]));
    await s.add((signal) => asAgent.watchLeases({}, { signal })).next();
  }, 60_000);
});

describe("streams per caller over REST (server-sent events)", () => {
  it("answers one past the cap 429 too_many_streams", async () => {
    await using t = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 } });
    const a = await t.register("a");
    const open: Response[] = [];
    try {
      for (let i = 0; i < maxStreams.agent; i++) {
        const r = await fetch(`${t.baseUrl}/v1/watch/leases?project=p`, { headers: a.headers });
        expect(r.status).toBe(200);
        open.push(r);
      }
      const refused = await fetch(`${t.baseUrl}/v1/watch/leases?project=p`, { headers: a.headers });
      expect(refused.status).toBe(429);
      expect(await refused.json()).toMatchObject({ code: "too_many_streams" });
    } finally {
      for (const r of open) await r.body!.cancel();
    }
  }, 60_000);
});
