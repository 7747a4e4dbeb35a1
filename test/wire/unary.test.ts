import { gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { toBinary, fromBinary, create } from "@bufbuild/protobuf";
import type { IncomingMessage } from "node:http";
import { compressionGzip } from "@connectrpc/connect-node";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { createConnectUnary } from "../../src/wire/unary.js";
import { createInProcessCaller } from "../../src/wire/in-process.js";
import { LeaseService, GetLeaseRequestSchema, GetLeaseResponseSchema } from "../../gen/ts/kxm/hub/v1/lease_pb.js";

/**
 * Plain Connect unary calls are served by wire/unary.ts; everything else by connect's
 * own handler. A `connect-timeout-ms` header sends a call the connect way, so each case below is
 * sent both ways and must get the same answer, byte for byte.
 */

const acquire = "/kxm.hub.v1.LeaseService/AcquireLease";
const getLease = "/kxm.hub.v1.LeaseService/GetLease";

interface Answer {
  status: number;
  type: string | null;
  encoding: string | null;
  requestId: string | null;
  body: Buffer;
}

async function post(t: TestHub, path: string, headers: Record<string, string>, body: BodyInit, viaConnect: boolean): Promise<Answer> {
  const res = await fetch(`${t.baseUrl}${path}`, {
    method: "POST",
    headers: { "x-request-id": "req-same", ...headers, ...(viaConnect && { "connect-timeout-ms": "600000" }) },
    body,
    ...(body instanceof ReadableStream && { duplex: "half" }),
  } as RequestInit);
  return {
    status: res.status,
    type: res.headers.get("content-type"),
    encoding: res.headers.get("content-encoding"),
    requestId: res.headers.get("x-request-id"),
    body: Buffer.from(await res.arrayBuffer()),
  };
}

/** The same request both ways; the answers must match. */
async function bothWays(t: TestHub, path: string, headers: Record<string, string>, body: () => BodyInit): Promise<Answer> {
  const fast = await post(t, path, headers, body(), false);
  const connect = await post(t, path, headers, body(), true);
  expect(fast).toEqual(connect);
  return fast;
}

describe("Connect unary calls served in-process", () => {
  it("answers a refusal, its ErrorInfo and lease detail exactly as connect does", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const json = { "content-type": "application/json" };
    const first = await post(t, acquire, { ...a.headers, ...json }, JSON.stringify({ name: "repo/main", ttlMs: 30_000 }), false);
    expect(first.status).toBe(200);
    expect(JSON.parse(first.body.toString()).lease.fencingToken).toBe("1");

    const held = await bothWays(t, acquire, { ...b.headers, ...json }, () => JSON.stringify({ name: "repo/main", ttlMs: 30_000 }));
    expect(held.status).toBe(409);
    expect(held.type).toBe("application/json");
    expect(held.requestId).toBe("req-same");
    const err = JSON.parse(held.body.toString());
    expect(err.code).toBe("aborted");
    expect(err.details.map((d: { type: string }) => d.type)).toEqual(["google.rpc.ErrorInfo", "kxm.hub.v1.Lease"]);

    // A JSON body that names an unknown field is read as connect reads it (the field ignored).
    const unknown = await bothWays(t, acquire, { ...b.headers, "content-type": "application/json; charset=utf-8" }, () =>
      JSON.stringify({ name: "repo/main", ttlMs: 30_000, somethingNew: 1 }),
    );
    expect(unknown.status).toBe(409);
    // No credentials: the auth interceptor's refusal.
    expect((await bothWays(t, acquire, json, () => JSON.stringify({ name: "x", ttlMs: 5_000 }))).status).toBe(401);
  });

  it("answers binary calls with the same bytes", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    expect((await t.rest("/v1/leases/build/acquire", { json: { ttlMs: 30_000 }, headers: a.headers })).status).toBe(200);
    const proto = { ...a.headers, "content-type": "application/proto" };
    const got = await bothWays(t, getLease, proto, () => toBinary(GetLeaseRequestSchema, create(GetLeaseRequestSchema, { name: "build" })));
    expect(got.status).toBe(200);
    expect(got.type).toBe("application/proto");
    expect(fromBinary(GetLeaseResponseSchema, got.body).lease?.fencingToken).toBe(1n);
  });

  it("leaves a body that does not decode, or is too long, to connect's typed refusal", async () => {
    await using t = await startTestHub({ config: { maxBodyBytes: 4_096 } });
    const a = await t.register("alpha");
    const json = { ...a.headers, "content-type": "application/json" };
    const malformed = await bothWays(t, acquire, json, () => "{");
    expect(malformed.status).toBe(400);
    expect(JSON.parse(malformed.body.toString()).code).toBe("invalid_argument");
    const notUtf8 = await bothWays(t, acquire, json, () => new Uint8Array([0x7b, 0x22, 0xff, 0x22, 0x7d]));
    expect(notUtf8.status).toBe(400);
    const badProto = await bothWays(t, acquire, { ...a.headers, "content-type": "application/proto" }, () => new Uint8Array([0x0a, 0xff]));
    expect(badProto.status).toBe(400);

    // Streamed with no declared length: read until past the limit, then handed to connect.
    const long = () => {
      const chunk = new TextEncoder().encode(" ".repeat(1_024));
      let sent = 0;
      return new ReadableStream<Uint8Array>({
        pull(c) {
          if (sent++ < 8) c.enqueue(chunk);
          else c.close();
        },
      });
    };
    const tooLong = await bothWays(t, acquire, json, long);
    expect(tooLong.status).toBe(429); // resource_exhausted, as connect answers the code
    expect(JSON.parse(tooLong.body.toString()).message).toBe("request body exceeds 4096 bytes");
  });

  it("compresses a large answer for a client that accepts gzip, as connect does", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    for (let i = 0; i < 20; i++) {
      expect((await t.rest(`/v1/leases/lock-with-a-longer-name-${i}/acquire`, { json: { ttlMs: 30_000 }, headers: a.headers })).status).toBe(200);
    }
    const list = "/kxm.hub.v1.LeaseService/ListLeases";
    const headers = { ...a.headers, "content-type": "application/json", "accept-encoding": "gzip" };
    // fetch decompresses: ask node for the raw bytes instead.
    const raw = async (viaConnect: boolean) => {
      const http = await import("node:http");
      const url = new URL(`${t.baseUrl}${list}`);
      return new Promise<{ encoding?: string; body: Buffer }>((resolve, reject) => {
        const req = http.request(
          { host: url.hostname, port: url.port, path: list, method: "POST", headers: { ...headers, ...(viaConnect && { "connect-timeout-ms": "600000" }) } },
          (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c)).on("end", () => resolve({ encoding: res.headers["content-encoding"], body: Buffer.concat(chunks) }));
          },
        );
        req.on("error", reject);
        req.end("{}");
      });
    };
    const fast = await raw(false);
    const connect = await raw(true);
    expect(fast.encoding).toBe("gzip");
    expect(connect.encoding).toBe("gzip");
    const text = gunzipSync(fast.body).toString();
    expect(JSON.parse(text).leases).toHaveLength(20);
    expect(text).toBe(gunzipSync(connect.body).toString());
  });

  it("takes only plain unary POSTs of the hub's own methods", () => {
    const call = createInProcessCaller((router) => router.service(LeaseService, {}), [], new AbortController().signal);
    const unary = createConnectUnary({ call, readMaxBytes: 1_000, acceptCompression: [compressionGzip], jsonOptions: {} });
    const req = (method: string, headers: Record<string, string>) => ({ method, headers }) as unknown as IncomingMessage;
    const json = { "content-type": "application/json" };
    expect(unary.accepts(req("POST", json), acquire)).toBe(true);
    expect(unary.accepts(req("POST", { "content-type": "application/proto", "content-length": "1000" }), acquire)).toBe(true);
    expect(unary.accepts(req("POST", { "content-type": "APPLICATION/JSON; charset=utf-8", "content-encoding": "identity" }), acquire)).toBe(true);
    // Connect's own: streams, GET, deadlines, compressed or over-long bodies, other protocols.
    expect(unary.accepts(req("POST", json), "/kxm.hub.v1.LeaseService/WatchLeases")).toBe(false);
    expect(unary.accepts(req("POST", json), "/kxm.hub.v1.PeerService/SendMessage")).toBe(false); // not registered here
    expect(unary.accepts(req("GET", json), getLease)).toBe(false);
    expect(unary.accepts(req("POST", { ...json, "connect-timeout-ms": "100" }), acquire)).toBe(false);
    expect(unary.accepts(req("POST", { ...json, "content-encoding": "gzip" }), acquire)).toBe(false);
    expect(unary.accepts(req("POST", { ...json, "content-length": "1001" }), acquire)).toBe(false);
    expect(unary.accepts(req("POST", { "content-type": "application/connect+json" }), acquire)).toBe(false);
    expect(unary.accepts(req("POST", { "content-type": "application/grpc" }), acquire)).toBe(false);
    expect(unary.accepts(req("POST", {}), acquire)).toBe(false);
  });
});
