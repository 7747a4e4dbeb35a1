import { describe, expect, it } from "vitest";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectAgentIdentityRefused, expectRestError, expectRestOk, iso, ms, type Json } from "../fixtures/rest.js";

// LeaseService over the REST face: reference-hub.md §4, plus kxm-hub's fence that never
// restarts after a release (decision D43) and the read routes (decision D42).

type Init = RequestInit & { json?: unknown };

const post = (t: TestHub, as: AgentCreds, name: string, verb: "acquire" | "renew" | "release", json?: unknown) =>
  t.rest(`/v1/leases/${name}/${verb}`, { method: "POST", headers: as.headers, ...(json !== undefined && { json }) } as Init);

const acquire = (t: TestHub, as: AgentCreds, name: string, json?: unknown) => post(t, as, name, "acquire", json);
const renew = (t: TestHub, as: AgentCreds, name: string, json?: unknown) => post(t, as, name, "renew", json);
const release = (t: TestHub, as: AgentCreds, name: string, json?: unknown) => post(t, as, name, "release", json);
const getLease = (t: TestHub, as: AgentCreds, name: string) => t.rest(`/v1/leases/${name}`, { headers: as.headers });
const listLeases = (t: TestHub, as: AgentCreds, query = "") => t.rest(`/v1/leases${query}`, { headers: as.headers });

/** Acquires and returns the lease record (asserting 200). */
async function held(t: TestHub, as: AgentCreds, name: string, ttlMs?: number): Promise<Json> {
  return (await expectRestOk(await acquire(t, as, name, ttlMs === undefined ? undefined : { ttlMs }))).lease as Json;
}

async function setup(t: TestHub) {
  const a = await t.register("alpha");
  const b = await t.register("beta");
  return { a, b };
}

