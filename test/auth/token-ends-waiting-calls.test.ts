/**
 * A call that waits (AcquireLease or ReadInbox with waitMs) made with a managed project token ends
 * with invalid_auth once the token is revoked or expires, as a stream made with it does
 * (server/token-guard.ts watchToken): the waiting acquire leaves the queue without being handed
 * the lease, and the waiting read answers no message sent after the revocation. A token was
 * checked only when the call began, so the waits outlived it.
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
