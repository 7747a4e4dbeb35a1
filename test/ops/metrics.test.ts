import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { callLogLine } from "../../src/ops/observer.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub, type AgentCreds, type TestHub } from "../fixtures/hub.js";
import { parseExposition, sumOf, valueOf, type Family } from "../fixtures/prometheus.js";
import { refused } from "../fixtures/rpc.js";
import { StreamScope, streamProtocols } from "../fixtures/streams.js";
import { raw } from "../fixtures/wire.js";

const LEASES = "kxm.hub.v1.LeaseService";

/** Scrapes `/metrics` and parses it strictly (no blank lines, every sample in its family). */
async function scrape(t: TestHub): Promise<Map<string, Family>> {
  const res = await t.rest("/metrics");
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(text).not.toMatch(/\n\n/);
  return parseExposition(text);
}

/** The calls counter of one face, method and code (0 when the series does not exist yet). */
const calls = (m: Map<string, Family>, face: string, method: string, code: string, service = LEASES) =>
  valueOf(m, "kxm_rpc_requests_total", { face, service: method === "" ? "" : service, method, code }) ?? 0;

const leaseClient = (t: TestHub, protocol: (typeof protocols)[number], as: AgentCreds) =>
  createClient(LeaseService, protocol.make(t.baseUrl, [withHeaders(as.headers)]));

const acquireRest = (t: TestHub, as: AgentCreds, name: string, ttlMs = 60_000) =>
  t.rest(`/v1/leases/${name}/acquire`, { method: "POST", headers: as.headers, json: { ttlMs } });

/** Polls `/metrics` until `check` holds (a stream's end reaches the hub asynchronously). */
async function eventually(t: TestHub, check: (m: Map<string, Family>) => boolean, what: string) {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) if (check(await scrape(t))) return;
  throw new Error(`timed out waiting for ${what}`);
}

describe("metrics exposition", () => {
  it("parses strictly, keeps every reference name, and exports Node's process metrics", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    await acquireRest(t, a, "x");
    const m = await scrape(t);
    const reference = [
      "kxm_online_agents",
      "kxm_messages",
      "kxm_requests_total",
      "kxm_errors_total",
      "kxm_registrations_total",
      "kxm_messages_sent_total",
      "kxm_messages_replied_total",
      "kxm_messages_cancelled_total",
      "kxm_messages_expired_total",
      "kxm_messages_purged_total",
      "kxm_attempt_latency_seconds_total",
      "kxm_metered_cost_usd_total",
      "kxm_leases_granted_total",
      "kxm_leases_refused_total",
      "kxm_leases_released_total",
      "kxm_sync_events_accepted_total",
      "kxm_sync_events_duplicate_total",
      "kxm_sync_events_refused_total",
      "kxm_sync_conflicts_total",
      "kxm_runtime_heartbeats_total",
    ];
    for (const name of reference) expect(m.has(name), name).toBe(true);
    expect(m.get("kxm_rpc_requests_total")?.type).toBe("counter");
    expect(m.get("kxm_rpc_duration_seconds")?.type).toBe("histogram");
    expect(m.get("kxm_open_streams")?.type).toBe("gauge");
    expect(m.get("kxm_held_leases")?.type).toBe("gauge");
    expect(valueOf(m, "process_cpu_user_seconds_total")).toBeGreaterThan(0);
    expect(valueOf(m, "nodejs_heap_size_total_bytes")).toBeGreaterThan(0);
  });

  it("the strict reader refuses blank lines, orphan samples and repeated series", () => {
    expect(() => parseExposition("# TYPE a counter\na 1\n\n# TYPE b gauge\nb 2\n")).toThrow(/blank line/);
    expect(() => parseExposition("a 1\n")).toThrow(/outside its family/);
    expect(() => parseExposition('# TYPE a gauge\na{k="1"} 1\na{k="1"} 2\n')).toThrow(/repeated/);
    expect(() => parseExposition("# TYPE a gauge\na 1")).toThrow(/newline/);
    expect(parseExposition('# HELP a x\n# TYPE a gauge\na{k="q\\"x"} +Inf\n').get("a")?.samples[0]).toEqual({
      name: "a",
      labels: { k: 'q"x' },
      value: Infinity,
    });
  });
});

