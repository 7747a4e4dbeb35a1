import zlib from "node:zlib";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { h2, reasonOf } from "../fixtures/wire.js";

/**
 * Connect unary errors travel with the HTTP status of their code (the Connect protocol's table,
 * connect's codeToHttpStatus: resource_exhausted -> 429; the hub's own resource_exhausted
 * refusals, rate_limited, get 429). A Connect unary body over 256 KiB is refused as
 * resource_exhausted + PAYLOAD_TOO_LARGE, but with HTTP status 400: framework-errors.ts
 * (connectUnary) writes every typed replacement with status 400.
 */
/**
 * A Connect unary body over the limit is refused as connect would refuse it, with the HTTP status
 * of its code: resource_exhausted is 429 (as a rate limit is), not 400 (framework-errors.ts).
 */
const registerPath = "/kxm.hub.v1.PresenceService/RegisterAgent";
const big = Buffer.from(JSON.stringify({ name: "x", project: "p", purpose: "y".repeat(300_000) }));

it.each([
  ["a JSON body over 256 KiB (HTTP/2, no content-length)", {}, big],
  ["a JSON body over 256 KiB with its content-length", { "content-length": String(big.length) }, big],
  ["a gzip body over 256 KiB once decompressed", { "content-encoding": "gzip" }, zlib.gzipSync(big)],
] as const)("Connect unary: %s is answered with the status of resource_exhausted", async (_, extra, body) => {
  await using t = await startTestHub();
  const r = await h2(t.baseUrl, { ":method": "POST", ":path": registerPath, "content-type": "application/json", ...extra }, body);
  const e = errorFromJsonBytes(new Uint8Array(r.body), undefined, new ConnectError("", Code.Unknown));
  expect([e.code, reasonOf(e)]).toEqual([Code.ResourceExhausted, "PAYLOAD_TOO_LARGE"]);
  expect(r.status).toBe(codeToHttpStatus(Code.ResourceExhausted)); // 429; the hub answers 400
});
