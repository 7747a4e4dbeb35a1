import net from "node:net";
import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { eventually } from "../fixtures/streams.js";

/**
 * A Subscribe stream whose client reads nothing is ended once it has waited for its client for
 * two keep-alive intervals (the sweeper looks): its own lag check (KXM_STREAM_MAX_LAG) runs only
 * when its writer does, and a writer waiting for a drain that never comes never runs again. A
 * stream whose client reads, idle or not, is left alone.
 */
const openStreams = async (t: TestHub, kind: string) => Number(new RegExp(`^kxm_open_streams\\{kind="${kind}"\\} (\\d+)$`, "m").exec(await (await t.rest("/metrics")).text())?.[1]);
const openSubscribes = (t: TestHub) => openStreams(t, "subscribe");

describe("a Subscribe reader that reads nothing", () => {
  it("is ended after two keep-alive intervals of waiting; a reading stream stays", async () => {
    await using t = await startTestHub({ config: { cleanupIntervalMs: 3_600_000 } });
    const reader = await t.register("reader");
    const idle = await t.register("idle");
    const sender = await t.register("sender");
    // A watch whose client reads what comes (little does): it is never cut off.
    const idleStream = await fetch(`${t.baseUrl}/v1/watch/leases?project=p`, { headers: idle.headers });
    expect(idleStream.status).toBe(200);
    const socket = net.connect(Number(new URL(t.baseUrl).port), "127.0.0.1");
    socket.on("error", () => undefined);
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    socket.pause(); // reads nothing
    const body = Buffer.concat([Buffer.from([0, 0, 0, 0, 2]), Buffer.from("{}")]);
    socket.write(
      `POST /kxm.hub.v1.PeerService/Subscribe HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/connect+json\r\n` +
        `x-kxm-agent-id: ${reader.id}\r\nx-kxm-agent-key: ${reader.key}\r\ncontent-length: ${body.length}\r\n\r\n`,
    );
    socket.write(body);
    await eventually(async () => (await openSubscribes(t)) === 1, "the Subscribe stream open");
    // Far more than the socket buffers hold: the hub's writer waits for a drain that never comes.
    const content = "x".repeat(30_000);
    for (let i = 0; i < 600; i++) {
      const r = await t.rest("/v1/messages", { headers: sender.headers, json: { target: reader.id, content } });
      expect(r.status).toBe(202);
    }
    await t.hub.sweepNow(); // the first look: waiting since now
    t.clock.jump(29_999);
    await t.hub.sweepNow();
    expect(await openSubscribes(t)).toBe(1);
    t.clock.jump(1);
    await t.hub.sweepNow(); // two keep-alive intervals (30 s) of waiting
    await eventually(async () => (await openSubscribes(t)) === 0, "the stalled stream ended");
    expect(t.events.some((e) => e.event === "streams_stalled" && e.fields.ended === 1)).toBe(true);
    // The watch that reads is still open.
    expect(await openStreams(t, "watch_leases")).toBe(1);
    await idleStream.body!.cancel();
    socket.destroy();
  }, 60_000);
});
