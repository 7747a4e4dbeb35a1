import type http2 from "node:http2";
import zlib from "node:zlib";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { errorFromJsonBytes, endStreamFromJson } from "@connectrpc/connect/protocol-connect";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { withHeaders } from "../fixtures/clients.js";
import { Frames, idle, streamProtocols } from "../fixtures/streams.js";
import { envelope, grpcWebError, h2, parsed, raw, reasonOf } from "../fixtures/wire.js";

/**
 * Regression tests for requests that once crashed the hub or got a 5xx / `internal`: each now
 * gets a typed client error, and the hub keeps serving.
 */

let t: TestHub;
beforeEach(async () => {
  t = await startTestHub();
});
afterEach(() => t.close());

const alive = async () => expect((await t.rest("/health")).status).toBe(200);

/** Bytes that are no RegisterAgentRequest: field 1 (string) whose length varint never ends. */
const garbage = Uint8Array.from([0x0a, 0xff, 0xff]);
const registerPath = "/kxm.hub.v1.PresenceService/RegisterAgent";

describe("request targets", () => {
  it.each(["//", "///", "//[", "//a:b", "//%zz", "//evil/health"])(
    "answers %s over HTTP/1.1 with route_not_found, and lives",
    async (target) => {
      const r = parsed(await raw(t.baseUrl, `GET ${target} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n`));
      expect(r.status).toBe(404);
      expect(r.json).toMatchObject({ code: "route_not_found", requestId: expect.any(String) });
      await alive();
    },
  );

  it.each(["//", "///", "//[", "//a:b", "//%zz"])("answers :path %s over HTTP/2 with route_not_found", async (path) => {
    const r = await h2(t.baseUrl, { ":method": "GET", ":path": path });
    expect(r.status).toBe(404);
    expect(JSON.parse(r.body.toString())).toMatchObject({ code: "route_not_found" });
    await alive();
  });

  it("never reads //host/path as a URL with a host: //evil/v1/agents does not reach /v1/agents", async () => {
    const r = parsed(await raw(t.baseUrl, `GET //evil/v1/agents?project=p HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n`));
    expect(r.status).toBe(404);
  });

  it.each(["*", "http://x/v1/agents?project=p"])("refuses the non-origin-form target %s with protocol_error", async (target) => {
    const r = parsed(await raw(t.baseUrl, `GET ${target} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n`));
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ code: "protocol_error" });
  });

  it("logs the path of a non-origin-form target, never its query", async () => {
    const r = parsed(await raw(t.baseUrl, `GET http://x/v1/agents?token=s3cret HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n`));
    expect(r.status).toBe(400);
    const line = t.events.find((e) => e.fields.requestId === r.json.requestId);
    expect(line?.fields.path).toBe("http://x/v1/agents");
    expect(JSON.stringify(t.events)).not.toContain("s3cret");
  });

  it.each([
    ["an invalid Host", "host: [\r\n"],
    ["no Host (HTTP/1.0)", ""],
    ["no Host (HTTP/1.1, which must carry one; Node answered a bare 400 itself)", "", "1.1"],
  ])("refuses an RPC with %s as protocol_error instead of throwing", async (_, host, given?: string) => {
    const version = given ?? (host ? "1.1" : "1.0");
    const r = parsed(
      await raw(t.baseUrl, `POST ${registerPath} HTTP/${version}\r\n${host}content-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}`),
    );
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ code: "protocol_error" });
    await alive();
  });

  it("refuses a REST request over HTTP/1.1 without Host as protocol_error, with its request id", async () => {
    const r = parsed(await raw(t.baseUrl, "GET /v1/agents?project=p HTTP/1.1\r\nconnection: close\r\n\r\n"));
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ code: "protocol_error", error: expect.stringContaining("Host"), requestId: expect.any(String) });
  });
});

describe("expectations", () => {
  it("refuses an HTTP/1.1 expectation other than 100-continue as protocol_error, with its request id (Node answered a bare 417)", async () => {
    const r = parsed(await raw(t.baseUrl, "GET /v1/agents?project=p HTTP/1.1\r\nhost: 127.0.0.1\r\nexpect: bogus\r\nconnection: close\r\n\r\n"));
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ code: "protocol_error", requestId: expect.any(String) });
    expect(r.header.get("x-request-id")).toBe(r.json.requestId);
    await alive();
  });

  it("refuses an HTTP/2 expectation other than 100-continue as protocol_error, with its request id", async () => {
    const r = await h2(t.baseUrl, { ":method": "GET", ":path": "/v1/agents?project=p", expect: "bogus" });
    expect(r.status).toBe(400);
    const body = JSON.parse(r.body.toString()) as Record<string, unknown>;
    expect(body).toMatchObject({ code: "protocol_error", requestId: expect.any(String) });
    expect(r.headers["x-request-id"]).toBe(body.requestId);
  });

  it("still serves a request expecting 100-continue", async () => {
    const answer = await raw(t.baseUrl, "GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n");
    expect(answer).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\n/);
    const r = parsed(answer.replace(/^HTTP\/1\.1 100 Continue\r\n\r\n/, ""));
    expect([r.status, r.json.ok]).toEqual([200, true]);
  });
});

