import { describe, expect, it } from "vitest";
import { hubClients, protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";

/**
 * Regression: HTTP/2 sockets reach the h2 server through a replay duplex, so Node never turned
 * Nagle off for them; every unary h2c call (Connect binary, gRPC) then waited for the client's
 * delayed ACK, ~44 ms per call on Linux against ~2 ms over HTTP/1.1. The listener now accepts
 * sockets with noDelay. The bound below is 10x the healthy figure and half the broken one;
 * the median ignores a stray GC pause.
 */
describe("unary latency on loopback", () => {
  it.each(protocols)("a unary call over $name is not delayed by Nagle (median < 20 ms)", async (p) => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const c = hubClients(p.make(t.baseUrl, [withHeaders(a.headers)]));
    await c.leases.acquireLease({ name: "warm-up", ttlMs: 5_000 });
    const took: number[] = [];
    for (let i = 0; i < 15; i++) {
      const t0 = performance.now();
      await c.leases.acquireLease({ name: "warm-up", ttlMs: 5_000 });
      took.push(performance.now() - t0);
    }
    took.sort((x, y) => x - y);
    expect(took[Math.floor(took.length / 2)]).toBeLessThan(20);
  });
});