describe("calls by method and code", () => {
  it("counts a refused REST call and a refused RPC call once each under their Connect code", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    expect((await acquireRest(t, a, "x")).status).toBe(200);
    const before = await scrape(t);
    expect(calls(before, "rest", "AcquireLease", "ok")).toBe(1);
    expect(calls(before, "rest", "AcquireLease", "aborted")).toBe(0);

    expect((await acquireRest(t, b, "x")).status).toBe(409); // lease_held
    const afterRest = await scrape(t);
    expect(calls(afterRest, "rest", "AcquireLease", "aborted")).toBe(1);
    expect(calls(afterRest, "rpc", "AcquireLease", "aborted")).toBe(0);

    expect((await refused(leaseClient(t, protocols[0], b).acquireLease({ name: "x", ttlMs: 60_000 }))).reason).toBe("LEASE_HELD");
    const afterRpc = await scrape(t);
    expect(calls(afterRpc, "rest", "AcquireLease", "aborted")).toBe(1);
    expect(calls(afterRpc, "rpc", "AcquireLease", "aborted")).toBe(1);
    expect(sumOf(afterRpc, "kxm_rpc_requests_total", { service: LEASES, method: "AcquireLease", code: "aborted" })).toBe(2);
    // The latency histogram counts each call once too.
    const count = (face: string) => valueOf(afterRpc, "kxm_rpc_duration_seconds_count", { face, service: LEASES, method: "AcquireLease" });
    expect(count("rest")).toBe(2);
    expect(count("rpc")).toBe(1);
  });

  it("counts each RPC protocol's call once, refusals and successes alike", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    await acquireRest(t, a, "x");
    for (const [i, protocol] of protocols.entries()) {
      await refused(leaseClient(t, protocol, b).acquireLease({ name: "x" }));
      await leaseClient(t, protocol, b).acquireLease({ name: `own-${i}` });
      const m = await scrape(t);
      expect(calls(m, "rpc", "AcquireLease", "aborted"), protocol.name).toBe(i + 1);
      expect(calls(m, "rpc", "AcquireLease", "ok"), protocol.name).toBe(i + 1);
      expect(valueOf(m, "kxm_rpc_duration_seconds_count", { face: "rpc", service: LEASES, method: "AcquireLease" })).toBe(2 * (i + 1));
    }
  });

  it("counts requests refused before any handler: no route, a body too large, a body that does not parse, a parser refusal", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    expect((await t.rest("/v1/nowhere")).status).toBe(404);
    const big = await t.rest("/v1/leases/x/acquire", { method: "POST", headers: a.headers, json: { pad: "x".repeat(300_000) } });
    expect(big.status).toBe(413);
    const garbage = await fetch(`${t.baseUrl}/${LEASES}/AcquireLease`, {
      method: "POST",
      headers: { ...a.headers, "content-type": "application/proto" },
      body: new Uint8Array([0xff, 0xff, 0xff]),
    });
    expect(garbage.status).toBe(400);
    await raw(t.baseUrl, "GET /health HTTP/1.1\r\nbad header\r\n\r\n");
    const m = await scrape(t);
    expect(calls(m, "rest", "", "unimplemented")).toBe(1); // route_not_found
    expect(calls(m, "rest", "AcquireLease", "resource_exhausted")).toBe(1); // payload_too_large
    expect(calls(m, "rpc", "AcquireLease", "invalid_argument")).toBe(1); // protocol_error, before any interceptor
    expect(calls(m, "http", "", "invalid_argument")).toBe(1); // Node's parser refused
    // Ops answers are no calls; the scrapes themselves are not counted.
    expect(sumOf(m, "kxm_rpc_requests_total", { method: "", code: "ok" })).toBe(0);
  });

  it.each(streamProtocols)("keeps a stream over $name in the open-streams gauge until the client closes it", async (protocol) => {
    await using t = await startTestHub();
    using s = new StreamScope();
    const a = await t.register("alpha");
    const open = (m: Map<string, Family>) => valueOf(m, "kxm_open_streams", { kind: "watch_leases" });
    expect(open(await scrape(t))).toBe(0);
    const watch = s.add((signal) => leaseClient(t, protocol, a).watchLeases({}, { signal }));
    expect((await watch.next()).event.case).toBe("snapshot");
    const m = await scrape(t);
    expect(open(m)).toBe(1);
    expect(valueOf(m, "kxm_open_streams", { kind: "subscribe" })).toBe(0);
    expect(valueOf(m, "kxm_open_streams", { kind: "watch_presence" })).toBe(0);
    watch.close();
    await eventually(t, (x) => open(x) === 0, "the stream to close");
    // The call is counted once it is over, as cancelled by the client.
    await eventually(t, (x) => calls(x, "rpc", "WatchLeases", "canceled") === 1, "the stream's call");
    expect(sumOf(await scrape(t), "kxm_rpc_requests_total", { method: "WatchLeases" })).toBe(1);
  });

  it("counts a stream refused before it opens under its code, and never opens it", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok-p" } } });
    const stranger = { id: "agt_x", key: "key_x", name: "x", project: "p", headers: { "x-kxm-agent-id": "agt_x", "x-kxm-agent-key": "key_x" } };
    const e = await refused(
      (async () => {
        for await (const _ of leaseClient(t, protocols[2], stranger).watchLeases({})) void _;
      })(),
    );
    expect(e.reason).toBe("INVALID_AGENT_IDENTITY");
    await eventually(t, (x) => calls(x, "rpc", "WatchLeases", "unauthenticated") === 1, "the stream's call");
    expect(valueOf(await scrape(t), "kxm_open_streams", { kind: "watch_leases" })).toBe(0);
  });
});

