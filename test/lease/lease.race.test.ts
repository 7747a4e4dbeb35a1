import { describe, expect, it } from "vitest";
import { hubClients, protocols, withHeaders, type HubClients } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { refusalOf } from "../fixtures/rpc.js";

/**
 * 50 agents, each with its own client over one of the four RPC protocols, race for one lease
 * per round. Exactly one wins; everyone else is refused LEASE_HELD naming that winner. Between
 * rounds the winner releases (odd rounds) or the hub clock moves past the TTL (even rounds), and
 * each round's token is the previous one + 1: the fence never restarts after a release.
 */
const AGENTS = 50;
const ROUNDS = 6;
const TTL = 5_000;

interface Racer {
  name: string;
  protocol: string;
  client: HubClients;
}

describe("lease race", () => {
  it(`${AGENTS} agents over mixed protocols: one winner per round, tokens +1 per round`, async () => {
    await using t = await startTestHub();
    const racers: Racer[] = [];
    for (let i = 0; i < AGENTS; i++) {
      const creds = await t.register(`racer-${String(i).padStart(2, "0")}`);
      const protocol = protocols[i % protocols.length]!;
      racers.push({ name: creds.name, protocol: protocol.name, client: hubClients(protocol.make(t.baseUrl, [withHeaders(creds.headers)])) });
    }

    const tokens: number[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const results = await Promise.all(
        racers.map(async (r) => {
          try {
            const res = await r.client.leases.acquireLease({ name: "race", ttlMs: TTL });
            return { racer: r, won: res } as const;
          } catch (e) {
            return { racer: r, lost: refusalOf(e) } as const;
          }
        }),
      );
      const winners = results.filter((x) => "won" in x);
      expect(winners, `round ${round} winners`).toHaveLength(1);
      const { racer: winner, won } = winners[0]!;
      const lease = won!.lease!;
      expect(won!.renewed).toBe(false);
      expect(lease.holderAgentName).toBe(winner.name);
      for (const x of results) {
        if (!("lost" in x)) continue;
        const e = x.lost!;
        expect(e, `${x.racer.name} over ${x.racer.protocol}`).toMatchObject({ code: "aborted", reason: "LEASE_HELD" });
        expect(e.metadata.holderAgentName).toBe(winner.name);
        expect(e.lease?.fencingToken).toBe(lease.fencingToken);
      }
      tokens.push(Number(lease.fencingToken));

      if (round % 2 === 1) {
        const rel = await winner.client.leases.releaseLease({ name: "race", fencingToken: lease.fencingToken });
        expect(rel.released).toBe(true);
      } else {
        t.clock.advance(TTL);
      }
    }
    expect(tokens).toEqual(Array.from({ length: ROUNDS }, (_, i) => i + 1));
    expect(t.counters.get("leasesGranted")).toBe(ROUNDS);
    expect(t.counters.get("leasesRefused")).toBe(ROUNDS * (AGENTS - 1));
    expect(t.counters.get("leasesReleased")).toBe(ROUNDS / 2);
    // every protocol took part in every round
    expect(new Set(racers.map((r) => r.protocol)).size).toBe(protocols.length);
  });

  it("concurrent acquires on many resources each grant token 1 exactly once", async () => {
    await using t = await startTestHub();
    const clients: HubClients[] = [];
    for (let i = 0; i < 8; i++) {
      const creds = await t.register(`worker-${i}`);
      clients.push(hubClients(protocols[i % protocols.length]!.make(t.baseUrl, [withHeaders(creds.headers)])));
    }
    const names = Array.from({ length: 20 }, (_, i) => `res-${i}`);
    const calls = names.flatMap((name) => clients.map((c) => c.leases.acquireLease({ name, ttlMs: TTL }).then(
      (r) => ({ name, token: Number(r.lease!.fencingToken) }),
      (e: unknown) => ({ name, reason: refusalOf(e).reason }),
    )));
    const results = await Promise.all(calls);
    for (const name of names) {
      const mine = results.filter((r) => r.name === name);
      expect(mine.filter((r) => "token" in r), name).toEqual([{ name, token: 1 }]);
      expect(mine.filter((r) => "reason" in r && r.reason === "LEASE_HELD"), name).toHaveLength(clients.length - 1);
    }
  });
});
