import { expect, it } from "vitest";
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { envelope } from "../fixtures/wire.js";
import { eventually } from "../fixtures/streams.js";
import { WatchPresenceRequestSchema } from "../../gen/ts/kxm/hub/v1/presence_pb.js";

/**
 * A server stream served by connect's handler over HTTP/2 whose client resets it while the hub
 * waits for flow control (the client reads slowly) is never ended: kxm_open_streams stays 1
 * after the reset and after the connection is gone. The fast path (plain Connect stream) ends it.
 */
/**
 * A server stream whose client resets it while the hub waits on HTTP/2 flow control (the client's
 * window is full) is ended: its subscriptions and call record go with it. connect-node's writer
 * waits for "drain" or "error", and a reset response emits only "close" (src/wire/adapter.ts
 * endedOnClose); the fast path's own writer waits for "close" too.
 */
const watch = "/kxm.hub.v1.PresenceService/WatchPresence";
const openStreams = async (t: TestHub) => {
  const text = await (await t.rest("/metrics")).text();
  return Number(/^kxm_open_streams\{kind="watch_presence"\} (\d+)$/m.exec(text)?.[1]);
};

it.each([
  ["gRPC", { "content-type": "application/grpc", te: "trailers" }],
  ["gRPC-Web", { "content-type": "application/grpc-web+proto" }],
  ["Connect with a deadline (connect's handler)", { "content-type": "application/connect+proto", "connect-timeout-ms": "600000" }],
  ["Connect without a deadline (fast path)", { "content-type": "application/connect+proto" }],
])("%s over HTTP/2: a stream reset while the hub waits to write is ended", async (_, headers) => {
  const t = await startTestHub({ config: { shutdownGraceMs: 600_000 } });
  try {
    // A snapshot larger than the client's flow-control window.
    for (let i = 0; i < 300; i++) {
      const r = await t.rest("/v1/agents/register", { json: { name: `agent-${i}`, project: "p", purpose: "x".repeat(250) } });
      expect(r.status).toBeLessThan(300);
    }
    const session = http2.connect(t.baseUrl, { settings: { initialWindowSize: 1024 } });
    session.on("error", () => undefined);
    const req = session.request({ ":method": "POST", ":path": watch, ...headers });
    req.on("error", () => undefined);
    req.end(envelope(0, toBinary(WatchPresenceRequestSchema, create(WatchPresenceRequestSchema, { project: "p" }))));
    req.pause(); // reads nothing
    await new Promise((r) => req.once("response", r));
    await eventually(async () => (await openStreams(t)) === 1, "the stream open");
    req.close(http2.constants.NGHTTP2_CANCEL);
    session.destroy();
    await eventually(async () => (await openStreams(t)) === 0, "the stream ended after its reset");
  } finally {
    await t.close();
  }
}, 30_000);

