// Property: requests malformed at the HTTP level (request targets that are not paths or do not
// percent-decode, methods no route has or llhttp does not know, oversized, duplicated and
// ill-formed headers, bodies over 256 KiB) get a 4xx with the documented REST error body on
// HTTP/1.1 and HTTP/2, the hub stays up and nothing changes. Paths and methods also hit the RPC
// paths and /health, /ready, /metrics.
import { afterAll, beforeAll, describe } from "vitest";
import { fc, test } from "@fast-check/vitest";
import { checkRest, describeRequest } from "./checks.js";
import { badEscape, parsedMethods, routed } from "./generators.js";
import { params, report, runBatch, startWorld, stopWorld, timeoutFor, type World } from "./harness.js";
import { send, type RawRequest } from "./raw.js";
import { credHeaders, type Creds } from "./samples.js";

/** Request targets that are not a route: each must be refused with route_not_found or protocol_error. */
const malformedTargets = [
  "//", "///", "//[", "//a:b", "//%zz", "%", "%zz", "/v1/leases/%ff", "*", "/%", "/v1/%", "//v1/agents", "///v1/agents",
  "/v1//agents", "/v1/agents/", "/./v1/agents", "/v1/./agents", "/v1/../v1/agents", "/v1/agents/..", "/%2e%2e/v1/agents",
  "/v1%2fagents", "\\v1\\agents", "/v1/agents\\", "//[::1]/v1/agents", "//h:99999/v1/agents", "//@/v1/agents", "//x/v1/agents",
  "/health/", "//health", "/HEALTH", "/kxm.hub.v1.LeaseService/AcquireLease/", "//kxm.hub.v1.LeaseService/AcquireLease",
  "/kxm.hub.v1.LeaseService/", "/kxm.hub.v1.LeaseService/Nope", "/kxm.hub.v1.LeaseService/AcquireLease%00", "/v1/leases/%ED%B0%80",
  "/v1/leases/\u00e9", "/v1/leases/a\u0000b", "/v1/leases/a\tb", "/v1/messages/%C0%AF", "/v1/sync/runs/%/%/cursor", "/v1/agents/%E0%A4%A",
  "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo/x", "/" + "a/".repeat(3000), "/v1/leases/" + "%zz".repeat(3000),
];

const segment = fc.oneof(
  fc.constantFrom("", ".", "..", "%", "%zz", "%ff", "%2F", "%00", "[", "]", ":", "@", "a:b", "v1", "leases", "agents", "messages", "x", "%ED%A0%80", "acquire", "~", "%25"),
  badEscape,
);
const randomTarget = fc
  .tuple(fc.constantFrom("/", "//", "///", ""), fc.array(segment, { minLength: 1, maxLength: 6 }))
  .map(([lead, segs]) => lead + segs.join("/"))
  .filter((t) => t !== "" && !/^\/(health|ready|metrics)$/.test(t));

/** Methods: those llhttp knows, made-up tokens (refused by llhttp on HTTP/1.1), and odd spellings. */
const methods = fc.constantFrom("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT", "PROPFIND", "QUERY", "M-SEARCH", "FOO", "BREW", "get", "Post", "X".repeat(200), "PRI");

type HeaderSpec =
  | { kind: "oversized"; size: number }
  | { kind: "many"; count: number }
  | { kind: "duplicate"; name: string; values: [string, string] }
  | { kind: "conflicting-length" }
  | { kind: "chunked-and-length" }
  | { kind: "bad-name" }
  | { kind: "obs-fold" }
  | { kind: "nul-in-value" }
  | { kind: "latin1-value" };

const headerSpec: fc.Arbitrary<HeaderSpec> = fc.oneof(
  fc.record({ kind: fc.constant("oversized" as const), size: fc.constantFrom(8_000, 17_000, 70_000) }),
  fc.record({ kind: fc.constant("many" as const), count: fc.constantFrom(100, 500, 2_100) }),
  fc.record({
    kind: fc.constant("duplicate" as const),
    name: fc.constantFrom("content-type", "authorization", "x-kxm-agent-id", "x-kxm-agent-key", "x-request-id", "host", "content-encoding", "connect-protocol-version", "te"),
    values: fc.constantFrom<[string, string]>(["application/json", "text/plain"], ["a", "b"], ["", "x"], ["Bearer fuzz-p", "Bearer nope"]),
  }),
  fc.constantFrom<HeaderSpec>({ kind: "conflicting-length" }, { kind: "chunked-and-length" }, { kind: "bad-name" }, { kind: "obs-fold" }, { kind: "nul-in-value" }, { kind: "latin1-value" }),
);

