import { describe, expect, it } from "vitest";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { expectRestError, expectRestOk, REQUEST_ID, type Json } from "../fixtures/rest.js";

// Bad input on the REST face never answers 500 and never changes state: reference-hub.md
// §1.2–1.4 (body handling, request ids, response headers) with decision D41 (a malformed
// percent-escape is a 400; a body-less POST needs no content type).

const MAX_BODY = 262_144;

/** The state a refused write must leave alone: agents of project p and lease "db". */
async function snapshot(t: TestHub, as: AgentCreds) {
  const agents = (await expectRestOk(await t.rest("/v1/agents?includeOffline=true", { headers: as.headers }))).agents as Json[];
  const leases = (await expectRestOk(await t.rest("/v1/leases?includeExpired=true", { headers: as.headers }))).leases as Json[];
  return { agents: agents.map((a) => [a.id, a.name, a.online]), leases };
}

/** Runs `request` against a hub with one agent and asserts it changed nothing. */
async function expectNoChange(t: TestHub, request: (a: AgentCreds) => Promise<Response>): Promise<Response> {
  const a = await t.register("alpha");
  const before = await snapshot(t, a);
  const res = await request(a);
  expect(await snapshot(t, a)).toEqual(before);
  expect(t.counters.get("leasesGranted") ?? 0).toBe(0);
  expect(t.counters.get("registrations")).toBe(1);
  return res;
}

/** Sends bytes (fetch adds no content type of its own to a Uint8Array body). */
const raw = (t: TestHub, path: string, body: string, contentType: string | null, a?: AgentCreds, method = "POST") => {
  const headers: Record<string, string> = { ...a?.headers };
  if (contentType !== null) headers["content-type"] = contentType;
  return t.rest(path, { method, body: new TextEncoder().encode(body), headers });
};

describe("malformed bodies", () => {
  const routes = [
    { route: "register", path: () => "/v1/agents/register" },
    { route: "acquire", path: () => "/v1/leases/db/acquire" },
    { route: "heartbeat", path: (a: AgentCreds) => `/v1/agents/${a.id}/heartbeat` },
    { route: "runtime presence", path: () => "/v1/runtime/presence" },
  ];
  const bodies = [
    { what: "malformed JSON", body: '{"name": "x",' },
    { what: "trailing garbage", body: '{"name": "x"} x' },
    { what: "a JSON array", body: '[{"name":"x","project":"p"}]' },
    { what: "JSON null", body: "null" },
    { what: "a JSON number", body: "42" },
    { what: "a JSON string", body: '"hello"' },
    { what: "JSON true", body: "true" },
    { what: "control characters", body: "\u0000\u0001{" },
  ];
  const cases = routes.flatMap((r) => bodies.map((b) => ({ ...r, ...b })));

  it.each(cases)("$route with $what → 400 invalid_json, nothing changes", async ({ path, body }) => {
    await using t = await startTestHub();
    const res = await expectNoChange(t, (a) => raw(t, path(a), body, "application/json", a));
    await expectRestError(res, 400, "invalid_json");
  });

  const types = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "json"];
  it.each(routes.flatMap((r) => types.map((type) => ({ ...r, type }))))(
    "$route with content type $type and a body → 415 unsupported_media_type, nothing changes",
    async ({ path, type }) => {
      await using t = await startTestHub();
      const res = await expectNoChange(t, (a) => raw(t, path(a), '{"name":"x","project":"p","ttlMs":5000}', type, a));
      await expectRestError(res, 415, "unsupported_media_type");
    },
  );

  it.each(routes)("$route with a body and no content type → 415 unsupported_media_type", async ({ path }) => {
    await using t = await startTestHub();
    const res = await expectNoChange(t, (a) => raw(t, path(a), '{"name":"x","project":"p"}', null, a));
    await expectRestError(res, 415, "unsupported_media_type");
  });

  it("accepts a JSON content type in any case and with parameters", async () => {
    await using t = await startTestHub();
    await expectRestOk(await raw(t, "/v1/agents/register", '{"name":"x","project":"p"}', "Application/JSON; charset=UTF-8"), 201);
  });

  it.each(routes)("$route with a body over 262144 bytes → 413 payload_too_large", async ({ path }) => {
    await using t = await startTestHub();
    const big = JSON.stringify({ name: "x", project: "p", pad: "y".repeat(MAX_BODY) });
    const res = await expectNoChange(t, (a) => raw(t, path(a), big, "application/json", a));
    await expectRestError(res, 413, "payload_too_large");
  });

  // Regression: the hub stopped reading an oversized body but answered 413 with
  // "connection: keep-alive"; the unread bytes wedged the connection, so a client reusing it
  // (undici does) hung ~5 s on its next, valid request and then got ECONNRESET.
  it("closes the HTTP/1.1 connection after a 413 so the next requests are served", async () => {
    await using t = await startTestHub();
    const huge = new Uint8Array(2_000_000).fill(32);
    const res = await t.rest("/v1/agents/register", { method: "POST", body: huge, headers: { "content-type": "application/json" } });
    expect(res.headers.get("connection")).toBe("close");
    await expectRestError(res, 413, "payload_too_large");
    for (const name of ["a", "b", "c"]) {
      await expectRestOk(await t.rest("/v1/agents/register", { json: { name, project: "p" }, signal: AbortSignal.timeout(3_000) }), 201);
    }
  });

  it("accepts a body of exactly 262144 bytes", async () => {
    await using t = await startTestHub();
    const base = JSON.stringify({ name: "x", project: "p", pad: "" });
    const body = JSON.stringify({ name: "x", project: "p", pad: "y".repeat(MAX_BODY - base.length) });
    expect(Buffer.byteLength(body)).toBe(MAX_BODY);
    await expectRestOk(await raw(t, "/v1/agents/register", body, "application/json"), 201);
  });

  it("ignores unknown body fields", async () => {
    await using t = await startTestHub();
    const reg = await expectRestOk(
      await t.rest("/v1/agents/register", { json: { name: "x", project: "p", colour: "blue", nested: { a: [1] }, __proto__x: 1 } }),
      201,
    );
    expect(reg.agent).not.toHaveProperty("colour");
    const a = { "x-kxm-agent-id": reg.agent.id, "x-kxm-agent-key": reg.agentKey };
    const body = await expectRestOk(await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 5_000, holder: "someone", project: "q" }, headers: a }));
    expect(body.lease).toMatchObject({ resource: "p/db", project: "p", fencingToken: 1 });
  });
});

