import { describe, it, expect } from "vitest";
import { create, createFileRegistry, setExtension, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import {
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  FileDescriptorProtoSchema,
  MethodOptionsSchema,
} from "@bufbuild/protobuf/wkt";
import { buildRestRoutes, decodeRestRequest, matchRestRoute, RestPathError, type RestRoute } from "../../src/transcode/http-rules.js";
import { RestFieldError } from "../../src/transcode/rest-json.js";
import { http } from "../../gen/ts/google/api/annotations_pb.js";
import { HttpRuleSchema } from "../../gen/ts/google/api/http_pb.js";
import { LeaseService, type AcquireLeaseRequest } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService, type ListAgentsRequest } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { PeerService, MessageStatus, type ListMessagesRequest } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { SyncService, type GetCursorRequest } from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { OpsService } from "../../gen/ts/kxm/hub/v1/ops_pb.js";

const ALL: DescService[] = [LeaseService, PresenceService, PeerService, SyncService, OpsService];
const routes = buildRestRoutes(ALL);

const describeRoute = (r: RestRoute) => `${r.verb} ${r.template} ${r.method.name} body=${r.body}${r.streaming ? " (events)" : ""}`;

describe("buildRestRoutes", () => {
  it("builds every annotated method of the hub, the server streams as event streams", () => {
    expect(routes.map(describeRoute)).toEqual([
      "POST /v1/leases/{name}/acquire AcquireLease body=*",
      "POST /v1/leases/{name}/renew RenewLease body=*",
      "POST /v1/leases/{name}/release ReleaseLease body=*",
      "GET /v1/leases/{name} GetLease body=",
      "POST /v1/leases/{name}/check CheckFence body=*",
      "GET /v1/leases ListLeases body=",
      "GET /v1/watch/leases WatchLeases body= (events)",
      "POST /v1/agents/register RegisterAgent body=*",
      "POST /v1/agents/{agent_id}/heartbeat Heartbeat body=*",
      "DELETE /v1/agents/{agent_id} UnregisterAgent body=",
      "GET /v1/agents ListAgents body=",
      "POST /v1/runtime/presence ReportRuntimePresence body=*",
      "GET /v1/watch/presence WatchPresence body= (events)",
      "POST /v1/messages SendMessage body=*",
      "POST /v1/messages/{message_id}/ack AckMessage body=*",
      "POST /v1/messages/{message_id}/reply ReplyMessage body=*",
      "DELETE /v1/messages/{message_id} CancelMessage body=",
      "GET /v1/messages/{message_id} GetMessage body=",
      "GET /v1/messages ListMessages body=",
      "GET /v1/inbox ReadInbox body=",
      "POST /v1/sync/events PushEvents body=*",
      "GET /v1/sync/runs/{project_id}/{run_id}/cursor GetCursor body=",
      "GET /v1/ops/snapshot GetSnapshot body=",
      "GET /v1/ops/projects ListProjects body=",
      "GET /v1/watch/projects WatchProjects body= (events)",
      "GET /v1/watch/messages WatchOpenMessages body= (events)",
      "GET /v1/watch/runs WatchRuns body= (events)",
      "GET /v1/watch/project WatchProject body= (events)",
      "POST /v1/ops/projects/{project}/leases/{name}/release ForceReleaseLease body=*",
      "DELETE /v1/ops/projects/{project}/agents/{agent_id} EvictAgent body=",
      "POST /v1/ops/projects/{project}/tokens CreateProjectToken body=*",
      "GET /v1/ops/projects/{project}/tokens ListProjectTokens body=",
      "DELETE /v1/ops/projects/{project}/tokens/{token_id} RevokeProjectToken body=",
      "GET /v1/ops/audit ListAuditEvents body=",
    ]);
    expect(routes.every((r) => ALL.includes(r.service))).toBe(true);
  });

  // A throw-away service whose methods carry the given rules, built from a hand-written
  // descriptor so that invalid annotations can be tried.
  function fakeService(rules: MessageInitShape<typeof HttpRuleSchema>[], streaming = false): DescService {
    const str = (name: string, number: number) => ({ name, number, jsonName: name, type: FieldDescriptorProto_Type.STRING, label: FieldDescriptorProto_Label.OPTIONAL });
    const file = create(FileDescriptorProtoSchema, {
      name: "fake/v1/fake.proto",
      package: "fake.v1",
      syntax: "proto3",
      messageType: [
        { name: "Req", field: [str("name", 1), str("other", 2), { ...str("n", 3), type: FieldDescriptorProto_Type.INT32 }, { ...str("sub", 4), type: FieldDescriptorProto_Type.MESSAGE, typeName: ".fake.v1.Res" }] },
        { name: "Res" },
      ],
      service: [
        {
          name: "FakeService",
          method: rules.map((rule, i) => {
            const options = create(MethodOptionsSchema);
            setExtension(options, http, create(HttpRuleSchema, rule));
            return { name: `M${i}`, inputType: ".fake.v1.Req", outputType: ".fake.v1.Res", options, serverStreaming: streaming };
          }),
        },
      ],
    });
    return createFileRegistry(file, () => undefined).getService("fake.v1.FakeService")!;
  }
  const rule = (pattern: string, verb: "get" | "post" = "get", extra: object = {}) => ({ pattern: { case: verb, value: pattern }, ...extra });

  it("accepts {field} and {field=*} on string fields", () => {
    const built = buildRestRoutes([fakeService([rule("/v1/a/{name=*}"), rule("/v1/b/{name}/{other}", "post", { body: "*" })])]);
    expect(built.map((r) => `${r.verb} ${r.template}`)).toEqual(["GET /v1/a/{name=*}", "POST /v1/b/{name}/{other}"]);
    expect(matchRestRoute(built, "GET", "/v1/a/x")?.params).toEqual({ name: "x" });
  });

  it("maps a server stream only as a GET without a body", () => {
    expect(buildRestRoutes([fakeService([rule("/v1/a")], true)]).map((r) => [r.verb, r.template, r.streaming])).toEqual([["GET", "/v1/a", true]]);
    expect(() => buildRestRoutes([fakeService([rule("/v1/a", "post", { body: "*" })], true)])).toThrow(/a server stream maps to a GET without a body/);
  });

  it.each([
    ["/v1/{name=**}", /unsupported path segment "\{name=\*\*\}"/],
    ["/v1/{name=a/*}", /unsupported path segment/],
    ["/v1/{sub.name}", /unsupported path segment "\{sub\.name\}"/],
    ["/v1/*", /unsupported path segment "\*"/],
    ["/v1/a:verb", /unsupported path segment "a:verb"/],
    ["/v1//a", /unsupported path segment ""/],
    ["v1/a", /must start with/],
    ["/v1/{n}", /\{n\} must name a top-level string field of fake.v1.Req/],
    ["/v1/{sub}", /\{sub\} must name a top-level string field/],
    ["/v1/{missing}", /\{missing\} must name a top-level string field/],
    ["/v1/{name}/{name}", /appears twice/],
  ])("fails loudly on template %s", (template, error) => {
    expect(() => buildRestRoutes([fakeService([rule(template)])])).toThrow(error);
  });

  it("fails loudly on unsupported rule features and ambiguous routes", () => {
    expect(() => buildRestRoutes([fakeService([rule("/v1/a", "post", { body: "name" })])])).toThrow(/body must be "" or "\*"/);
    expect(() => buildRestRoutes([fakeService([{ pattern: { case: "custom", value: { kind: "HEAD", path: "/v1/a" } } }])])).toThrow(/custom/);
    expect(() => buildRestRoutes([fakeService([rule("/v1/a", "get", { additionalBindings: [rule("/v1/b")] })])])).toThrow(/additional_bindings/);
    expect(() => buildRestRoutes([fakeService([rule("/v1/a", "get", { responseBody: "name" })])])).toThrow(/response_body/);
    expect(() => buildRestRoutes([fakeService([rule("/v1/{name}/x"), rule("/v1/y/{name}")])])).toThrow(/ambiguous REST routes/);
    expect(() => buildRestRoutes([fakeService([rule("/v1/{name}"), rule("/v1/{other}")])])).toThrow(/ambiguous/);
    // Same shape, different verbs, or different literal counts: fine.
    expect(buildRestRoutes([fakeService([rule("/v1/{name}"), rule("/v1/{name}", "post"), rule("/v1/x")])])).toHaveLength(3);
  });
});