type BodySpec = null | { kind: "json" } | { kind: "garbage"; bytes: number[] } | { kind: "big"; size: number };
const bodySpec: fc.Arbitrary<BodySpec> = fc.oneof(
  fc.constant(null),
  fc.constant({ kind: "json" as const }),
  fc.record({ kind: fc.constant("garbage" as const), bytes: fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 32 }) }),
  fc.record({ kind: fc.constant("big" as const), size: fc.constantFrom(262_145, 1_000_000) }),
);

interface WireCase {
  transport: "h1" | "h2";
  method: string;
  target: string;
  headers: HeaderSpec[];
  body: BodySpec;
  creds: Creds;
}

const wireCase: fc.Arbitrary<WireCase> = fc.record({
  transport: fc.constantFrom("h1" as const, "h1" as const, "h2" as const),
  method: methods,
  target: fc.oneof(fc.constantFrom(...malformedTargets), randomTarget),
  headers: fc.array(headerSpec, { maxLength: 2 }),
  body: bodySpec,
  creds: fc.constantFrom<Creds>("none", "project", "admin", "wrongKey", "wrongToken"),
});

function materialize(c: WireCase, w: World): RawRequest {
  const headers: [string, string][] = credHeaders(c.creds, w);
  let body: Buffer | undefined;
  if (c.body?.kind === "json") body = Buffer.from('{"name":"fz","project":"p","ttlMs":60000}');
  if (c.body?.kind === "garbage") body = Buffer.from(c.body.bytes);
  if (c.body?.kind === "big") body = Buffer.from(`{"zz":"${"y".repeat(c.body.size)}"}`);
  if (body) headers.push(["content-type", "application/json"]);
  let noContentLength = false;
  for (const h of c.headers) {
    if (h.kind === "oversized") headers.push(["x-fuzz", "y".repeat(h.size)]);
    if (h.kind === "many") for (let i = 0; i < h.count; i++) headers.push([`x-fuzz-${i}`, "1"]);
    if (h.kind === "duplicate") headers.push([h.name, h.values[0]], [h.name, h.values[1]]);
    if (h.kind === "conflicting-length") {
      body ??= Buffer.from("{}");
      headers.push(["content-length", String(body.length)], ["content-length", String(body.length + 1)]);
      noContentLength = true;
    }
    if (h.kind === "chunked-and-length") headers.push(["transfer-encoding", "chunked"]);
    if (h.kind === "bad-name") headers.push(["x fuzz", "1"]);
    if (h.kind === "obs-fold") headers.push(["x-fuzz", "a\r\n b"]);
    if (h.kind === "nul-in-value") headers.push(["x-fuzz", "a\u0000b"]);
    if (h.kind === "latin1-value") headers.push(["x-fuzz", "caf\u00e9\u00ff"]);
  }
  return { method: c.method, path: c.target, headers, body, noContentLength };
}

/** What may happen below the hub: nghttp2 resets streams whose pseudo-headers or header lists it refuses. */
const h2MayReset = (c: WireCase) =>
  c.transport === "h2" && (!c.target.startsWith("/") || /[\u0000-\u001f\u007f]/.test(c.target) || c.method === "CONNECT" || c.headers.length > 0);

/** The survey's grouping: what is most likely to decide the answer. */
function classOf(c: WireCase): string {
  if (c.headers.length) return `headers:${c.headers.map((h) => (h.kind === "duplicate" ? `duplicate ${h.name}` : h.kind)).join("+")}`;
  if (!(parsedMethods as readonly string[]).includes(c.method) && c.method !== "CONNECT") return "unknown method";
  if (c.method === "CONNECT") return "CONNECT";
  if (c.body?.kind === "big") return "big body";
  return malformedTargets.includes(c.target) ? `target ${JSON.stringify(c.target.length > 30 ? `${c.target.slice(0, 30)}…` : c.target)}` : "random target";
}

let w: World;
beforeAll(async () => {
  w = await startWorld();
}, 60_000);
afterAll(async () => {
  report("wire");
  await stopWorld(w);
});

describe("HTTP-level hostile requests on both HTTP versions", () => {
  test.prop([fc.array(wireCase, { minLength: 1, maxLength: 6 })], params(600))(
    "get a 4xx with the documented error body (never a 5xx, a hang or a crash) and change nothing",
    async (cases) => {
      await runBatch(w, cases, async (c) => {
        const req = materialize(c, w);
        const res = await send(c.transport, w.port, req);
        if (res.outcome === "reset" && h2MayReset(c)) return { violations: [], accepted: false };
        const path = c.target.split("?")[0];
        const codes = routed(c.method, path) ? undefined : ["route_not_found", "protocol_error", "payload_too_large"];
        return checkRest(`wire ${c.transport}`, classOf(c), res, { mustRefuse: true, codes }, describeRequest(c.transport, req));
      });
    },
    timeoutFor(600),
  );
});
