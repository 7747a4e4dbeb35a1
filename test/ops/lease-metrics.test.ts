import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { parseExposition, valueOf, type Family } from "../fixtures/prometheus.js";
import { expectRestOk } from "../fixtures/rest.js";
import { idle } from "../fixtures/streams.js";

/**
 * The lease counters: kxm_leases_granted_total counts grants (new, takeovers, handovers to a
 * waiter) and no renewals; kxm_leases_renewed_total counts renewals (RenewLease, and AcquireLease
 * of the caller's own live lease); kxm_leases_released_total counts releases.
 */

async function scrape(t: TestHub): Promise<Map<string, Family>> {
  const res = await t.rest("/metrics");
  expect(res.status).toBe(200);
  return parseExposition(await res.text());
}

const counters = async (t: TestHub) => {
  const m = await scrape(t);
  return {
    granted: valueOf(m, "kxm_leases_granted_total"),
    renewed: valueOf(m, "kxm_leases_renewed_total"),
    released: valueOf(m, "kxm_leases_released_total"),
    refused: valueOf(m, "kxm_leases_refused_total"),
  };
};

describe.each(protocols)("lease counters over $name", (protocol) => {
  const leases = (t: TestHub, as: AgentCreds) => createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));

  it("20 acquires each renewed 4 times: granted 20, renewed 80", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const c = leases(t, a);
    for (let i = 0; i < 20; i++) {
      const { lease } = await c.acquireLease({ name: `job-${i}`, ttlMs: 30_000 });
      for (let r = 0; r < 4; r++) {
        t.clock.advance(1_000);
        await c.renewLease({ name: `job-${i}`, fencingToken: lease!.fencingToken, ttlMs: 30_000 });
      }
    }
    expect(await counters(t)).toEqual({ granted: 20, renewed: 80, released: 0, refused: 0 });
  });

  it("an acquire of the caller's own live lease is a renewal; a takeover and a handover to a waiter are grants", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    await leases(t, a).acquireLease({ name: "db", ttlMs: 5_000 });
    expect((await leases(t, a).acquireLease({ name: "db", ttlMs: 5_000 })).renewed).toBe(true);
    expect(await counters(t)).toMatchObject({ granted: 1, renewed: 1 });
    t.clock.advance(5_000);
    await leases(t, b).acquireLease({ name: "db", ttlMs: 60_000 }); // takes the lapsed lease over
    const wait = leases(t, a).acquireLease({ name: "db", ttlMs: 60_000, waitMs: 60_000 });
    wait.catch(() => undefined); // awaited below; a failure before that must not go unhandled
    await idle(t.clock);
    await leases(t, b).releaseLease({ name: "db", fencingToken: 2n });
    expect((await wait).lease?.fencingToken).toBe(3n);
    expect(await counters(t)).toEqual({ granted: 3, renewed: 1, released: 1, refused: 0 });
  });
});

describe("lease counters over REST", () => {
  it("20 acquires each renewed 4 times: granted 20, renewed 80", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    for (let i = 0; i < 20; i++) {
      const { lease } = await expectRestOk(await t.rest(`/v1/leases/job-${i}/acquire`, { headers: a.headers, json: { ttlMs: 30_000 } }));
      for (let r = 0; r < 4; r++) {
        t.clock.advance(1_000);
        await expectRestOk(await t.rest(`/v1/leases/job-${i}/renew`, { headers: a.headers, json: { fencingToken: lease.fencingToken, ttlMs: 30_000 } }));
      }
    }
    expect(await counters(t)).toEqual({ granted: 20, renewed: 80, released: 0, refused: 0 });
  });
});
