// Differential, REST face: every generated REST request is sent twice to the same hub, once with
// the wire switch on "fast" (the in-process call runs the interceptors' rules as plain calls,
// src/server/unary-rules.ts) and once on "connect" (the same call through the interceptor chain
// itself), and both answers must be the same HTTP message: the status, every header but `date`
// and the message framing, and the body byte for byte.
//
// The requests: every route's valid sample with every kind of credentials (accepted calls,
// refusals of auth and of the rules, reads), and the hostile cases of rest.fuzz.test.ts. As in
// differential.fuzz.test.ts, an accepted call that writes cannot be repeated to the same answer
// and is not compared. A last test compares the rate limit's headers and its refusal, on a hub
// whose limit is on.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fc, test } from "@fast-check/vitest";
import { describeRequest } from "./checks.js";
import { jsonContentTypes, pathVariables, restCase, restRoutes as routes, routed, routeName } from "./generators.js";
import { params, report, runBatch, startWorld, stopWorld, timeoutFor, type Checked, type Violation, type World } from "./harness.js";
import { comparable, send, type RawRequest, type RawResponse, type Transport } from "./raw.js";
import { byName, label, materialize, sampleQuery } from "./rest-cases.js";
import { credHeaders, credsKinds, pathValue, sampleJson, type Creds } from "./samples.js";
import { startTestHub } from "../fixtures/hub.js";

let w: World;
const counts = { compared: 0, writesNotCompared: 0 };
beforeAll(async () => {
  w = await startWorld();
}, 60_000);
afterAll(async () => {
  report("rest-differential");
  console.log(`rest differential: ${counts.compared} answers compared byte for byte, ${counts.writesNotCompared} accepted writes not compared`);
  await stopWorld(w);
});


/** `req` with one well-formed request id of its own (a generated one would differ between the two answers). */
const withRequestId = (req: RawRequest): RawRequest => ({
  ...req,
  headers: [...req.headers.filter(([k]) => k.toLowerCase() !== "x-request-id"), ["x-request-id", "req-rest-differential"]],
});

/** Sends `req` with the switch on each setting; the answers must match. */
async function bothWays(req: RawRequest, transport: Transport, label: string): Promise<Checked> {
  const sameId = withRequestId(req);
  const wire = w.t.hub.wire;
  let direct: RawResponse, chain: RawResponse;
  try {
    wire.mode = "fast";
    direct = await send(transport, w.port, sameId);
    wire.mode = "connect";
    chain = await send(transport, w.port, sameId);
  } finally {
    wire.mode = "fast";
  }
  const accepted = direct.status >= 200 && direct.status < 300;
  const writes = accepted && req.method !== "GET";
  if (writes) counts.writesNotCompared++;
  else counts.compared++;
  const violations: Violation[] = [];
  const a = comparable(direct);
  const b = comparable(chain);
  if (!writes && JSON.stringify(a) !== JSON.stringify(b)) {
    violations.push({
      signature: `${label.split(" ")[0]}: the rules as plain calls and the interceptor chain answer differently`,
      detail: `${label}\nplain calls: ${JSON.stringify(a).slice(0, 700)}\nchain:       ${JSON.stringify(b).slice(0, 700)}`,
    });
  }
  return { violations, accepted: accepted || (chain.status >= 200 && chain.status < 300) };
}

/** A route's valid sample with one kind of credentials, as bytes. */
function validRequest(routeKey: string, creds: Creds, contentType: string): RawRequest {
  const r = byName.get(routeKey)!;
  const values = new Map(pathVariables(r).map((v) => [v, encodeURIComponent(pathValue(v, w))]));
  const path = r.template.replace(/\{([a-z_]+)\}/g, (_, v: string) => values.get(v)!);
  const query = sampleQuery(r, w);
  const qs = query.length ? `?${query.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join("&")}` : "";
  const headers = credHeaders(creds, w);
  let body: Buffer | undefined;
  if (r.body === "*") {
    const skip = new Set(pathVariables(r).map((v) => r.method.input.fields.find((f) => f.name === v)!.jsonName));
    body = Buffer.from(JSON.stringify(Object.fromEntries(Object.entries(sampleJson(r.method, w)).filter(([k]) => !skip.has(k)))));
    headers.push(["content-type", contentType]);
  }
  return { method: r.verb, path: path + qs, headers, body };
}

