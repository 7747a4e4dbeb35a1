import http2 from "node:http2";
import type net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createDualServer, type RawRefusal } from "../../src/http/listen.js";

/**
 * The limits HTTP/2 gets on the hub's port, as HTTP/1.1 has them from Node: a request must
 * arrive whole in time (a body that never ends is reset), a connection with no stream open is
 * closed, and one connection may have at most 1,000 streams open. The timeouts are set short
 * here; the hub's are 300 s and 60 s.
 */

const refusal: RawRefusal = (status, code, message) => `HTTP/1.1 ${status} X\r\nconnection: close\r\n\r\n${JSON.stringify({ code, message })}`;
const stops: (() => void)[] = [];
afterEach(() => stops.splice(0).forEach((f) => f()));

/** A dual server whose handler reads the whole body, then answers when `release` says so. */
async function serve(options: { h2RequestTimeoutMs: number; h2IdleTimeoutMs: number }) {
  const held: (() => void)[] = [];
  const dual = createDualServer((req, res) => {
    req.resume();
    req.once("end", () => {
      const answer = () => res.end("done");
      if (req.headers["x-hold"]) held.push(answer);
      else answer();
    });
  }, refusal, options);
  await new Promise<void>((r) => dual.server.listen(0, "127.0.0.1", r));
  stops.push(() => dual.closeAll(), () => dual.server.close());
  return { url: `http://127.0.0.1:${(dual.server.address() as net.AddressInfo).port}`, release: () => held.splice(0).forEach((f) => f()) };
}

/** The stream's end: its status and body, or the reset code it was closed with. */
function outcome(req: http2.ClientHttp2Stream): Promise<{ status?: number; body: string; rstCode: number }> {
  return new Promise((resolve) => {
    let status: number | undefined;
    let body = "";
    req.on("response", (h) => (status = Number(h[":status"])));
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("error", () => undefined);
    req.once("close", () => resolve({ ...(status !== undefined && { status }), body, rstCode: req.rstCode }));
  });
}

describe("HTTP/2 limits on the hub's port", () => {
  it("resets a request whose body has not ended in time; one sent whole is answered however long its answer takes", async () => {
    const hub = await serve({ h2RequestTimeoutMs: 200, h2IdleTimeoutMs: 60_000 });
    const session = http2.connect(hub.url);
    stops.push(() => session.destroy());
    // Sent whole, answered only once the test says so (after its own deadline has passed).
    const whole = session.request({ ":method": "POST", ":path": "/slow", "x-hold": "1" });
    whole.end("{}");
    const wholeDone = outcome(whole);
    // A body that never ends.
    const stalled = session.request({ ":method": "POST", ":path": "/stalled" });
    stalled.write('{"name":');
    const stalledDone = await outcome(stalled);
    expect(stalledDone).toMatchObject({ rstCode: http2.constants.NGHTTP2_CANCEL, body: "" });
    expect(stalledDone.status).toBeUndefined();
    hub.release();
    expect(await wholeDone).toMatchObject({ status: 200, body: "done", rstCode: http2.constants.NGHTTP2_NO_ERROR });
  });

  it("closes a connection with no stream open, and keeps one while a stream is", async () => {
    const hub = await serve({ h2RequestTimeoutMs: 60_000, h2IdleTimeoutMs: 150 });
    const quiet = http2.connect(hub.url);
    stops.push(() => quiet.destroy());
    const busy = http2.connect(hub.url);
    stops.push(() => busy.destroy());
    const open = busy.request({ ":method": "POST", ":path": "/slow", "x-hold": "1" });
    open.end("{}");
    const done = outcome(open);
    // The quiet connection goes (GOAWAY, then closed) while the busy one's stream is still open.
    await new Promise<void>((resolve) => quiet.once("close", () => resolve()));
    expect(busy.closed || busy.destroyed).toBe(false);
    hub.release();
    expect(await done).toMatchObject({ status: 200, body: "done" });
    // With its last stream gone, the busy one is idle too.
    await new Promise<void>((resolve) => busy.once("close", () => resolve()));
  });

  it("lets one connection open at most 1,000 streams at once", async () => {
    const hub = await serve({ h2RequestTimeoutMs: 60_000, h2IdleTimeoutMs: 60_000 });
    const session = http2.connect(hub.url);
    stops.push(() => session.destroy());
    const settings = await new Promise<http2.Settings>((resolve) => session.once("remoteSettings", resolve));
    expect(settings.maxConcurrentStreams).toBe(1_000);
  });
});