describe("POST /v1/leases/{name}/acquire", () => {
  it("grants a free resource: 200 {lease, renewed:false} with token 1 as a JSON number", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const now = t.clock.now();
    const res = await acquire(t, a, "db", { ttlMs: 10_000 });
    const body = await expectRestOk(res);
    expect(body).toEqual({
      lease: {
        resource: "p/db",
        project: "p",
        name: "db",
        holderAgentId: a.id,
        holderAgentName: "alpha",
        fencingToken: 1,
        acquiredAt: iso(now),
        expiresAt: iso(now + 10_000),
        waiters: [],
      },
      renewed: false,
      waitedMs: 0,
    });
    expect(typeof body.lease.fencingToken).toBe("number");
  });

  it("uses a 300000 ms TTL when ttlMs is absent (no body, no content type)", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db");
    expect(ms(lease.expiresAt) - ms(lease.acquiredAt)).toBe(300_000);
  });

  it.each([5_000, 600_000])("accepts ttlMs %i (the bounds)", async (ttlMs) => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db", ttlMs);
    expect(ms(lease.expiresAt) - ms(lease.acquiredAt)).toBe(ttlMs);
  });

  it.each([4_999, 600_001, 0, -1, 5_000.5])("refuses ttlMs %d with 400 protocol_error and grants nothing", async (ttlMs) => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    await expectRestError(await acquire(t, a, "db", { ttlMs }), 400, "protocol_error");
    await expectRestError(await getLease(t, a, "db"), 404, "lease_not_found");
  });

  it("extends the caller's own live lease: renewed:true, token and acquiredAt kept", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const first = await held(t, a, "db", 10_000);
    t.clock.advance(4_000);
    const body = await expectRestOk(await acquire(t, a, "db", { ttlMs: 20_000 }));
    expect(body.renewed).toBe(true);
    expect(body.lease).toEqual({ ...first, expiresAt: iso(t.clock.now() + 20_000) });
  });

  it("refuses another agent while the lease is live: 409 lease_held with the lease", async () => {
    await using t = await startTestHub();
    const { a, b } = await setup(t);
    const lease = await held(t, a, "db", 10_000);
    t.clock.advance(9_999);
    const err = await expectRestError(await acquire(t, b, "db", { ttlMs: 10_000 }), 409, "lease_held", {
      extras: ["lease"],
      message: `lease on db is held by alpha until ${lease.expiresAt}`,
    });
    expect(err.lease).toEqual(lease);
    expect(t.counters.get("leasesRefused")).toBe(1);
  });

  it("hands a lapsed lease to another agent with token + 1 (lapsed at expiresAt exactly)", async () => {
    await using t = await startTestHub();
    const { a, b } = await setup(t);
    await held(t, a, "db", 10_000);
    t.clock.advance(10_000);
    const body = await expectRestOk(await acquire(t, b, "db", { ttlMs: 5_000 }));
    expect(body.renewed).toBe(false);
    expect(body.lease).toMatchObject({
      holderAgentId: b.id,
      holderAgentName: "beta",
      fencingToken: 2,
      acquiredAt: iso(t.clock.now()),
      expiresAt: iso(t.clock.now() + 5_000),
    });
  });

  it("takes over its own lapsed lease with token + 1 and a new acquiredAt", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    await held(t, a, "db", 5_000);
    t.clock.advance(6_000);
    const body = await expectRestOk(await acquire(t, a, "db", { ttlMs: 5_000 }));
    expect(body).toMatchObject({ renewed: false, lease: { fencingToken: 2, acquiredAt: iso(t.clock.now()) } });
  });

  it("decodes %2F in the name: a%2Fb is the lease a/b on resource p/a/b", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "a%2Fb");
    expect(lease).toMatchObject({ name: "a/b", resource: "p/a/b" });
    expect((await expectRestOk(await getLease(t, a, "a%2Fb"))).lease).toEqual(lease);
    await expectRestOk(await renew(t, a, "a%2Fb", { fencingToken: 1 }));
    await expectRestOk(await release(t, a, "a%2Fb", { fencingToken: 1 }));
  });

  it("trims the decoded name", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "%20db%20");
    expect(lease).toMatchObject({ name: "db", resource: "p/db" });
  });

  it.each([
    { what: "200 characters", name: "n".repeat(200), status: 200 },
    { what: "201 characters", name: "n".repeat(201), status: 400 },
    { what: "only blanks", name: "%20%20", status: 400 },
    { what: "a NUL character", name: "d%00b", status: 400 },
  ])("names of $what answer $status", async ({ name, status }) => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const res = await acquire(t, a, name);
    if (status === 200) await expectRestOk(res);
    else await expectRestError(res, 400, "protocol_error");
  });

  it("ignores a name in the body: the path names the resource", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db");
    expect(lease.name).toBe("db");
    const other = (await expectRestOk(await acquire(t, a, "cache", { name: "db" }))).lease;
    expect(other.name).toBe("cache");
  });

  it("scopes resources per project: both projects hold x with token 1, each sees only its own", async () => {
    await using t = await startTestHub();
    const p = await t.register("alpha", "p");
    const q = await t.register("alpha", "q");
    const lp = await held(t, p, "x");
    const lq = await held(t, q, "x");
    expect(lp).toMatchObject({ resource: "p/x", project: "p", fencingToken: 1, holderAgentId: p.id });
    expect(lq).toMatchObject({ resource: "q/x", project: "q", fencingToken: 1, holderAgentId: q.id });
    await held(t, p, "only-p");
    expect((await expectRestOk(await listLeases(t, q))).leases.map((l: Json) => l.name)).toEqual(["x"]);
    await expectRestError(await getLease(t, q, "only-p"), 404, "lease_not_found");
    // q cannot release or renew p's lease: it is not there for q.
    await expectRestError(await release(t, q, "only-p", { fencingToken: 1 }), 404, "lease_not_found");
  });

  it("requires an agent identity", async () => {
    await using t = await startTestHub();
    await setup(t);
    await expectAgentIdentityRefused(await t.rest("/v1/leases/db/acquire", { json: {} }));
  });
});

