import { describe, expect, it } from "vitest";
import { hubClients, protocols, withHeaders, type HubClients } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectRestError, expectRestOk, type Json } from "../fixtures/rest.js";
import { refused } from "../fixtures/rpc.js";

/**
 * Regression for the finding "projects alias each other's leases" (decision D44): the lease key
 * was the string `<project>/<name>`, so an agent of project `alpha/repo` read `alpha`'s lease
 * `repo/main` as its own `main`, saw it held (lease_held), and took over alpha's lapsed leases
 * (token + 1), after which alpha's own holder was refused. Leases are now keyed by the pair;
 * the `resource` field keeps its display form, which two different leases may share.
 */

type Init = RequestInit & { json?: unknown };
const ttlMs = 5_000;

describe("project isolation of leases over REST", () => {
  const post = (t: TestHub, as: AgentCreds, name: string, verb: "acquire" | "renew" | "release", json?: unknown) =>
    t.rest(`/v1/leases/${encodeURIComponent(name)}/${verb}`, { method: "POST", headers: as.headers, ...(json !== undefined && { json }) } as Init);
  const get = (t: TestHub, as: AgentCreds, name: string) => t.rest(`/v1/leases/${encodeURIComponent(name)}`, { headers: as.headers });
  const names = async (t: TestHub, as: AgentCreds) =>
    ((await expectRestOk(await t.rest("/v1/leases?includeExpired=true", { headers: as.headers }))).leases as Json[]).map((l) => [l.project, l.name]);

  it("project alpha/repo shares nothing with alpha's repo/* leases", async () => {
    await using t = await startTestHub();
    const a = await t.register("builder", "alpha");
    const r = await t.register("robot", "alpha/repo");

    const mine = (await expectRestOk(await post(t, a, "repo/main", "acquire", { ttlMs }))).lease as Json;
    expect(mine).toMatchObject({ resource: "alpha/repo/main", project: "alpha", name: "repo/main", holderAgentId: a.id, fencingToken: 1 });

    // alpha/repo's `main` is not alpha's `repo/main`: not found, then a lease of its own.
    await expectRestError(await get(t, r, "main"), 404, "lease_not_found");
    const theirs = await expectRestOk(await post(t, r, "main", "acquire", { ttlMs }));
    expect(theirs).toEqual({
      lease: expect.objectContaining({ resource: "alpha/repo/main", project: "alpha/repo", name: "main", holderAgentId: r.id, fencingToken: 1 }),
      renewed: false,
      waitedMs: 0,
    });
    expect(await names(t, a)).toEqual([["alpha", "repo/main"]]);
    expect(await names(t, r)).toEqual([["alpha/repo", "main"]]);

    // alpha's holder renews its own lease with its own token, whatever alpha/repo did.
    expect((await expectRestOk(await post(t, a, "repo/main", "renew", { fencingToken: 1, ttlMs }))).lease).toMatchObject({
      holderAgentId: a.id,
      fencingToken: 1,
    });
    await expectRestOk(await post(t, r, "main", "release", { fencingToken: 1 }));

    // alpha's lease lapses; alpha/repo's acquire reaches only its own lease (floor 1 -> token 2).
    t.clock.advance(ttlMs);
    const again = (await expectRestOk(await post(t, r, "main", "acquire", { ttlMs }))).lease as Json;
    expect(again).toMatchObject({ project: "alpha/repo", name: "main", holderAgentId: r.id, fencingToken: 2 });
    expect(await expectRestOk(await get(t, a, "repo/main"))).toEqual({
      lease: expect.objectContaining({ project: "alpha", holderAgentId: a.id, fencingToken: 1 }),
      expired: true,
    });
    // alpha's holder is not superseded: it releases its lapsed lease, then its fence goes on at 2.
    await expectRestOk(await post(t, a, "repo/main", "release", { fencingToken: 1 }));
    const next = (await expectRestOk(await post(t, a, "repo/main", "acquire", { ttlMs }))).lease as Json;
    expect(next).toMatchObject({ project: "alpha", holderAgentId: a.id, fencingToken: 2 });
    expect((await expectRestOk(await post(t, a, "repo/main", "renew", { fencingToken: 2, ttlMs }))).lease).toMatchObject({ fencingToken: 2 });
  });

  it("alpha/repo never holds alpha's lapsed lease, even while alpha is away", async () => {
    await using t = await startTestHub();
    const a = await t.register("builder", "alpha");
    const r = await t.register("robot", "alpha/repo");
    await expectRestOk(await post(t, a, "repo/ci", "acquire", { ttlMs }));
    t.clock.advance(ttlMs + 1);
    const taken = (await expectRestOk(await post(t, r, "ci", "acquire", { ttlMs }))).lease as Json;
    expect(taken).toMatchObject({ project: "alpha/repo", name: "ci", fencingToken: 1 });
    // alpha's holder still holds (lapsed) token 1 and may renew by re-acquiring: its own takeover.
    const back = await expectRestOk(await post(t, a, "repo/ci", "acquire", { ttlMs }));
    expect(back).toEqual({ lease: expect.objectContaining({ project: "alpha", holderAgentId: a.id, fencingToken: 2 }), renewed: false, waitedMs: 0 });
    expect((await expectRestOk(await post(t, r, "ci", "renew", { fencingToken: 1, ttlMs }))).lease).toMatchObject({ fencingToken: 1 });
  });
});

