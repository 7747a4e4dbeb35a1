import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { envelope, h2 } from "../fixtures/wire.js";

/**
 * Every answer echoes a well-formed x-request-id (docs/operations.md "like every other answer";
 * spec reference-hub.md §1.2 step 1) and the request_error log line carries that id. A request
 * that connect itself refuses while reading it (a body that does not decode, a bad timeout
 * header, an unsupported content type) gets neither: no x-request-id on the answer and
 * `requestId: ""` in the log, so the client cannot find its call in the hub's log.
 */
/**
 * Every answer carries its request id (spec §1.2 step 1), also a refusal connect makes while it
 * reads the request, before any of the hub's rules ran, and so does that call's log line.
 */
const registerPath = "/kxm.hub.v1.PresenceService/RegisterAgent";
const rid = "my-req-1";

/** Where each protocol carries the request id: a header, or (gRPC) a trailer, or (gRPC-Web) the trailer envelope. */
function echoedId(r: Awaited<ReturnType<typeof h2>>): string | undefined {
  const header = r.headers["x-request-id"];
  if (typeof header === "string") return header;
  const trailer = r.trailers.get("x-request-id");
  if (trailer) return trailer;
  const text = r.body.toString("latin1");
  return /x-request-id: ([^\r\n]+)/.exec(text)?.[1];
}

const lastRequestLine = (t: TestHub) => [...t.events].reverse().find((e) => e.event === "request_error" || e.event === "request")?.fields;

describe("the request id of a request connect refuses while reading it", () => {
  const garbage = Buffer.from([0x0a, 0xff, 0xff]);
  it.each([
    ["Connect JSON (fast path)", { "content-type": "application/json" }, Buffer.from('{"name":')],
    ["Connect binary with a deadline (connect's handler)", { "content-type": "application/proto", "connect-timeout-ms": "10000" }, garbage],
    ["Connect with a malformed timeout", { "content-type": "application/json", "connect-timeout-ms": "soon" }, Buffer.from('{"name":"a","project":"p"}')],
    ["gRPC", { "content-type": "application/grpc", te: "trailers" }, envelope(0, garbage)],
    ["gRPC with a malformed grpc-timeout", { "content-type": "application/grpc", te: "trailers", "grpc-timeout": "1x" }, envelope(0, garbage)],
    ["gRPC-Web", { "content-type": "application/grpc-web+proto" }, envelope(0, garbage)],
    ["an unsupported content type", { "content-type": "text/plain" }, Buffer.from("x")],
  ] as const)("%s: the answer and the log line carry the client's x-request-id", async (_, headers, body) => {
    await using t = await startTestHub();
    const r = await h2(t.baseUrl, { ":method": "POST", ":path": registerPath, "x-request-id": rid, ...headers }, body);
    expect(r.status).toBeLessThan(500);
    expect(echoedId(r)).toBe(rid);
    expect(lastRequestLine(t)).toMatchObject({ requestId: rid });
  });

  it("control: a refusal the interceptors make carries it", async () => {
    await using t = await startTestHub();
    const r = await h2(t.baseUrl, { ":method": "POST", ":path": registerPath, "x-request-id": rid, "content-type": "application/json" }, Buffer.from('{"name":"","project":"p"}'));
    expect(echoedId(r)).toBe(rid);
    expect(lastRequestLine(t)).toMatchObject({ requestId: rid });
  });
});
