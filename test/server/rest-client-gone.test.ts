import net from "node:net";
import http2 from "node:http2";
import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

/**
 * A REST client that goes away before its request body ended: nobody is left to answer, and the
 * hub did nothing wrong. The call is reported cancelled, never as the hub's own fault (no
 * `internal_error` line, no 500 in the call log, no `internal` in the metrics).
 */

/** Waits until the hub has reported a call whose log line satisfies `match`. */
async function reported(t: TestHub, route: string): Promise<Record<string, unknown>> {
  for (let i = 0; i < 2_000; i++) {
    const found = t.events.find((e) => e.fields.route === route);
    if (found) return { event: found.event, ...found.fields };
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error("the call was never reported");
}

describe("a REST request whose client goes away mid-body", () => {
  it("over HTTP/1.1 is a cancelled call, not an internal error", async () => {
    await using t = await startTestHub();
    const { port } = new URL(t.baseUrl);
    const socket = net.connect(Number(port), "127.0.0.1");
    await new Promise((r) => socket.once("connect", r));
    socket.write("POST /v1/agents/register HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"name\":");
    socket.destroy();
    const line = await reported(t, "POST /v1/agents/register");
    expect(line).toMatchObject({ event: "request_error", code: "canceled" });
    expect(line.statusCode).toBeUndefined();
    expect(t.events.filter((e) => e.event === "internal_error")).toEqual([]);
    expect(await (await fetch(`${t.baseUrl}/metrics`)).text()).not.toMatch(/code="internal"/);
  });

  it("over HTTP/2 is a cancelled call, not an internal error", async () => {
    await using t = await startTestHub();
    const session = http2.connect(t.baseUrl);
    const req = session.request({ ":method": "POST", ":path": "/v1/agents/register", "content-type": "application/json" });
    req.on("error", () => undefined);
    req.write('{"name":');
    // A PING's answer comes after the hub has read the frames before it: the request has begun.
    await new Promise((resolve) => session.ping((e) => resolve(e)));
    req.close(http2.constants.NGHTTP2_CANCEL);
    const line = await reported(t, "POST /v1/agents/register");
    session.destroy();
    expect(line).toMatchObject({ event: "request_error", code: "canceled" });
    expect(t.events.filter((e) => e.event === "internal_error")).toEqual([]);
  });
});