describe("gauges", () => {
  it("follows held leases: granted, released, lapsed", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const held = async () => valueOf(await scrape(t), "kxm_held_leases");
    expect(await held()).toBe(0);
    await acquireRest(t, a, "x", 60_000);
    await acquireRest(t, a, "y", 5_000);
    expect(await held()).toBe(2);
    const release = await t.rest("/v1/leases/x/release", { method: "POST", headers: a.headers, json: { fencingToken: 1 } });
    expect(release.status).toBe(200);
    expect(await held()).toBe(1);
    t.clock.advance(5_001); // y lapses
    expect(await held()).toBe(0);
  });

  it("follows online agents", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    await t.register("beta");
    expect(valueOf(await scrape(t), "kxm_online_agents")).toBe(2);
    expect((await t.rest(`/v1/agents/${a.id}`, { method: "DELETE", headers: a.headers })).status).toBe(204);
    expect(valueOf(await scrape(t), "kxm_online_agents")).toBe(1);
  });
});

describe("request ids on the ops routes", () => {
  it.each(["/health", "/ready", "/metrics"])("%s echoes a valid x-request-id and replaces an invalid one", async (path) => {
    await using t = await startTestHub();
    const echoed = await t.rest(path, { headers: { "x-request-id": "abc-1" } });
    expect(echoed.status).toBe(200);
    expect(echoed.headers.get("x-request-id")).toBe("abc-1");
    const replaced = await t.rest(path, { headers: { "x-request-id": "bad id!" } });
    expect(replaced.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
    const none = await t.rest(path);
    expect(none.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
  });

  it("a refused /metrics carries the same request id in its header and body", async () => {
    await using t = await startTestHub({ config: { authToken: "admin-secret" } });
    const res = await t.rest("/metrics", { headers: { "x-request-id": "abc-2" } });
    expect(res.status).toBe(401);
    expect(res.headers.get("x-request-id")).toBe("abc-2");
    expect((await res.json()).requestId).toBe("abc-2");
  });
});

describe("call log lines", () => {
  const tokens = { p: "tok-p-SECRET" };

  it("request_error carries method, route, caller, code and duration, and no secret, on both faces", async () => {
    await using t = await startTestHub({ config: { projectTokens: tokens } });
    const a = await t.register("alpha", "p", tokens.p);
    const b = await t.register("beta", "p", tokens.p);
    await acquireRest(t, a, "x");
    const res = await t.rest("/v1/leases/x/acquire", { method: "POST", headers: { ...b.headers, "x-request-id": "rest-1" }, json: {} });
    expect(res.status).toBe(409);
    await refused(leaseClient(t, protocols[2], b).acquireLease({ name: "x" }, { headers: { "x-request-id": "rpc-1" } }));

    const errorsLogged = t.events.filter((e) => e.event === "request_error").map((e) => e.fields);
    const rest = errorsLogged.find((f) => f.requestId === "rest-1");
    expect(rest).toEqual({
      requestId: "rest-1",
      face: "rest",
      method: `${LEASES}/AcquireLease`,
      route: "POST /v1/leases/{name}/acquire",
      caller: `agent:${b.id}`,
      statusCode: 409,
      code: "lease_held",
      connectCode: "aborted",
      durationMs: expect.any(Number),
    });
    const rpc = errorsLogged.find((f) => f.requestId === "rpc-1");
    expect(rpc).toEqual({
      requestId: "rpc-1",
      face: "rpc",
      method: `${LEASES}/AcquireLease`,
      route: `/${LEASES}/AcquireLease`,
      caller: `agent:${b.id}`,
      code: "lease_held",
      connectCode: "aborted",
      durationMs: expect.any(Number),
    });
    for (const f of [rest!, rpc!]) expect(f.durationMs as number).toBeGreaterThanOrEqual(0);
    const everything = JSON.stringify(t.events);
    for (const secret of [tokens.p, a.key, b.key]) expect(everything).not.toContain(secret);
  });

  it("a refusal before authentication names no caller, and a success logs request_completed", async () => {
    await using t = await startTestHub({ config: { projectTokens: tokens } });
    const res = await t.rest("/v1/leases/x/acquire", {
      method: "POST",
      headers: { "x-kxm-agent-id": "agt_00000000000000000000000000000000", "x-kxm-agent-key": "key_wrong", authorization: `Bearer ${tokens.p}` },
      json: {},
    });
    expect(res.status).toBe(401);
    const refusal = t.events.find((e) => e.event === "request_error")?.fields;
    expect(refusal).toMatchObject({ caller: "unauthenticated", code: "invalid_agent_identity", connectCode: "unauthenticated" });
    expect(JSON.stringify(t.events)).not.toContain("key_wrong");
    const a = await t.register("alpha", "p", tokens.p);
    await acquireRest(t, a, "x");
    const done = t.events.filter((e) => e.event === "request_completed").map((e) => e.fields);
    expect(done.find((f) => f.method === `${LEASES}/AcquireLease`)).toMatchObject({
      face: "rest",
      caller: `agent:${a.id}`,
      code: "ok",
      statusCode: 200,
    });
    expect(done.find((f) => f.route === "POST /v1/agents/register")).toMatchObject({ caller: "project:p", statusCode: 201 });
  });

  it("logs successes at debug, refusals at info and the hub's own failures at error", () => {
    const report = { face: "rpc" as const, service: LEASES, method: "GetLease", route: `/${LEASES}/GetLease`, requestId: "r", caller: "admin", durationMs: 1.5 };
    expect(callLogLine({ ...report, code: "ok" })).toMatchObject({ level: "debug", event: "request_completed" });
    expect(callLogLine({ ...report, code: "not_found", reason: "lease_not_found" })).toMatchObject({
      level: "info",
      event: "request_error",
      fields: { code: "lease_not_found", connectCode: "not_found" },
    });
    expect(callLogLine({ ...report, code: "internal", reason: "internal_error" }).level).toBe("error");
  });
});