describe("lone surrogates", () => {
  it("REST: protocol_error naming the field, before authentication", async () => {
    const res = await t.rest("/v1/agents/register", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"name":"a\\udc00","project":"p"}',
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "protocol_error", error: expect.stringContaining("name") });
  });

  it("REST: in either case of its digits, in a key too; an escaped pair is one character like any other", async () => {
    const register = (body: string) => t.rest("/v1/agents/register", { method: "POST", headers: { "content-type": "application/json" }, body });
    for (const body of ['{"name":"a\\uDC00","project":"p"}', '{"name":"a","project":"p","x\\uD8FF":1}', '{"name":"a\\uDbFf","project":"p"}']) {
      const res = await register(body);
      expect([res.status, ((await res.json()) as { code: string }).code], body).toEqual([400, "protocol_error"]);
    }
    const paired = await register('{"name":"smile-\\ud83d\\ude00","project":"surrogates"}');
    expect(paired.status).toBe(201);
    expect(((await paired.json()) as { agent: { name: string } }).agent.name).toBe("smile-\u{1F600}");
  });

  it("REST: a lone surrogate deep in a sync event is refused as a whole request", async () => {
    const res = await t.rest("/v1/sync/events", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"events":[{"payload":{"x":["\\ud800"]}}]}',
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "protocol_error", error: expect.stringContaining("events[0].payload.x[0]") });
  });

  it("Connect JSON: invalid_argument with PROTOCOL_ERROR", async () => {
    const res = await fetch(t.baseUrl + registerPath, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"name":"\\udc00","project":"p"}',
    });
    expect(res.status).toBe(400);
    const e = errorFromJsonBytes(new Uint8Array(await res.arrayBuffer()), res.headers, new ConnectError("", Code.Unknown));
    expect([e.code, reasonOf(e)]).toEqual([Code.InvalidArgument, "PROTOCOL_ERROR"]);
  });
});

describe("malformed RPC bodies", () => {
  it("Connect binary: a body that does not parse is invalid_argument with PROTOCOL_ERROR", async () => {
    const res = await fetch(t.baseUrl + registerPath, { method: "POST", headers: { "content-type": "application/proto" }, body: garbage });
    expect(res.status).toBe(400);
    const e = errorFromJsonBytes(new Uint8Array(await res.arrayBuffer()), res.headers, new ConnectError("", Code.Unknown));
    expect([e.code, reasonOf(e)]).toEqual([Code.InvalidArgument, "PROTOCOL_ERROR"]);
  });

  it("Connect binary: a gzip body that is cut short is invalid_argument", async () => {
    const body = zlib.gzipSync(Buffer.from("x".repeat(200))).subarray(0, 20);
    const res = await fetch(t.baseUrl + registerPath, {
      method: "POST",
      headers: { "content-type": "application/proto", "content-encoding": "gzip" },
      body,
    });
    const e = errorFromJsonBytes(new Uint8Array(await res.arrayBuffer()), res.headers, new ConnectError("", Code.Unknown));
    expect([res.status, e.code, reasonOf(e)]).toEqual([400, Code.InvalidArgument, "PROTOCOL_ERROR"]);
  });

  const grpcCall = (body: Buffer, extra: http2.OutgoingHttpHeaders = {}) =>
    h2(t.baseUrl, { ":method": "POST", ":path": registerPath, "content-type": "application/grpc", te: "trailers", ...extra }, body);

  it.each([
    ["garbage protobuf", envelope(0, garbage), {}],
    ["a compressed flag without grpc-encoding", envelope(1, Uint8Array.from([0x0a, 0x01, 0x61])), {}],
    ["a truncated gzip message", envelope(1, zlib.gzipSync(Buffer.from("x".repeat(200))).subarray(0, 20)), { "grpc-encoding": "gzip" }],
    ["a brotli message that is not brotli", envelope(1, Uint8Array.from([0xff, 0xfe, 0xfd, 0x00, 0x42])), { "grpc-encoding": "br" }],
    ["an envelope longer than the body", envelope(0, Uint8Array.from([0x0a, 0x01, 0x61]), 100), {}],
  ] as const)("gRPC: %s is invalid_argument with PROTOCOL_ERROR", async (_, body, extra) => {
    const r = await grpcCall(body, extra);
    const e = findTrailerError(r.trailers) ?? findTrailerError(new Headers(r.headers as Record<string, string>));
    expect([e?.code, reasonOf(e)]).toEqual([Code.InvalidArgument, "PROTOCOL_ERROR"]);
    await alive();
  });

  it("gRPC: an unknown grpc-encoding stays unimplemented", async () => {
    const r = await grpcCall(envelope(1, garbage), { "grpc-encoding": "zstd" });
    const e = findTrailerError(r.trailers) ?? findTrailerError(new Headers(r.headers as Record<string, string>));
    expect(e?.code).toBe(Code.Unimplemented);
  });

  it("gRPC-Web: garbage protobuf is invalid_argument with PROTOCOL_ERROR in the trailer frame", async () => {
    const res = await fetch(t.baseUrl + registerPath, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
      body: envelope(0, garbage),
    });
    const e = grpcWebError(new Uint8Array(await res.arrayBuffer()), res.headers);
    expect([e?.code, reasonOf(e)]).toEqual([Code.InvalidArgument, "PROTOCOL_ERROR"]);
  });

  it("Connect streaming: a request that does not parse ends the stream with invalid_argument", async () => {
    const res = await fetch(t.baseUrl + "/kxm.hub.v1.PresenceService/WatchPresence", {
      method: "POST",
      headers: { "content-type": "application/connect+proto" },
      body: envelope(0, garbage),
    });
    const body = new Uint8Array(await res.arrayBuffer());
    const end = endStreamFromJson(body.subarray(5));
    expect([end.error?.code, reasonOf(end.error)]).toEqual([Code.InvalidArgument, "PROTOCOL_ERROR"]);
  });
});