describe("POST /v1/leases/{name}/renew", () => {
  it("extends the live lease: 200 {lease, renewed:true}, token and acquiredAt unchanged", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db", 10_000);
    t.clock.advance(9_000);
    const body = await expectRestOk(await renew(t, a, "db", { fencingToken: 1, ttlMs: 60_000 }));
    expect(body).toEqual({ lease: { ...lease, expiresAt: iso(t.clock.now() + 60_000) }, renewed: true });
  });

  it("uses the default TTL when ttlMs is absent", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    await held(t, a, "db", 10_000);
    const body = await expectRestOk(await renew(t, a, "db", { fencingToken: 1 }));
    expect(body.lease.expiresAt).toBe(iso(t.clock.now() + 300_000));
  });

  it.each([
    { what: "no body", json: undefined },
    { what: "no fencingToken", json: { ttlMs: 10_000 } },
    { what: "a null fencingToken", json: { fencingToken: null } },
  ])("refuses $what with 400 lease_token_required", async ({ json }) => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db", 10_000);
    await expectRestError(await renew(t, a, "db", json), 400, "lease_token_required");
    expect((await expectRestOk(await getLease(t, a, "db"))).lease).toEqual(lease);
  });

  it.each([
    { what: "a string", fencingToken: "1" },
    { what: "zero", fencingToken: 0 },
    { what: "a negative number", fencingToken: -1 },
    { what: "a fraction", fencingToken: 1.5 },
    { what: "above 2^53-1", fencingToken: 2 ** 53 },
    { what: "a boolean", fencingToken: true },
  ])("refuses a fencingToken that is $what with 400 protocol_error", async ({ fencingToken }) => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db", 10_000);
    await expectRestError(await renew(t, a, "db", { fencingToken }), 400, "protocol_error");
    expect((await expectRestOk(await getLease(t, a, "db"))).lease).toEqual(lease);
  });

  it("refuses the superseded holder with 409 lease_superseded and the current lease", async () => {
    await using t = await startTestHub();
    const { a, b } = await setup(t);
    await held(t, a, "db", 5_000);
    t.clock.advance(5_000);
    const current = await held(t, b, "db", 5_000);
    const err = await expectRestError(await renew(t, a, "db", { fencingToken: 1 }), 409, "lease_superseded", {
      extras: ["lease"],
      message: "fencing token for db was superseded; the hub is now at token 2",
    });
    expect(err.lease).toEqual(current);
  });

  it("refuses the holder presenting a wrong token with 409 lease_superseded", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db", 5_000);
    const err = await expectRestError(await renew(t, a, "db", { fencingToken: 7 }), 409, "lease_superseded", { extras: ["lease"] });
    expect(err.lease).toEqual(lease);
  });

  it("refuses another agent presenting the right token with 409 lease_superseded", async () => {
    await using t = await startTestHub();
    const { a, b } = await setup(t);
    await held(t, a, "db", 5_000);
    await expectRestError(await renew(t, b, "db", { fencingToken: 1 }), 409, "lease_superseded", { extras: ["lease"] });
  });

  it("refuses the holder's own lapsed lease (no takeover yet) with 409 lease_expired and the lease", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db", 5_000);
    t.clock.advance(5_000);
    const err = await expectRestError(await renew(t, a, "db", { fencingToken: 1 }), 409, "lease_expired", {
      extras: ["lease"],
      message: `lease on db expired at ${lease.expiresAt}; re-acquire to take it over`,
    });
    expect(err.lease).toEqual(lease);
  });

  it("answers 404 lease_not_found without a lease extra for an unknown name", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    await expectRestError(await renew(t, a, "nothing", { fencingToken: 1 }), 404, "lease_not_found", {
      message: "no lease is held on nothing",
    });
  });
});

describe("POST /v1/leases/{name}/release", () => {
  it("releases: 200 {released:true, lease}; then GET and renew say 404 and the next grant is token + 1", async () => {
    await using t = await startTestHub();
    const { a, b } = await setup(t);
    const lease = await held(t, a, "db", 10_000);
    const body = await expectRestOk(await release(t, a, "db", { fencingToken: 1, ttlMs: 1 }));
    expect(body).toEqual({ released: true, lease });

    await expectRestError(await getLease(t, a, "db"), 404, "lease_not_found");
    await expectRestError(await renew(t, a, "db", { fencingToken: 1 }), 404, "lease_not_found");
    await expectRestError(await release(t, a, "db", { fencingToken: 1 }), 404, "lease_not_found");
    expect((await expectRestOk(await listLeases(t, a, "?includeExpired=true"))).leases).toEqual([]);

    // Decision D43: the fence never restarts.
    const next = await held(t, b, "db");
    expect(next).toMatchObject({ fencingToken: 2, holderAgentId: b.id, acquiredAt: iso(t.clock.now()) });
    await expectRestOk(await release(t, b, "db", { fencingToken: 2 }));
    expect((await held(t, a, "db")).fencingToken).toBe(3);
  });

  it("releases the caller's lease even after it lapsed", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db", 5_000);
    t.clock.advance(60_000);
    expect(await expectRestOk(await release(t, a, "db", { fencingToken: 1 }))).toEqual({ released: true, lease });
    expect((await held(t, a, "db")).fencingToken).toBe(2);
  });

  it("refuses a superseded token with 409 lease_superseded and keeps the lease", async () => {
    await using t = await startTestHub();
    const { a, b } = await setup(t);
    await held(t, a, "db", 5_000);
    t.clock.advance(5_000);
    const current = await held(t, b, "db", 5_000);
    const err = await expectRestError(await release(t, a, "db", { fencingToken: 1 }), 409, "lease_superseded", { extras: ["lease"] });
    expect(err.lease).toEqual(current);
    expect((await expectRestOk(await getLease(t, b, "db"))).lease).toEqual(current);
  });

  it("refuses a release without fencingToken with 400 lease_token_required and keeps the lease", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    const lease = await held(t, a, "db");
    await expectRestError(await release(t, a, "db"), 400, "lease_token_required");
    await expectRestError(await release(t, a, "db", { fencingToken: "1" }), 400, "protocol_error");
    expect((await expectRestOk(await getLease(t, a, "db"))).lease).toEqual(lease);
  });

  it("answers 404 lease_not_found without a lease extra for an unknown name", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    await expectRestError(await release(t, a, "nothing", { fencingToken: 1 }), 404, "lease_not_found");
  });
});

