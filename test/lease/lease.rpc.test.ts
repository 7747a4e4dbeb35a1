import { describe, it } from "vitest";
import type { Lease } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { hubClients, protocols, withHeaders, type HubClients } from "../fixtures/clients.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { ms, refusalOf } from "../fixtures/rpc.js";
import { agentNames, leaseCases, runLeaseCase, type LeaseDriver, type Outcome, type SeenLease, type Who } from "./lease.cases.js";

const seen = (l: Lease | undefined): SeenLease | undefined =>
  l && {
    name: l.name,
    holderAgentName: l.holderAgentName,
    fencingToken: Number(l.fencingToken),
    acquiredAtMs: ms(l.acquiredAt),
    expiresAtMs: ms(l.expiresAt),
  };

/** A refusal in the cases' terms: reason, Connect code, ErrorInfo metadata and the Lease detail. */
async function outcome(call: () => Promise<Outcome>): Promise<Outcome> {
  try {
    return await call();
  } catch (e) {
    const r = refusalOf(e);
    if (r.domain !== "kxm-hub") throw new Error(`unexpected ErrorInfo domain ${r.domain}`);
    return { ok: false, reason: r.reason, code: r.code as never, lease: seen(r.lease), metadata: r.metadata };
  }
}

const token = (t: number | undefined) => (t === undefined ? undefined : BigInt(t));

/** Drives the generated LeaseService client as agent A or B over one protocol. */
function rpcDriver(t: TestHub, clients: Record<Who, HubClients>): LeaseDriver {
  const c = (as: Who) => clients[as].leases;
  return {
    acquire: (as, req) =>
      outcome(async () => {
        const r = await c(as).acquireLease(req);
        return { ok: true, lease: seen(r.lease), renewed: r.renewed };
      }),
    renew: (as, req) =>
      outcome(async () => {
        const r = await c(as).renewLease({ name: req.name, fencingToken: token(req.fencingToken), ttlMs: req.ttlMs });
        return { ok: true, lease: seen(r.lease), renewed: r.renewed };
      }),
    release: (as, req) =>
      outcome(async () => {
        const r = await c(as).releaseLease({ name: req.name, fencingToken: token(req.fencingToken) });
        return { ok: true, lease: seen(r.lease), released: r.released };
      }),
    get: (as, req) =>
      outcome(async () => {
        const r = await c(as).getLease(req);
        return { ok: true, lease: seen(r.lease), expired: r.expired };
      }),
    list: (as, req) =>
      outcome(async () => {
        const r = await c(as).listLeases(req);
        return { ok: true, names: r.leases.map((l) => l.name) };
      }),
    advance: (msBy) => t.clock.advance(msBy),
    nowMs: () => t.clock.now(),
  };
}

describe.each(protocols)("LeaseService over $name", (protocol) => {
  it.each(leaseCases)("$name", async (c) => {
    await using t = await startTestHub();
    const clients = {} as Record<Who, HubClients>;
    for (const who of ["A", "B"] as const) {
      const agent = await t.register(agentNames[who]);
      clients[who] = hubClients(protocol.make(t.baseUrl, [withHeaders(agent.headers)]));
    }
    await runLeaseCase(rpcDriver(t, clients), c);
  });
});
