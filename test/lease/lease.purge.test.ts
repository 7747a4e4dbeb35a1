import { describe, expect, it } from "vitest";
import { jsonOf, startTestHub } from "../fixtures/hub.js";

const day = 24 * 3_600_000;

describe("lease purge", () => {
  it("drops holders of leases lapsed over 7 days but keeps the token floor", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const acquire = (headers: Record<string, string>) =>
      t.rest("/v1/leases/deploy/acquire", { method: "POST", headers, json: { ttlMs: 5_000 } });
    expect((await jsonOf(await acquire(a.headers))).lease.fencingToken).toBe(1);

    t.clock.advance(5_000 + 7 * day - 1);
    await t.hub.sweepNow();
    expect((await t.rest("/v1/leases/deploy", { headers: a.headers })).status).toBe(200);
    expect(t.events.some((e) => e.event === "lease_purged")).toBe(false);

    t.clock.advance(1);
    await t.hub.sweepNow();
    const purged = t.events.find((e) => e.event === "lease_purged");
    expect(purged?.fields).toMatchObject({ resource: "p/deploy", project: "p", agentId: a.id, fencingToken: 1 });
    const gone = await t.rest("/v1/leases/deploy", { headers: a.headers });
    expect(gone.status).toBe(404);

    const b = await t.register("beta");
    expect((await jsonOf(await acquire(b.headers))).lease.fencingToken).toBe(2);
  });
});