describe("GET /v1/leases/{name}", () => {
  it("answers {lease, expired:false} while live and expired:true once lapsed", async () => {
    await using t = await startTestHub();
    const { a, b } = await setup(t);
    const lease = await held(t, a, "db", 5_000);
    expect(await expectRestOk(await getLease(t, b, "db"))).toEqual({ lease, expired: false });
    t.clock.advance(4_999);
    expect((await expectRestOk(await getLease(t, b, "db"))).expired).toBe(false);
    t.clock.advance(1);
    expect(await expectRestOk(await getLease(t, b, "db"))).toEqual({ lease, expired: true });
  });

  it("answers 404 lease_not_found for a name never leased", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    await expectRestError(await getLease(t, a, "nothing"), 404, "lease_not_found");
  });
});

describe("GET /v1/leases", () => {
  it("lists live leases by name; includeExpired=true adds the lapsed ones", async () => {
    await using t = await startTestHub();
    const { a, b } = await setup(t);
    await held(t, b, "zeta", 600_000);
    await held(t, a, "old", 5_000);
    await held(t, a, "alpha", 600_000);
    t.clock.advance(5_000);

    const live = await expectRestOk(await listLeases(t, a));
    expect(live.leases.map((l: Json) => l.name)).toEqual(["alpha", "zeta"]);
    expect(live.nextPageToken).toBe("");
    expect((await expectRestOk(await listLeases(t, a, "?includeExpired=false"))).leases).toHaveLength(2);
    expect((await expectRestOk(await listLeases(t, a, "?includeExpired=1"))).leases).toHaveLength(2);

    const all = await expectRestOk(await listLeases(t, a, "?includeExpired=true"));
    expect(all.leases.map((l: Json) => l.name)).toEqual(["alpha", "old", "zeta"]);
    expect(all.leases[1]).toMatchObject({ holderAgentName: "alpha", fencingToken: 1 });
  });

  it("pages with pageSize and nextPageToken", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    for (const name of ["c", "a", "b"]) await held(t, a, name);
    const seen: string[] = [];
    let token = "";
    for (let i = 0; i < 5; i++) {
      const page = await expectRestOk(await listLeases(t, a, `?pageSize=1${token ? `&pageToken=${encodeURIComponent(token)}` : ""}`));
      expect(page.leases.length).toBeLessThanOrEqual(1);
      seen.push(...page.leases.map((l: Json) => l.name));
      token = page.nextPageToken;
      if (token === "") break;
    }
    expect(seen).toEqual(["a", "b", "c"]);
    expect(token).toBe("");
  });

  it.each(["?pageSize=abc", "?pageSize=1.5", "?pageSize=-1", "?pageSize=1001"])("refuses %s with 400 protocol_error", async (query) => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    await expectRestError(await listLeases(t, a, query), 400, "protocol_error");
  });

  it("answers an empty list for a project without leases", async () => {
    await using t = await startTestHub();
    const { a } = await setup(t);
    expect(await expectRestOk(await listLeases(t, a))).toEqual({ leases: [], nextPageToken: "" });
  });
});