describe("parser refusals get the error body", () => {
  it.each([
    ["a target without a leading slash", "GET x HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n", 400],
    ["NUL in a header", "GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-a: a\0b\r\n\r\n", 400],
    ["an invalid header name", "GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx a: b\r\n\r\n", 400],
    ["Content-Length with Transfer-Encoding", "POST /v1/agents/register HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", 400],
    ["headers over 16 KiB", `GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-a: ${"a".repeat(20_000)}\r\n\r\n`, 431],
  ] as const)("%s", async (_, request, status) => {
    const r = parsed(await raw(t.baseUrl, request));
    expect(r.status).toBe(status);
    expect(r.json).toMatchObject({ code: "protocol_error", requestId: expect.stringMatching(/^req_/) });
    expect(r.header.get("x-request-id")).toBe(r.json.requestId);
    await alive();
  });

  it("CONNECT over HTTP/1.1 gets route_not_found", async () => {
    const r = parsed(await raw(t.baseUrl, "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n"));
    expect([r.status, r.json.code]).toEqual([404, "route_not_found"]);
  });

  it("CONNECT over HTTP/2 gets route_not_found", async () => {
    const r = await h2(t.baseUrl, { ":method": "CONNECT", ":authority": "example.com:443" });
    expect([r.status, JSON.parse(r.body.toString()).code]).toEqual([404, "route_not_found"]);
  });
});

describe.each(streamProtocols)("stream deadlines over $name", (protocol) => {
  const grpc = protocol.name.startsWith("grpc");
  const watch = (headers: Record<string, string>) =>
    new Frames((signal) =>
      createClient(PresenceService, protocol.make(t.baseUrl, [withHeaders(headers)])).watchPresence({ project: "p" }, { signal }),
    );

  it("a deadline too long for a timer is clamped: the stream stays open", async () => {
    const f = watch(grpc ? { "grpc-timeout": "99999999H" } : { "connect-timeout-ms": "2147483648" });
    try {
      expect((await f.next()).event.case).toBe("snapshot");
      await idle(t.clock);
      // A round trip on another call gives an overflowing timer every chance to have fired.
      await t.rest("/health");
      t.clock.advance(15_000);
      expect((await f.next()).event.case).toBe("keepAlive");
    } finally {
      f.close();
    }
  });

  it("a stream whose deadline passes ends with deadline_exceeded", async () => {
    const f = watch(grpc ? { "grpc-timeout": "300m" } : { "connect-timeout-ms": "300" });
    expect((await f.next()).event.case).toBe("snapshot");
    const e = await f.error();
    expect(e instanceof ConnectError && e.code).toBe(Code.DeadlineExceeded);
  });
});

