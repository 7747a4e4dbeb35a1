import { describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { startTestHub } from "../fixtures/hub.js";
import { hubClients, protocols, withHeaders } from "../fixtures/clients.js";

describe("one port", () => {
  it("serves REST and every RPC protocol on one port", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    for (const p of protocols) {
      const c = hubClients(p.make(t.baseUrl, [withHeaders(a.headers)]));
      const res = await c.leases.acquireLease({ name: `lock-${p.name}`, ttlMs: 5000 });
      expect(res.lease?.fencingToken).toBe(1n);
      const err = await c.leases.acquireLease({ name: "x", ttlMs: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
    }
  });
});
