import { createClient } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { expectAuthRefused, expectRestError, expectRestOk } from "../fixtures/rest.js";
import { refused } from "../fixtures/rpc.js";

/**
 * Project names are identities (decision D44): taken exactly as written, never trimmed into
 * another project. Control characters (C0, DEL, C1), bidirectional formatting characters (D74)
 * and outer whitespace are refused with
 * protocol_error naming `project`, wherever a project name enters; everything else the
 * reference accepted (up to 128 characters, `org/repo`, any Unicode) stays valid.
 */

const RUNTIME_ID = "rtm_74573b9df67705d8f6596518";

const refusedNames = [
  ["NUL", "alpha\u0000"],
  ["a C0 control", "al\u001fpha"],
  ["a newline", "alpha\nbeta"],
  ["DEL", "alpha\u007f"],
  ["a C1 control (NEL)", "alpha\u0085beta"],
  ["the last C1 control", "\u009falpha"],
  ["a leading space", " alpha"],
  ["a trailing space", "alpha "],
  ["a leading tab", "\talpha"],
  ["a trailing no-break space", "alpha\u00a0"],
  ["only spaces", "   "],
  ["nothing", ""],
  ["129 characters", "p".repeat(129)],
  ["a right-to-left override", "alpha‮ahpla"],
  ["a first-strong isolate", "org/⁨repo⁩"],
  ["a right-to-left mark", "‏alpha"],
  ["an Arabic letter mark", "alpha؜"],
] as const;

const acceptedNames = ["org/repo", "alpha/repo/sub", "a b", "Ünïcødé/プロジェクト", "p".repeat(128), "constructor", "__proto__"];

describe("project names over REST", () => {
  it.each(refusedNames)("RegisterAgent refuses %s: 400 protocol_error naming project, nothing registered", async (_what, project) => {
    await using t = await startTestHub();
    const body = await expectRestError(await t.rest("/v1/agents/register", { json: { name: "alpha", project } }), 400, "protocol_error");
    expect(body.error).toMatch(/^project /);
    const witness = await t.register("witness", "alpha");
    const agents = await expectRestOk(await t.rest("/v1/agents?includeOffline=true", { headers: witness.headers }));
    expect(agents.agents.map((a: { name: string }) => a.name)).toEqual(["witness"]);
  });

  it.each(acceptedNames)("RegisterAgent accepts %j exactly as written", async (project) => {
    await using t = await startTestHub();
    const body = await expectRestOk(await t.rest("/v1/agents/register", { json: { name: "alpha", project } }), 201);
    expect(body.agent.project).toBe(project);
  });

  it("refuses the name before the token check, and a runtime heartbeat, a sync push and the snapshot alike", async () => {
    await using t = await startTestHub({ config: { authToken: "admin", projectTokens: { p: "tok-p" } } });
    const bad = "p\u0007";
    const asAdmin = { authorization: "Bearer admin" };
    await expectRestError(await t.rest("/v1/agents/register", { json: { name: "alpha", project: " p" } }), 400, "protocol_error", {
      message: "project must not start or end with whitespace",
    });
    await expectRestError(await t.rest("/v1/runtime/presence", { json: { project: bad, runtimeId: RUNTIME_ID } }), 400, "protocol_error", {
      message: "project must not contain control characters",
    });
    await expectRestError(
      await t.rest("/v1/sync/events", { headers: { authorization: "Bearer tok-p" }, json: { project: "p ", runtimeId: RUNTIME_ID, events: [] } }),
      400,
      "protocol_error",
    );
    await expectRestError(await t.rest(`/v1/ops/snapshot?project=${encodeURIComponent(bad)}`, { headers: asAdmin }), 400, "protocol_error");
    await expectRestError(await t.rest(`/v1/ops/snapshot?project=${encodeURIComponent("p ")}`, { headers: asAdmin }), 400, "protocol_error");
    // " p" is not "p": once it was trimmed into p and checked against p's token.
    await expectRestOk(await t.rest("/v1/ops/snapshot?project=p", { headers: asAdmin }));
  });

  it("a project called constructor or __proto__ is an ordinary project, not a member of Object.prototype", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    // No token of their own and no admin token: open, like any other such project.
    await expectRestOk(await t.rest("/v1/agents/register", { json: { name: "a", project: "constructor" } }), 201);
    await expectRestOk(await t.rest("/v1/agents/register", { json: { name: "a", project: "toString" } }), 201);
    await expectAuthRefused(await t.rest("/v1/agents/register", { json: { name: "a", project: "p" } }));
  });

  it("a project called __proto__ keeps the token configured for it", async () => {
    await using t = await startTestHub({ config: { projectTokens: Object.fromEntries([["__proto__", "tok-proto"]]) } });
    await expectAuthRefused(await t.rest("/v1/agents/register", { json: { name: "a", project: "__proto__" } }));
    const creds = await t.register("a", "__proto__", "tok-proto");
    expect(creds.project).toBe("__proto__");
  });
});

describe.each(protocols)("project names over $name", (protocol) => {
  const client = <S extends Parameters<typeof createClient>[0]>(service: S, baseUrl: string, headers: Record<string, string> = {}) =>
    createClient(service, protocol.make(baseUrl, [withHeaders(headers)]));

  it("RegisterAgent refuses control characters and outer whitespace: invalid_argument PROTOCOL_ERROR, field project", async () => {
    await using t = await startTestHub();
    const presence = client(PresenceService, t.baseUrl);
    for (const project of ["alpha\u0000", "alpha\u0085", " alpha", "alpha\t"]) {
      expect(await refused(presence.registerAgent({ name: "alpha", project }))).toMatchObject({
        code: "invalid_argument",
        reason: "PROTOCOL_ERROR",
        metadata: { field: "project" },
      });
    }
    const ok = await presence.registerAgent({ name: "alpha", project: "org/repo" });
    expect(ok.agent?.project).toBe("org/repo");
  });

  it("the snapshot refuses a bad project name: PROTOCOL_ERROR", async () => {
    await using t = await startTestHub({ config: { authToken: "admin" } });
    const ops = client(OpsService, t.baseUrl, { authorization: "Bearer admin" });
    expect(await refused(ops.getSnapshot({ project: "p\u001b" }))).toMatchObject({ reason: "PROTOCOL_ERROR", metadata: { field: "project" } });
  });

  if (!protocol.name.startsWith("grpc-web")) {
    it("WatchLeases with a token refuses a bad project name: PROTOCOL_ERROR", async () => {
      await using t = await startTestHub({ config: { authToken: "admin" } });
      const leases = client(LeaseService, t.baseUrl, { authorization: "Bearer admin" });
      const first = async () => {
        for await (const frame of leases.watchLeases({ project: "p " })) return frame;
      };
      expect(await refused(first())).toMatchObject({ reason: "PROTOCOL_ERROR", metadata: { field: "project" } });
    });
  }
});