describe.each(protocols)("project isolation of leases over $name", (protocol) => {
  const clientsOf = (t: TestHub, as: AgentCreds): HubClients => hubClients(protocol.make(t.baseUrl, [withHeaders(as.headers)]));

  it("project alpha/repo shares nothing with alpha's repo/* leases", async () => {
    await using t = await startTestHub();
    const a = clientsOf(t, await t.register("builder", "alpha")).leases;
    const r = clientsOf(t, await t.register("robot", "alpha/repo")).leases;

    const mine = (await a.acquireLease({ name: "repo/main", ttlMs })).lease!;
    expect(mine).toMatchObject({ resource: "alpha/repo/main", project: "alpha", fencingToken: 1n });

    expect(await refused(r.getLease({ name: "main" }))).toMatchObject({ code: "not_found", reason: "LEASE_NOT_FOUND" });
    const theirs = await r.acquireLease({ name: "main", ttlMs });
    expect(theirs.renewed).toBe(false);
    expect(theirs.lease).toMatchObject({ resource: "alpha/repo/main", project: "alpha/repo", name: "main", fencingToken: 1n });
    expect((await a.listLeases({ includeExpired: true })).leases.map((l) => l.project)).toEqual(["alpha"]);
    expect((await r.listLeases({ includeExpired: true })).leases.map((l) => l.project)).toEqual(["alpha/repo"]);

    expect((await a.renewLease({ name: "repo/main", fencingToken: 1n, ttlMs })).lease?.fencingToken).toBe(1n);
    await r.releaseLease({ name: "main", fencingToken: 1n });

    t.clock.advance(ttlMs);
    expect((await r.acquireLease({ name: "main", ttlMs })).lease).toMatchObject({ project: "alpha/repo", fencingToken: 2n });
    const seen = await a.getLease({ name: "repo/main" });
    expect(seen.expired).toBe(true);
    expect(seen.lease).toMatchObject({ project: "alpha", holderAgentName: "builder", fencingToken: 1n });
    await a.releaseLease({ name: "repo/main", fencingToken: 1n });
    expect((await a.acquireLease({ name: "repo/main", ttlMs })).lease?.fencingToken).toBe(2n);
    expect((await a.renewLease({ name: "repo/main", fencingToken: 2n, ttlMs })).lease?.fencingToken).toBe(2n);
  });
});