describe("wrong JSON types → 400 protocol_error, nothing changes", () => {
  const cases: { what: string; path: (a: AgentCreds) => string; json: unknown }[] = [
    { what: "register name as a number", path: () => "/v1/agents/register", json: { name: 42, project: "p" } },
    { what: "register project as an object", path: () => "/v1/agents/register", json: { name: "x", project: { id: "p" } } },
    { what: "register host as a list", path: () => "/v1/agents/register", json: { name: "x", project: "p", host: ["h"] } },
    { what: "register model as a boolean", path: () => "/v1/agents/register", json: { name: "x", project: "p", model: true } },
    { what: "acquire ttlMs as a string", path: () => "/v1/leases/db/acquire", json: { ttlMs: "5000" } },
    { what: "acquire ttlMs as a fraction", path: () => "/v1/leases/db/acquire", json: { ttlMs: 5000.5 } },
    { what: "acquire ttlMs beyond int32", path: () => "/v1/leases/db/acquire", json: { ttlMs: 2 ** 40 } },
    { what: "renew fencingToken as a string", path: () => "/v1/leases/db/renew", json: { fencingToken: "1" } },
    { what: "runtime id as a number", path: () => "/v1/runtime/presence", json: { project: "p", runtimeId: 1 } },
  ];

  it.each(cases)("$what", async ({ path, json }) => {
    await using t = await startTestHub();
    const res = await expectNoChange(t, (a) => t.rest(path(a), { json, headers: a.headers }));
    await expectRestError(res, 400, "protocol_error");
  });

  it.each(["?pageSize=ten", "?pageSize=9007199254740993", "?pageSize="])("list leases with %s", async (query) => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    await expectRestError(await t.rest(`/v1/leases${query}`, { headers: a.headers }), 400, "protocol_error");
  });

  it("reads includeOffline as true only for the exact string \"true\"", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    expect((await t.rest(`/v1/agents/${b.id}`, { method: "DELETE", headers: b.headers })).status).toBe(204);
    for (const [query, names] of [
      ["?includeOffline=true", ["alpha", "beta"]],
      ["?includeOffline=1", ["alpha"]],
      ["?includeOffline=yes", ["alpha"]],
      ["?includeOffline=", ["alpha"]],
      ["?includeOffline=True", ["alpha"]],
    ] as const) {
      const body = await expectRestOk(await t.rest(`/v1/agents${query}`, { headers: a.headers }));
      expect(body.agents.map((x: Json) => x.name), query).toEqual(names);
    }
  });
});

