/**
 * A call that waits (AcquireLease or ReadInbox with waitMs) made with a managed project token ends
 * with invalid_auth once the token is revoked or expires, as a stream made with it does
 * (server/token-guard.ts watchToken): the waiting acquire leaves the queue without being handed
 * the lease, and the waiting read answers no message sent after the revocation. A token was
 * checked only when the call began, so the waits outlived it. So does a waiting call the admin
 * token made for a project that then gets a token of its own (whileCallerLasts), as that
 * project's streams do.
 */
import { afterEach, describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, jsonOf, type TestHub } from "../fixtures/hub.js";
import { refused } from "../fixtures/rpc.js";
import { idle } from "../fixtures/streams.js";

const ADMIN = "tok-admin";
const admin = { authorization: `Bearer ${ADMIN}` };

let hubs: TestHub[] = [];
afterEach(async () => {
  await Promise.all(hubs.map((h) => h.close()));
  hubs = [];
});

async function hub(): Promise<TestHub> {
  const t = await startTestHub({ config: { authToken: ADMIN } });
  hubs.push(t);
  return t;
}

async function create(t: TestHub, project: string, json: Record<string, unknown> = {}) {
  const res = await t.rest(`/v1/ops/projects/${encodeURIComponent(project)}/tokens`, { json, headers: admin });
  expect(res.status).toBe(201);
  return (await res.json()) as { secret: string; token: { tokenId: string } };
}
const revoke = (t: TestHub, project: string, id: string) =>
  t.rest(`/v1/ops/projects/${encodeURIComponent(project)}/tokens/${id}`, { method: "DELETE", headers: admin });

describe("calls that wait, made with a managed token that ends", () => {
  it("a waiting AcquireLease whose token is revoked during the wait is not granted the lease", async () => {
    const t = await hub();
    const good = await create(t, "p");
    const doomed = await create(t, "p");
    const a = await t.register("alpha", "p", good.secret);
    const b = await t.register("beta", "p", doomed.secret);
    const held = await jsonOf(await t.rest("/v1/leases/db/acquire", { headers: a.headers, json: { ttlMs: 30_000 } }));
    const wait = t.rest("/v1/leases/db/acquire", { headers: b.headers, json: { ttlMs: 30_000, waitMs: 60_000 } });
    await idle(t.clock);
    expect((await revoke(t, "p", doomed.token.tokenId)).status).toBe(200);
    // b's token is revoked: a fresh call with it is refused at once.
    expect((await t.rest("/v1/leases/db", { headers: b.headers })).status).toBe(401);
    // a releases; the waiting call of the revoked token must not be handed the lease.
    expect((await t.rest("/v1/leases/db/release", { headers: a.headers, json: { fencingToken: held.lease.fencingToken } })).status).toBe(200);
    const res = await wait;
    const body = await jsonOf(res);
    const lease = await jsonOf(await t.rest("/v1/leases/db?project=p", { headers: admin }));
    expect({ status: res.status, code: body.code, holder: lease.lease?.holderAgentName ?? null }).toEqual({
      status: 401,
      code: "invalid_auth",
      holder: null,
    });
  });

  it("over gRPC: a waiting AcquireLease whose token is revoked ends unauthenticated, and the lease goes to nobody", async () => {
    const t = await hub();
    const good = await create(t, "p");
    const doomed = await create(t, "p");
    const a = await t.register("alpha", "p", good.secret);
    const b = await t.register("beta", "p", doomed.secret);
    const grpc = protocols.find((p) => p.name.startsWith("grpc "))!;
    const leases = (headers: Record<string, string>) => createClient(LeaseService, grpc.make(t.baseUrl, [withHeaders(headers)]));
    const held = (await leases(a.headers).acquireLease({ name: "db", ttlMs: 30_000 })).lease!;
    const wait = refused(leases(b.headers).acquireLease({ name: "db", ttlMs: 30_000, waitMs: 60_000 }));
    await idle(t.clock);
    expect((await revoke(t, "p", doomed.token.tokenId)).status).toBe(200);
    expect(await wait).toMatchObject({ code: "unauthenticated", reason: "INVALID_AUTH" });
    await leases(a.headers).releaseLease({ name: "db", fencingToken: held.fencingToken });
    const lease = await jsonOf(await t.rest("/v1/leases/db?project=p", { headers: admin }));
    expect(lease.lease?.holderAgentName ?? null).toBeNull();
  });

  it("a waiting ReadInbox whose token is revoked during the wait answers no message sent after the revocation", async () => {
    const t = await hub();
    const good = await create(t, "p");
    const doomed = await create(t, "p");
    const a = await t.register("alpha", "p", good.secret);
    const b = await t.register("beta", "p", doomed.secret);
    const read = t.rest("/v1/inbox?waitMs=60000", { headers: b.headers });
    await idle(t.clock);
    expect((await revoke(t, "p", doomed.token.tokenId)).status).toBe(200);
    expect((await t.rest("/v1/inbox", { headers: b.headers })).status).toBe(401);
    const sent = await t.rest("/v1/messages", { json: { target: b.id, content: "secret after revocation" }, headers: a.headers });
    expect(sent.status).toBe(202);
    const res = await read;
    const text = await res.text();
    expect(text).not.toContain("secret after revocation");
    expect(res.status).toBe(401);
  });

  it("a waiting AcquireLease whose token expires during the wait is not granted the lease", async () => {
    const t = await hub();
    const good = await create(t, "p");
    const expiring = await create(t, "p", { ttlMs: 10_000 });
    const a = await t.register("alpha", "p", good.secret);
    const b = await t.register("beta", "p", expiring.secret);
    await jsonOf(await t.rest("/v1/leases/db/acquire", { headers: a.headers, json: { ttlMs: 20_000 } }));
    const wait = t.rest("/v1/leases/db/acquire", { headers: b.headers, json: { ttlMs: 30_000, waitMs: 60_000 } });
    // Two sleepers: the token's expiry, watched from when the call is authenticated, and the wait.
    await idle(t.clock, 2);
    t.clock.advance(10_000); // the token expires
    expect((await t.rest("/v1/leases/db", { headers: b.headers })).status).toBe(401);
    t.clock.advance(10_000); // a's lease lapses
    const res = await wait;
    const body = await jsonOf(res);
    expect({ status: res.status, code: body.code }).toEqual({ status: 401, code: "invalid_auth" });
  });
});