const validCase = fc.record({
  route: fc.constantFrom(...routes.map(routeName)),
  creds: fc.constantFrom(...credsKinds),
  transport: fc.constantFrom<Transport>("h1", "h2"),
  contentType: fc.constantFrom(...jsonContentTypes),
});

describe("the REST face answers alike whichever way the rules run", () => {
  test.prop([fc.array(validCase, { minLength: 1, maxLength: 6 })], params(80))(
    "valid calls of every route, with every kind of credentials",
    async (cases) => {
      await runBatch(w, cases, (c) => {
        const req = validRequest(c.route, c.creds, c.contentType);
        return bothWays(req, c.transport, `${c.route} (${c.creds}) ${describeRequest(c.transport, req)}`);
      });
    },
    timeoutFor(80),
  );

  test.prop([fc.array(fc.oneof(...routes.map((r) => restCase(r, routed))), { minLength: 1, maxLength: 6 })], params(120))(
    "hostile calls of every route",
    async (cases) => {
      await runBatch(w, cases, (c) => {
        const { req } = materialize(c, w);
        return bothWays(req, c.transport, `${c.route} ${label(c)} ${describeRequest(c.transport, req)}`);
      });
    },
    timeoutFor(120),
  );

  it("compares two ways: the switch decides whether the rules run as plain calls", async () => {
    const wire = w.t.hub.wire;
    const req = withRequestId(validRequest("GET /v1/leases/{name}", "agentA", "application/json"));
    const before = wire.directServed!;
    const direct = await send("h1", w.port, req);
    expect(wire.directServed! - before).toBe(1);
    wire.mode = "connect";
    const chain = await send("h1", w.port, req).finally(() => (wire.mode = "fast"));
    expect(wire.directServed! - before).toBe(1);
    expect(direct.status).toBe(200);
    expect(comparable(direct)).toEqual(comparable(chain));
  });
});

describe("the rate limit, whichever way the rules run", () => {
  it("sends the same x-ratelimit headers and the same rate_limited refusal", async () => {
    const windowMs = 60_000;
    await using t = await startTestHub({ config: { authToken: "admin", rateLimit: { windowMs, maxRequests: 2 } } });
    const a = await t.register("alpha", "p", "admin");
    expect((await t.rest("/v1/leases/db/acquire", { json: {}, headers: a.headers })).status).toBe(200);
    const port = Number(new URL(t.baseUrl).port);
    const get: RawRequest = { method: "GET", path: "/v1/leases/db", headers: [...Object.entries(a.headers), ["x-request-id", "req-rate"]] };
    const noAuth: RawRequest = { method: "GET", path: "/v1/leases/db", headers: [["x-request-id", "req-rate"]] };
    /** A fresh window, then three calls: two within the budget, one over it. */
    const window = async (mode: "fast" | "connect", req: RawRequest) => {
      t.clock.advance(windowMs);
      t.hub.wire.mode = mode;
      try {
        const answers: RawResponse[] = [];
        for (let i = 0; i < 3; i++) answers.push(await send("h1", port, req));
        return answers.map(comparable);
      } finally {
        t.hub.wire.mode = "fast";
      }
    };
    for (const req of [get, noAuth]) {
      const direct = await window("fast", req);
      const chain = await window("connect", req);
      expect(direct.map((r) => r.status)).toEqual(req === get ? [200, 200, 429] : [401, 401, 429]);
      expect(direct[2]!.headers["retry-after"]).toBeDefined();
      expect(direct).toEqual(chain);
    }
  });
});
