// Property: every REST route (derived from the google.api.http rules of servedServices, as the
// hub derives them) refuses each hostile request with the documented status, code and body,
// never answers 5xx, stays up, and the batch changes nothing in the store.
import { afterAll, beforeAll, describe } from "vitest";
import { fc, test } from "@fast-check/vitest";
import { ScalarType } from "@bufbuild/protobuf";
import type { RestRoute } from "../../src/transcode/http-rules.js";
import { checkRest, describeRequest, type Expectation } from "./checks.js";
import { bodyFields, entriesOf, jsonBytes, pathVariables, restCase, restRoutes as routes, routed, routeName, type JVal, type RestCase } from "./generators.js";
import { params, report, runBatch, startWorld, stopWorld, timeoutFor, type World } from "./harness.js";
import { send, type RawRequest } from "./raw.js";
import { credHeaders, pathValue, sampleJson } from "./samples.js";

const MAX_BODY = 262_144;
const byName = new Map(routes.map((r) => [routeName(r), r]));

/** The sample's scalar and list fields as query parameters (GET / DELETE routes). */
function sampleQuery(r: RestRoute, w: World): [string, string][] {
  if (r.body !== "") return [];
  const vars = new Set(pathVariables(r).map((v) => r.method.input.fields.find((f) => f.name === v)?.jsonName));
  return Object.entries(sampleJson(r.method, w))
    .filter(([k]) => !vars.has(k))
    .flatMap(([k, v]) => (Array.isArray(v) ? v.map((x): [string, string] => [k, String(x)]) : [[k, String(v)] as [string, string]]));
}

const label = (c: RestCase) => {
  const p = c.poison;
  const at = "field" in p ? p.field : "where" in p ? p.where : null;
  return p.kind + (at ? `:${at}` : "");
};

/** Turns a case into bytes and says what the hub must answer. */
function materialize(c: RestCase, w: World): { req: RawRequest; expect: Expectation } {
  const r = byName.get(c.route)!;
  const p = c.poison;
  let method: string = r.verb;
  const values = new Map(pathVariables(r).map((v) => [v, encodeURIComponent(pathValue(v, w))]));
  if (p.kind === "path-escape") values.set(p.variable, p.escape);
  let path = r.template.replace(/\{([a-z_]+)\}/g, (_, v: string) => values.get(v)!);
  if (p.kind === "bad-slash") {
    if (p.variant === "empty-segment") path = path.replace(/^\/v1\//, "/v1//");
    else if (p.variant === "trailing") path += "/";
    else if (p.variant === "leading") path = `/${path}`;
    else path = `//x${path}`;
  }
  if (p.kind === "wrong-method") method = p.method;
  let query = sampleQuery(r, w);
  if (p.kind === "query") query = [...query.filter(([k]) => k !== p.param), [p.param, p.value.replaceAll(" ", "%20")]];
  const headers = credHeaders(c.creds, w);
  if (c.requestId !== null) headers.push(["x-request-id", c.requestId]);
  let body: Buffer | undefined;
  if (r.body === "*") {
    const skip = new Set(pathVariables(r).map((v) => r.method.input.fields.find((f) => f.name === v)!.jsonName));
    const entries: [string, JVal][] = [...entriesOf(sampleJson(r.method, w)).filter(([k]) => !skip.has(k)), ...c.extras];
    const set = (k: string, v: JVal) => {
      const i = entries.findIndex(([key]) => key === k);
      if (i >= 0) entries[i] = [k, v];
      else entries.push([k, v]);
    };
    if (p.kind === "invalid-utf8") set(p.field ?? "zzBytes", { $utf8: "fz", bytes: p.bytes });
    if (p.kind === "wrong-type") set(p.field, p.value);
    if (p.kind === "lone-surrogate") {
      if (p.where === "key") set(p.value, 1);
      else if (p.where === "value") set("zzText", p.value);
      else if (p.where === "nested") set("zzNested", [{ $obj: [["a", [p.value]]] }]);
      else set(p.where, p.value);
    }
    if (p.kind === "too-large") {
      const str = bodyFields(r).find((f) => f.fieldKind === "scalar" && f.scalar === ScalarType.STRING)?.jsonName;
      if (p.where === "nesting") set("zzDeep", { $deep: Math.ceil(p.size / 2) });
      else set(p.where === "field" && str ? str : "zzPad", { $big: p.size });
    }
    body = jsonBytes(p.kind === "not-object" ? p.value : { $obj: entries });
    if (c.pad && body.length < MAX_BODY - 20 && p.kind !== "too-large" && p.kind !== "not-object") {
      const base = jsonBytes({ $obj: [...entries, ["zzFill", ""]] }).length;
      body = jsonBytes({ $obj: [...entries, ["zzFill", { $big: MAX_BODY - base }]] });
    }
    if (p.kind === "invalid-json") {
      const cut = body.subarray(0, Math.floor(p.cut * body.length));
      body = Buffer.concat([cut, Buffer.from(p.junk)]);
      if (body.length === 0 || parses(body)) body = Buffer.concat([body, Buffer.from("x")]);
    }
    if (p.kind !== "content-type") headers.push(["content-type", c.contentType]);
    else if (p.type !== null) headers.push(["content-type", p.type]);
  }
  const qs = query.length ? `?${query.map(([k, v]) => `${k}=${v}`).join("&")}` : "";
  const expect = expectationFor(c, r);
  return { req: { method, path: path + qs, headers, body }, expect };
}

function parses(b: Buffer): boolean {
  try {
    JSON.parse(b.toString("utf8"));
    return true;
  } catch {
    return false;
  }
}

function expectationFor(c: RestCase, r: RestRoute): Expectation {
  const codes = (...codes: string[]): Expectation => ({ mustRefuse: true, codes });
  switch (c.poison.kind) {
    case "invalid-json":
    case "not-object":
      return codes("invalid_json");
    case "invalid-utf8":
      return codes("invalid_json", "protocol_error");
    case "lone-surrogate":
    case "path-escape":
    case "query":
      return codes("protocol_error");
    case "wrong-type":
      // PushEvents keeps the reference's order: a non-list `events` is refused after auth.
      return c.poison.field === "events" && r.method.name === "PushEvents" ? codes("invalid_sync_batch", "invalid_auth") : codes("protocol_error");
    case "content-type":
      return codes("unsupported_media_type");
    case "too-large":
      return codes("payload_too_large");
    case "wrong-method":
    case "bad-slash":
      return codes("route_not_found");
  }
}

let w: World;
beforeAll(async () => {
  w = await startWorld();
}, 60_000);
afterAll(async () => {
  report("rest");
  await stopWorld(w);
});

const anyCase = fc.oneof(...routes.map((r) => restCase(r, routed)));

describe("REST face: hostile requests to every route", () => {
  test.prop([fc.array(anyCase, { minLength: 1, maxLength: 6 })], params(800))(
    "are refused with the documented code and body, never 5xx, and change nothing",
    async (cases) => {
      await runBatch(w, cases, async (c) => {
        const { req, expect } = materialize(c, w);
        const res = await send(c.transport, w.port, req);
        return checkRest(c.route, label(c), res, expect, describeRequest(c.transport, req));
      });
    },
    timeoutFor(800),
  );
});