describe("matchRestRoute", () => {
  const match = (verb: string, path: string) => matchRestRoute(routes, verb, path);

  it("prefers literal segments over variables", () => {
    const m = match("POST", "/v1/agents/register");
    expect(m?.route.method.name).toBe("RegisterAgent");
    expect(m?.params).toEqual({});
    expect(match("POST", "/v1/agents/agt_1/heartbeat")?.params).toEqual({ agent_id: "agt_1" });
  });

  it("decodes variables after matching, so %2F stays inside one segment", () => {
    const m = match("POST", "/v1/leases/a%2Fb/acquire");
    expect(m?.route.method.name).toBe("AcquireLease");
    expect(m?.params).toEqual({ name: "a/b" });
    expect(match("GET", "/v1/leases/%E2%9C%93%20x")?.params).toEqual({ name: "✓ x" });
    expect(match("POST", "/v1/leases/a/b/acquire")).toBeUndefined();
  });

  it("throws RestPathError on a malformed escape", () => {
    expect(() => match("POST", "/v1/leases/%E0%A4%A/acquire")).toThrow(RestPathError);
    expect(() => match("POST", "/v1/leases/%zz/acquire")).toThrow("malformed percent-escape in path");
  });

  it("does not match another verb, empty segments or extra segments", () => {
    expect(match("GET", "/v1/leases/x/acquire")).toBeUndefined();
    expect(match("PUT", "/v1/leases")).toBeUndefined();
    expect(match("GET", "/v1/leases/")).toBeUndefined();
    expect(match("GET", "/v1/leases//")).toBeUndefined();
    expect(match("GET", "/v1/leases/x/y")).toBeUndefined();
    expect(match("GET", "v1/leases")).toBeUndefined();
    expect(match("GET", "/v1/Leases")).toBeUndefined();
  });

  it("answers a path asked again as the first time, by verb, and keeps refusing what it refused", () => {
    const paths = ["/v1/agents/agt_9", "/v1/leases/q%2Fr", "/v1/leases/q%2Fr/acquire", "/v1/leases/x/y", "/v1/leases/%zz/acquire", `/v1/leases/${"n".repeat(600)}/acquire`];
    const seen = (verb: string, path: string) => {
      try {
        const m = match(verb, path);
        return m ? `${m.route.method.name} ${JSON.stringify(m.params)}` : "none";
      } catch (e) {
        return (e as Error).constructor.name;
      }
    };
    const first = ["GET", "DELETE", "POST"].flatMap((verb) => paths.map((path) => seen(verb, path)));
    expect(first.filter((s) => s !== "none")).toEqual([
      "GetLease {\"name\":\"q/r\"}",
      "UnregisterAgent {\"agent_id\":\"agt_9\"}",
      "AcquireLease {\"name\":\"q/r\"}",
      "RestPathError",
      `AcquireLease {"name":"${"n".repeat(600)}"}`,
    ]);
    expect(["GET", "DELETE", "POST"].flatMap((verb) => paths.map((path) => seen(verb, path)))).toEqual(first);
    // What a match hands out cannot change what the next one of the path is answered.
    expect(() => ((match("DELETE", "/v1/agents/agt_9")!.params as Record<string, string>).agent_id = "agt_x")).toThrow(TypeError);
    expect(match("DELETE", "/v1/agents/agt_9")?.params).toEqual({ agent_id: "agt_9" });
  });

  it("matches DELETE and multi-variable routes", () => {
    const del = match("DELETE", "/v1/agents/agt_1");
    expect(del?.route.method.name).toBe("UnregisterAgent");
    expect(del?.params).toEqual({ agent_id: "agt_1" });
    const cur = match("GET", "/v1/sync/runs/p/r/cursor");
    expect(cur?.route.method.name).toBe("GetCursor");
    expect(cur?.params).toEqual({ project_id: "p", run_id: "r" });
    expect(match("GET", "/v1/leases")?.route.method.name).toBe("ListLeases");
  });
});