describe("calls that wait, made with the admin token for a project that then gets a token of its own", () => {
  const waits = (t: TestHub) => t.sql("SELECT count(*) AS n FROM lease_waiters").then((r) => Number(r[0]!.n));

  it("a waiting AcquireLease ends with invalid_auth and leaves the queue: it is not handed the lease its holder lets lapse, and another project's wait goes on", async () => {
    const t = await hub();
    const a = await t.register("alpha", "p", ADMIN);
    const b = await t.register("beta", "p", ADMIN);
    const other = await t.register("gamma", "q", ADMIN);
    const held = await jsonOf(await t.rest("/v1/leases/db/acquire", { headers: a.headers, json: { ttlMs: 20_000 } }));
    const delta = await t.register("delta", "q", ADMIN);
    const otherHeld = await jsonOf(await t.rest("/v1/leases/db/acquire", { headers: other.headers, json: { ttlMs: 20_000 } }));
    const wait = t.rest("/v1/leases/db/acquire", { headers: b.headers, json: { ttlMs: 30_000, waitMs: 60_000 } });
    await idle(t.clock, 1);
    const otherWait = t.rest("/v1/leases/db/acquire", { headers: delta.headers, json: { ttlMs: 30_000, waitMs: 60_000 } });
    await idle(t.clock, 2);
    expect(await waits(t)).toBe(2);
    await create(t, "p");
    const res = await wait;
    expect({ status: res.status, code: (await jsonOf(res)).code }).toEqual({ status: 401, code: "invalid_auth" });
    expect(await waits(t)).toBe(1);
    // Logged as what it is, an ended caller, not as a refusal of the lease.
    expect(t.events.filter((e) => e.event === "lease_denied")).toEqual([]);
    expect(t.events.filter((e) => e.event === "request_error" && e.fields.code === "invalid_auth")).toHaveLength(1);
    t.clock.advance(20_000); // both leases lapse; only delta still waits for its own
    // beta was not handed alpha's lapsed lease: it is still alpha's, on its token.
    const lease = await jsonOf(await t.rest("/v1/leases/db?project=p", { headers: admin }));
    expect(lease.lease).toMatchObject({ holderAgentName: "alpha", fencingToken: held.lease.fencingToken });
    // Another project's wait, let in the same way, goes on: it is handed gamma's lapsed lease.
    const got = await jsonOf(await otherWait);
    expect(got.lease).toMatchObject({ holderAgentName: "delta", fencingToken: otherHeld.lease.fencingToken + 1 });
  });

  it("over gRPC: a waiting AcquireLease ends unauthenticated", async () => {
    const t = await hub();
    const a = await t.register("alpha", "p", ADMIN);
    const b = await t.register("beta", "p", ADMIN);
    const grpc = protocols.find((p) => p.name.startsWith("grpc "))!;
    const leases = (headers: Record<string, string>) => createClient(LeaseService, grpc.make(t.baseUrl, [withHeaders(headers)]));
    await leases(a.headers).acquireLease({ name: "db", ttlMs: 30_000 });
    const wait = refused(leases(b.headers).acquireLease({ name: "db", ttlMs: 30_000, waitMs: 60_000 }));
    await idle(t.clock);
    expect(await waits(t)).toBe(1);
    await create(t, "p");
    expect(await wait).toMatchObject({ code: "unauthenticated", reason: "INVALID_AUTH" });
    expect(await waits(t)).toBe(0);
  });

  it("a waiting ReadInbox ends with invalid_auth", async () => {
    const t = await hub();
    const b = await t.register("beta", "p", ADMIN);
    const read = t.rest("/v1/inbox?waitMs=60000", { headers: b.headers });
    await idle(t.clock);
    await create(t, "p");
    const res = await read;
    expect({ status: res.status, code: (await jsonOf(res)).code }).toEqual({ status: 401, code: "invalid_auth" });
  });

  it("a waiting call answered before the project gets its token is answered; one made after is refused at once", async () => {
    const t = await hub();
    const a = await t.register("alpha", "p", ADMIN);
    const res = await t.rest("/v1/leases/db/acquire", { headers: a.headers, json: { ttlMs: 30_000, waitMs: 60_000 } });
    expect(res.status).toBe(200);
    await create(t, "p");
    // The project is closed now: the admin token no longer acts as its agents.
    const after = await t.rest("/v1/leases/db2/acquire", { headers: a.headers, json: { ttlMs: 30_000, waitMs: 60_000 } });
    expect({ status: after.status, code: (await jsonOf(after)).code }).toEqual({ status: 401, code: "invalid_auth" });
  });
});
