import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { expectRestError } from "../fixtures/rest.js";
import { refused } from "../fixtures/rpc.js";

/**
 * `.` and `..` name no lease and no project: a URL path takes them for its own dot segments, so
 * no REST call (the CLI's, `kxm-hub ops release-lease` included) could name such a lease again
 * to renew or release it, nor such a project's tokens. A lease of that name was granted over
 * Connect and then held until it lapsed.
 */
describe("dot names", () => {
  it.each([".", ".."])("AcquireLease of %j is protocol_error naming resource, and nothing is granted", async (name) => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const leases = createClient(LeaseService, protocols[1]!.make(t.baseUrl, [withHeaders(a.headers)]));
    expect(await refused(leases.acquireLease({ name, ttlMs: 60_000 }))).toMatchObject({ code: "invalid_argument", reason: "PROTOCOL_ERROR", metadata: { field: "resource" } });
    expect((await leases.listLeases({})).leases).toEqual([]);
  });

  it.each([".", ".."])("a project named %j is refused at registration", async (project) => {
    await using t = await startTestHub();
    await expectRestError(await t.rest("/v1/agents/register", { json: { name: "alpha", project } }), 400, "protocol_error");
  });
});