describe("decodeRestRequest", () => {
  it("takes the JSON body for body '*' and lets path variables win", () => {
    const m = matchRestRoute(routes, "POST", "/v1/leases/a%2Fb/acquire")!;
    const req = decodeRestRequest(m.route, m.params, new URLSearchParams("ttlMs=1"), { name: "evil", ttlMs: 6000 }) as AcquireLeaseRequest;
    expect(req.$typeName).toBe("kxm.hub.v1.AcquireLeaseRequest");
    expect([req.name, req.ttlMs]).toEqual(["a/b", 6000]);
    const empty = decodeRestRequest(m.route, m.params, new URLSearchParams(), undefined) as AcquireLeaseRequest;
    expect([empty.name, empty.ttlMs]).toEqual(["a/b", undefined]);
  });

  it("surfaces body errors as RestFieldError", () => {
    const m = matchRestRoute(routes, "POST", "/v1/leases/x/acquire")!;
    expect(() => decodeRestRequest(m.route, m.params, new URLSearchParams(), { ttlMs: "5000" })).toThrow(RestFieldError);
  });

  it("takes query parameters for GET and DELETE, ignoring any body", () => {
    const list = matchRestRoute(routes, "GET", "/v1/agents")!;
    const req = decodeRestRequest(list.route, list.params, new URLSearchParams("includeOffline=true"), { includeOffline: false }) as ListAgentsRequest;
    expect(req.includeOffline).toBe(true);
    const msgs = matchRestRoute(routes, "GET", "/v1/messages")!;
    const lm = decodeRestRequest(msgs.route, msgs.params, new URLSearchParams("status=queued&status=replied&pageSize=5"), undefined) as ListMessagesRequest;
    expect([lm.status, lm.pageSize]).toEqual([[MessageStatus.QUEUED, MessageStatus.REPLIED], 5]);
    const cur = matchRestRoute(routes, "GET", "/v1/sync/runs/p%20q/r/cursor")!;
    const gc = decodeRestRequest(cur.route, cur.params, new URLSearchParams("project=hub&runId=zzz"), undefined) as GetCursorRequest;
    expect([gc.project, gc.projectId, gc.runId]).toEqual(["hub", "p q", "r"]);
  });
});
