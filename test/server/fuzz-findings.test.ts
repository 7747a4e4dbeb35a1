import zlib from "node:zlib";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { compressionGzip, createGrpcWebTransport } from "@connectrpc/connect-node";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { envelope, grpcWebError, h2, parsed, raw, reasonOf } from "../fixtures/wire.js";

let t: TestHub;
beforeEach(async () => {
  t = await startTestHub();
});
afterEach(() => t.close());

const registerPath = "/kxm.hub.v1.PresenceService/RegisterAgent";

/** Found by the fuzz suite (test/fuzz): each once answered 500, or accepted what it must refuse. */
describe("fuzz findings", () => {
  it("REST: a body nested 6,000 levels deep is no 500", async () => {
    const deep = "[".repeat(6_000) + "]".repeat(6_000);
    const res = await t.rest("/v1/agents/register", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: `{"name":"deep","project":"p","zz":${deep}}`,
    });
    expect(res.status).toBe(201);
  });

  it("REST: a body that is not UTF-8 is invalid_json, and nothing is written", async () => {
    const body = Buffer.concat([Buffer.from('{"name":"fz'), Buffer.from([0xff]), Buffer.from('","project":"p"}')]);
    const res = await t.rest("/v1/agents/register", { method: "POST", headers: { "content-type": "application/json" }, body });
    expect([res.status, (await res.json()).code]).toEqual([400, "invalid_json"]);
    expect(await t.hub.store.agents.listAgents("p")).toEqual([]);
  });

  it("Connect JSON: a body that is not UTF-8 is invalid_argument with PROTOCOL_ERROR", async () => {
    const body = Buffer.concat([Buffer.from('{"name":"fz'), Buffer.from([0xff]), Buffer.from('","project":"p"}')]);
    const res = await fetch(t.baseUrl + registerPath, { method: "POST", headers: { "content-type": "application/json" }, body: new Uint8Array(body) });
    const e = errorFromJsonBytes(new Uint8Array(await res.arrayBuffer()), res.headers, new ConnectError("", Code.Unknown));
    expect([res.status, e.code, reasonOf(e)]).toEqual([400, Code.InvalidArgument, "PROTOCOL_ERROR"]);
    expect(await t.hub.store.agents.listAgents("p")).toEqual([]);
  });

  it.each(["application/jsonx", "application/json-seq", "text/json"])("REST: content type %s is unsupported_media_type", async (type) => {
    const res = await t.rest("/v1/agents/register", { method: "POST", headers: { "content-type": type }, body: '{"name":"jx","project":"p"}' });
    expect([res.status, (await res.json()).code]).toEqual([415, "unsupported_media_type"]);
  });

  it.each(["/./v1/agents", "/v1/./agents", "/v1/x/../agents", "/%2e%2e/v1/agents"])("REST: %s is no route (no dot-segment removal)", async (path) => {
    const r = parsed(await raw(t.baseUrl, `GET ${path}?project=p HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n`));
    expect([r.status, r.json.code]).toEqual([404, "route_not_found"]);
  });

  it("REST over HTTP/2: the method `get` is not GET", async () => {
    const r = await h2(t.baseUrl, { ":method": "get", ":path": "/v1/agents?project=p" });
    expect([r.status, JSON.parse(r.body.toString()).code]).toEqual([404, "route_not_found"]);
  });

  const grpcWebCall = async (path: string, body: Buffer, extra: Record<string, string> = {}) => {
    const init = { method: "POST", headers: { "content-type": "application/grpc-web+proto", ...extra }, body: new Uint8Array(body) };
    const res = await fetch(t.baseUrl + path, init);
    return grpcWebError(new Uint8Array(await res.arrayBuffer()), res.headers);
  };

  it.each([
    ["no message", Buffer.alloc(0)],
    ["two messages", Buffer.concat([envelope(0, new Uint8Array()), envelope(0, new Uint8Array())])],
  ])("gRPC-Web unary with %s is invalid_argument with PROTOCOL_ERROR", async (_, body) => {
    const e = await grpcWebCall("/kxm.hub.v1.LeaseService/ListLeases", body);
    expect([e?.code, reasonOf(e)]).toEqual([Code.InvalidArgument, "PROTOCOL_ERROR"]);
  });

  it.each([
    ["no message", Buffer.alloc(0)],
    ["two messages", Buffer.concat([envelope(0, new Uint8Array()), envelope(0, new Uint8Array())])],
  ])("a server stream with %s is refused before it opens", async (_, body) => {
    const e = await grpcWebCall("/kxm.hub.v1.PresenceService/WatchPresence", body);
    expect([e?.code, reasonOf(e)]).toEqual([Code.InvalidArgument, "PROTOCOL_ERROR"]);
  });

  it("a gzip body over 256 KiB once decompressed is payload_too_large", async () => {
    const json = JSON.stringify({ name: "gz", project: "p", zz: "y".repeat(300_000) });
    const res = await fetch(t.baseUrl + registerPath, {
      method: "POST",
      headers: { "content-type": "application/json", "content-encoding": "gzip" },
      body: zlib.gzipSync(json),
    });
    const e = errorFromJsonBytes(new Uint8Array(await res.arrayBuffer()), res.headers, new ConnectError("", Code.Unknown));
    expect([e.code, reasonOf(e)]).toEqual([Code.ResourceExhausted, "PAYLOAD_TOO_LARGE"]);
    expect(await t.hub.store.agents.listAgents("p")).toEqual([]);
  });

  it("a stream request over 256 KiB without a declared length (HTTP/2) is payload_too_large", async () => {
    const big = Buffer.concat([Buffer.from([0x0a, 0xe0, 0xa7, 0x12]), Buffer.alloc(300_000, 0x61)]); // field 1, 300,000 bytes
    const r = await h2(t.baseUrl, { ":method": "POST", ":path": "/kxm.hub.v1.PresenceService/WatchPresence", "content-type": "application/grpc", te: "trailers" }, envelope(0, big));
    const e = findTrailerError(r.trailers) ?? findTrailerError(new Headers(r.headers as Record<string, string>));
    expect([e?.code, reasonOf(e)]).toEqual([Code.ResourceExhausted, "PAYLOAD_TOO_LARGE"]);
  });

  it("gRPC-Web: a refusal whose trailer the hub compresses (client accepts gzip) reaches the client intact", async () => {
    const [a, b] = [await t.register("a".repeat(64)), await t.register("b".repeat(64))];
    const transport = (h: Record<string, string>) =>
      createClient(
        LeaseService,
        createGrpcWebTransport({ baseUrl: t.baseUrl, httpVersion: "1.1", acceptCompression: [compressionGzip], interceptors: [withHeaders(h)] }),
      );
    const name = "n".repeat(200);
    await transport(a.headers).acquireLease({ name, ttlMs: 5_000 });
    const e = await transport(b.headers).acquireLease({ name, ttlMs: 5_000 }).catch((x: unknown) => x);
    expect(e instanceof ConnectError && [e.code, reasonOf(e)]).toEqual([Code.Aborted, "LEASE_HELD"]);
  });
});
