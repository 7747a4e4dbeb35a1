import { describe, expect, it } from "vitest";
import { sweepChunk } from "../../src/domain.js";
import { changeRetention } from "../../src/events/watch.js";
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

  it("purges more watch changes than one sweep decision holds (sweepChunk), all of those past retention", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    // Each cycle is two changes of the project's lease stream: a grant and a release.
    const cycles = sweepChunk / 2 + 2;
    for (let i = 0; i < cycles; i++) {
      const { lease } = await jsonOf(await t.rest("/v1/leases/x/acquire", { headers: a.headers, json: { ttlMs: 5_000 } }));
      expect((await t.rest("/v1/leases/x/release", { headers: a.headers, json: { fencingToken: lease.fencingToken } })).status).toBe(200);
    }
    t.clock.advance(changeRetention.ms + 1);
    await t.hub.sweepNow();
    // Nothing is left to resume from but the head itself.
    const res = await t.rest("/v1/watch/leases?afterCursor=0", { headers: a.headers });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "cursor_expired", error: `cursor 0 is older than what the hub retains; resume from ${2 * cycles}` });
  });
});