describe("paths", () => {
  it.each(["%E0%A4%A", "%", "%zz", "a%2"])("a malformed percent-escape (%s) in a lease name → 400 protocol_error", async (name) => {
    await using t = await startTestHub();
    const res = await expectNoChange(t, (a) => t.rest(`/v1/leases/${name}/acquire`, { json: { ttlMs: 5_000 }, headers: a.headers }));
    await expectRestError(res, 400, "protocol_error");
  });

  it.each(["project=caf%E9", "project=%", "includeOffline=%zz", "a%2=1"])("a query escape that is no UTF-8 (%s) → 400 protocol_error, never a name with U+FFFD in it", async (query) => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    await expectRestError(await t.rest(`/v1/agents?${query}`, { headers: a.headers }), 400, "protocol_error");
    // What decodes is read as sent, "+" as a space.
    await expectRestOk(await t.rest("/v1/agents?includeOffline=true&x=%C3%A9+b", { headers: a.headers }));
  });

  it("a malformed percent-escape in an agent id → 400 protocol_error", async () => {
    await using t = await startTestHub();
    const res = await expectNoChange(t, (a) => t.rest("/v1/agents/%E0%A4%A/heartbeat", { method: "POST", headers: a.headers }));
    await expectRestError(res, 400, "protocol_error");
  });

  it.each([
    { method: "GET", path: "/v1/agents/register" },
    { method: "PUT", path: "/v1/leases/x/acquire" },
    { method: "GET", path: "/v1/leases/x/acquire" },
    { method: "PATCH", path: "/v1/agents" },
    { method: "POST", path: "/v1/agents" },
    { method: "POST", path: "/v1/leases" },
    { method: "DELETE", path: "/v1/leases/x" },
    { method: "GET", path: "/v1/nothing" },
    { method: "POST", path: "/" },
    { method: "GET", path: "/ui" },
    { method: "GET", path: "/assets/app.js" },
    { method: "POST", path: "/v1/leases//acquire" },
    { method: "POST", path: "/v1/leases/a/b/acquire" },
    { method: "GET", path: "/v1/agents/" },
    { method: "POST", path: "/v1/leases/x/acquire/" },
  ])("$method $path → 404 route_not_found", async ({ method, path }) => {
    await using t = await startTestHub();
    const res = await expectNoChange(t, (a) => t.rest(path, { method, headers: a.headers }));
    await expectRestError(res, 404, "route_not_found");
  });
});

describe("response headers and request ids", () => {
  it("generates req_<32 hex> when no x-request-id is sent, on success and on error", async () => {
    await using t = await startTestHub();
    const ok = await t.rest("/v1/agents/register", { json: { name: "x", project: "p" } });
    expect(ok.headers.get("x-request-id")).toMatch(REQUEST_ID);
    expect(ok.headers.get("cache-control")).toBe("no-store");
    expect(ok.headers.get("content-type")).toBe("application/json; charset=utf-8");
    await ok.arrayBuffer();
    await expectRestError(await t.rest("/v1/nothing"), 404, "route_not_found");
  });

  it.each(["abc-123", "A.b_c-9", "x".repeat(80)])("echoes a valid x-request-id (%s)", async (id) => {
    await using t = await startTestHub();
    const ok = await t.rest("/v1/agents/register", { json: { name: "x", project: "p" }, headers: { "x-request-id": id } });
    expect(ok.status).toBe(201);
    expect(ok.headers.get("x-request-id")).toBe(id);
    await ok.arrayBuffer();
    await expectRestError(await t.rest("/v1/agents/register", { json: {}, headers: { "x-request-id": id } }), 400, "protocol_error", {
      requestId: id,
    });
    await expectRestError(await t.rest("/v1/nothing", { headers: { "x-request-id": id } }), 404, "route_not_found", { requestId: id });
    await expectRestError(
      await t.rest("/v1/agents/register", { method: "POST", body: "[", headers: { "x-request-id": id, "content-type": "application/json" } }),
      400,
      "invalid_json",
      { requestId: id },
    );
  });

  it.each(["bad id!", "x".repeat(81), "a/b", "a b", "id;1"])("replaces an invalid x-request-id (%j) with req_<32 hex>", async (id) => {
    await using t = await startTestHub();
    await expectRestError(await t.rest("/v1/nothing", { headers: { "x-request-id": id } }), 404, "route_not_found");
    const ok = await t.rest("/v1/agents/register", { json: { name: "x", project: "p" }, headers: { "x-request-id": id } });
    expect(ok.status).toBe(201);
    expect(ok.headers.get("x-request-id")).toMatch(REQUEST_ID);
    await ok.arrayBuffer();
  });

  it("answers refusals of the RPC handlers with the REST error body and headers", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    await expectRestError(await t.rest("/v1/leases/db", { headers: a.headers }), 404, "lease_not_found");
    await expectRestError(await t.rest("/v1/leases/db/renew", { json: {}, headers: a.headers }), 400, "lease_token_required");
  });
});
