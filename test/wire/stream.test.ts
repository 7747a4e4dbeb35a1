import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { IncomingMessage } from "node:http";
import { compressionGzip } from "@connectrpc/connect-node";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { createConnectStream } from "../../src/wire/stream.js";
import { createInProcessCaller } from "../../src/wire/in-process.js";
import { createShutdownSignal } from "../../src/server/shutdown-signal.js";
import { PresenceService, WatchPresenceRequestSchema, WatchPresenceResponseSchema } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";

/**
 * Plain Connect server streams are served by wire/stream.ts; a `connect-timeout-ms`
 * header sends one the connect way, so each case is sent both ways and must read the same.
 */

const watchPresence = "/kxm.hub.v1.PresenceService/WatchPresence";

const envelope = (bytes: Uint8Array, flags = 0) => {
  const out = Buffer.alloc(5 + bytes.length);
  out[0] = flags;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
};

/** The envelopes of a stream's body, read until `count` of them arrived (then the stream is dropped). */
async function envelopes(t: TestHub, headers: Record<string, string>, body: Buffer, viaConnect: boolean, count: number) {
  const ac = new AbortController();
  const res = await fetch(`${t.baseUrl}${watchPresence}`, {
    method: "POST",
    headers: { "x-request-id": "req-same", ...headers, ...(viaConnect && { "connect-timeout-ms": "600000" }) },
    body: new Uint8Array(body),
    signal: ac.signal,
  });
  const reader = res.body!.getReader();
  let buf = Buffer.alloc(0);
  const out: { flags: number; data: Buffer }[] = [];
  while (out.length < count) {
    const { done, value } = await reader.read();
    if (done) break;
    buf = Buffer.concat([buf, value]);
    while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
      const len = buf.readUInt32BE(1);
      out.push({ flags: buf[0]!, data: buf.subarray(5, 5 + len) });
      buf = buf.subarray(5 + len);
    }
  }
  ac.abort();
  return { status: res.status, type: res.headers.get("content-type"), encoding: res.headers.get("connect-content-encoding"), out };
}

describe("Connect server streams served in-process", () => {
  it("a refused stream ends with the same end-of-stream envelope", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    const body = envelope(toBinary(WatchPresenceRequestSchema, create(WatchPresenceRequestSchema, { project: "p" })));
    const headers = { "content-type": "application/connect+proto", authorization: "Bearer wrong" };
    const fast = await envelopes(t, headers, body, false, 1);
    const connect = await envelopes(t, headers, body, true, 1);
    expect(fast).toEqual(connect);
    expect(fast.status).toBe(200);
    expect(fast.out).toHaveLength(1);
    expect(fast.out[0]!.flags).toBe(2);
    const end = JSON.parse(fast.out[0]!.data.toString());
    expect(end.error.code).toBe("unauthenticated");
    expect(end.metadata["x-request-id"]).toEqual(["req-same"]);
  });

  it("sends the same snapshot frames, binary and JSON", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    await t.register("alpha", "p", "tok");
    await t.register("beta", "p", "tok");
    const bearer = { authorization: "Bearer tok" };
    const proto = envelope(toBinary(WatchPresenceRequestSchema, create(WatchPresenceRequestSchema, { project: "p" })));
    const fast = await envelopes(t, { ...bearer, "content-type": "application/connect+proto" }, proto, false, 1);
    const connect = await envelopes(t, { ...bearer, "content-type": "application/connect+proto" }, proto, true, 1);
    expect(fast).toEqual(connect);
    const frame = fromBinary(WatchPresenceResponseSchema, fast.out[0]!.data);
    expect(frame.event.case).toBe("snapshot");

    const json = envelope(Buffer.from(JSON.stringify({ project: "p" })));
    const headers = { ...bearer, "content-type": "application/connect+json" };
    expect(await envelopes(t, headers, json, false, 1)).toEqual(await envelopes(t, headers, json, true, 1));
  });

  it("compresses large frames for a client that accepts gzip, as connect does", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    for (let i = 0; i < 20; i++) await t.register(`agent-with-a-long-name-${i}`, "p", "tok");
    const body = envelope(toBinary(WatchPresenceRequestSchema, create(WatchPresenceRequestSchema, { project: "p" })));
    const headers = { authorization: "Bearer tok", "content-type": "application/connect+proto", "connect-accept-encoding": "gzip" };
    const fast = await envelopes(t, headers, body, false, 1);
    expect(fast.encoding).toBe("gzip");
    expect(fast.out[0]!.flags).toBe(1);
    expect(fast).toEqual(await envelopes(t, headers, body, true, 1));
  });

  it("leaves a body that is not one plain envelope to connect", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    const headers = { authorization: "Bearer tok", "content-type": "application/connect+proto" };
    const message = toBinary(WatchPresenceRequestSchema, create(WatchPresenceRequestSchema, { project: "p" }));
    for (const body of [envelope(message, 1), envelope(message).subarray(0, 4), Buffer.concat([envelope(message), envelope(message)]), envelope(Buffer.from([0x0a, 0xff]))]) {
      const fast = await envelopes(t, headers, body, false, 1);
      expect(fast).toEqual(await envelopes(t, headers, body, true, 1));
      expect(JSON.parse(fast.out[0]!.data.toString()).error.code).toBe("invalid_argument");
    }
  });

  it("takes only plain Connect streams of the hub's own streaming methods", () => {
    const call = createInProcessCaller((router) => router.service(PresenceService, {}).service(LeaseService, {}), [], new AbortController().signal);
    const stream = createConnectStream({
      call,
      readMaxBytes: 1_000,
      shutdownSignal: createShutdownSignal().signal,
      acceptCompression: [compressionGzip],
      jsonOptions: {},
    });
    const req = (method: string, headers: Record<string, string>) => ({ method, headers }) as unknown as IncomingMessage;
    const proto = { "content-type": "application/connect+proto" };
    expect(stream.accepts(req("POST", proto), watchPresence)).toBe(true);
    expect(stream.accepts(req("POST", { "content-type": "application/connect+json; charset=utf-8", "connect-content-encoding": "identity" }), watchPresence)).toBe(true);
    expect(stream.accepts(req("POST", proto), "/kxm.hub.v1.LeaseService/WatchLeases")).toBe(true);
    expect(stream.accepts(req("POST", proto), "/kxm.hub.v1.LeaseService/AcquireLease")).toBe(false);
    expect(stream.accepts(req("GET", proto), watchPresence)).toBe(false);
    expect(stream.accepts(req("POST", { ...proto, "connect-timeout-ms": "100" }), watchPresence)).toBe(false);
    expect(stream.accepts(req("POST", { ...proto, "connect-content-encoding": "gzip" }), watchPresence)).toBe(false);
    expect(stream.accepts(req("POST", { "content-type": "application/proto" }), watchPresence)).toBe(false);
    expect(stream.accepts(req("POST", { "content-type": "application/grpc" }), watchPresence)).toBe(false);
  });
});
