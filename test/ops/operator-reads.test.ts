import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { jsonOf, startTestHub, type TestHub } from "../fixtures/hub.js";
import { refused } from "../fixtures/rpc.js";

/**
 * Operators read a named project without an agent identity (decision D46): the admin token, or the
 * project's own token for its project; a loopback hub without an admin token trusts its callers.
 */

const tokens = { p: "tok-p", q: "tok-q" };
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** Project p: `alpha` holds repo/main, `beta` went offline; q has a token and nothing else. */
async function seed(t: TestHub, token?: string) {
  const alpha = await t.register("alpha", "p", token);
  const beta = await t.register("beta", "p", token);
  expect((await t.rest("/v1/leases/repo%2Fmain/acquire", { json: { ttlMs: 60_000 }, headers: alpha.headers })).status).toBe(200);
  expect((await t.rest(`/v1/agents/${beta.id}`, { method: "DELETE", headers: beta.headers })).status).toBe(204);
  return { alpha, beta };
}

describe("operator reads over REST", () => {
  it("the admin token and the project's own token read its leases and agents; others are refused", async () => {
    await using t = await startTestHub({ config: { authToken: "tok-admin", projectTokens: tokens } });
    const { alpha } = await seed(t, tokens.p);
    for (const token of ["tok-admin", tokens.p]) {
      const got = await t.rest("/v1/leases/repo%2Fmain?project=p", { headers: bearer(token) });
      expect(got.status).toBe(200);
      expect((await jsonOf(got)).lease).toMatchObject({ project: "p", name: "repo/main", holderAgentId: alpha.id, fencingToken: 1 });
      const list = await jsonOf(await t.rest("/v1/leases?project=p", { headers: bearer(token) }));
      expect(list.leases.map((l: { name: string }) => l.name)).toEqual(["repo/main"]);
      const agents = await jsonOf(await t.rest("/v1/agents?project=p&includeOffline=true", { headers: bearer(token) }));
      expect(agents.agents.map((a: { name: string; presence: string }) => [a.name, a.presence])).toEqual([
        ["alpha", "online"],
        ["beta", "offline"],
      ]);
    }
    for (const headers of [bearer(tokens.q), bearer("wrong"), {}]) {
      for (const path of ["/v1/leases/repo%2Fmain?project=p", "/v1/leases?project=p", "/v1/agents?project=p"]) {
        const res = await t.rest(path, { headers });
        expect([res.status, (await jsonOf(res)).code]).toEqual([401, "invalid_auth"]);
      }
    }
    // Without a project named, a read is an agent's, as before.
    const res = await t.rest("/v1/leases", { headers: bearer("tok-admin") });
    expect([res.status, (await jsonOf(res)).code]).toEqual([401, "invalid_agent_identity"]);
  });

  it("an agent reads its own project whatever it names", async () => {
    await using t = await startTestHub({ config: { projectTokens: tokens } });
    const { alpha } = await seed(t, tokens.p);
    const other = await t.register("gamma", "q", tokens.q);
    expect((await jsonOf(await t.rest("/v1/leases?project=p", { headers: other.headers }))).leases).toEqual([]);
    expect((await jsonOf(await t.rest("/v1/leases?project=q", { headers: alpha.headers }))).leases).toHaveLength(1);
  });

  it("ListProjects lists every known project with counts, for the admin only", async () => {
    await using t = await startTestHub({ config: { authToken: "tok-admin", projectTokens: tokens } });
    await seed(t, tokens.p);
    const solo = await t.register("solo", "open/one", "tok-admin");
    const duo = await t.register("duo", "open/one", "tok-admin");
    expect((await t.rest("/v1/messages", { json: { target: "duo", content: "hi" }, headers: solo.headers })).status).toBe(202);
    const res = await t.rest("/v1/ops/projects", { headers: bearer("tok-admin") });
    expect(res.status).toBe(200);
    expect((await jsonOf(res)).projects).toEqual([
      { project: "open/one", agents: 2, onlineAgents: 2, heldLeases: 0, openMessages: 1, hasToken: false },
      { project: "p", agents: 2, onlineAgents: 1, heldLeases: 1, openMessages: 0, hasToken: true },
      { project: "q", agents: 0, onlineAgents: 0, heldLeases: 0, openMessages: 0, hasToken: true },
    ]);
    void duo;
    // A lapsed lease is not held.
    t.clock.advance(60_000);
    const later = await jsonOf(await t.rest("/v1/ops/projects", { headers: bearer("tok-admin") }));
    expect(later.projects.find((x: { project: string }) => x.project === "p").heldLeases).toBe(0);
    const refusedRes = await t.rest("/v1/ops/projects", { headers: bearer(tokens.p) });
    expect([refusedRes.status, (await jsonOf(refusedRes)).code]).toEqual([401, "invalid_auth"]);
  });

  it("the snapshot carries the project's live leases", async () => {
    await using t = await startTestHub({ config: { authToken: "tok-admin", projectTokens: tokens } });
    const { alpha } = await seed(t, tokens.p);
    const snap = await jsonOf(await t.rest("/v1/ops/snapshot?project=p", { headers: bearer("tok-admin") }));
    expect(snap.leases).toEqual([expect.objectContaining({ name: "repo/main", holderAgentId: alpha.id, fencingToken: 1 })]);
  });

  it("a loopback hub without an admin token trusts its callers for these reads", async () => {
    await using t = await startTestHub({ config: { projectTokens: tokens } });
    await seed(t, tokens.p);
    expect((await t.rest("/v1/leases/repo%2Fmain?project=p")).status).toBe(200);
    expect((await t.rest("/v1/agents?project=p")).status).toBe(200);
    expect((await t.rest("/v1/ops/projects")).status).toBe(200);
  });
});

describe.each(protocols)("operator reads over $name", (p) => {
  it("reads a named project with its token, and is refused with another project's", async () => {
    await using t = await startTestHub({ config: { authToken: "tok-admin", projectTokens: tokens } });
    const { alpha } = await seed(t, tokens.p);
    const as = (token: string) => p.make(t.baseUrl, [withHeaders(bearer(token))]);
    const lease = await createClient(LeaseService, as(tokens.p)).getLease({ project: "p", name: "repo/main" });
    expect(lease.lease?.holderAgentId).toBe(alpha.id);
    const agents = await createClient(PresenceService, as("tok-admin")).listAgents({ project: "p", includeOffline: true });
    expect(agents.agents.map((a) => a.name)).toEqual(["alpha", "beta"]);
    const projects = await createClient(OpsService, as("tok-admin")).listProjects({});
    expect(projects.projects.map((x) => x.project)).toEqual(["p", "q"]);
    const r = await refused(createClient(LeaseService, as(tokens.q)).listLeases({ project: "p" }));
    expect([r.code, r.reason]).toEqual(["unauthenticated", "INVALID_AUTH"]);
  });
});
