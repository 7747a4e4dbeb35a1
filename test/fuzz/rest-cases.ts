// The REST face's hostile cases as bytes, and what the hub must answer to each: shared by
// rest.fuzz.test.ts (the answers are refusals as documented) and rest-differential.fuzz.test.ts
// (the two ways a call runs answer alike).
import { ScalarType } from "@bufbuild/protobuf";
import type { RestRoute } from "../../src/transcode/http-rules.js";
import type { Expectation } from "./checks.js";
import { bodyFields, entriesOf, jsonBytes, pathVariables, restRoutes as routes, routeName, type JVal, type RestCase } from "./generators.js";
import type { World } from "./harness.js";
import type { RawRequest } from "./raw.js";
import { credHeaders, pathValue, sampleJson } from "./samples.js";

const MAX_BODY = 262_144;
export const byName = new Map(routes.map((r) => [routeName(r), r]));

/** The sample's scalar and list fields as query parameters (GET / DELETE routes). */
export function sampleQuery(r: RestRoute, w: World): [string, string][] {
  if (r.body !== "") return [];
  const vars = new Set(pathVariables(r).map((v) => r.method.input.fields.find((f) => f.name === v)?.jsonName));
  return Object.entries(sampleJson(r.method, w))
    .filter(([k]) => !vars.has(k))
    .flatMap(([k, v]) => (Array.isArray(v) ? v.map((x): [string, string] => [k, String(x)]) : [[k, String(v)] as [string, string]]));
}

export const label = (c: RestCase) => {
  const p = c.poison;
  const at = "field" in p ? p.field : "where" in p ? p.where : null;
  return p.kind + (at ? `:${at}` : "");
};

/** Turns a case into bytes and says what the hub must answer. */
export function materialize(c: RestCase, w: World): { req: RawRequest; expect: Expectation } {
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

/**
 * A request the face cannot take is first authenticated by its call's rule (spec §3.2, D19): a
 * caller the rule refuses gets that refusal instead of the request's own.
 */
const callerRefusals = ["invalid_auth", "invalid_agent_identity", "admin_auth_not_configured"];

function expectationFor(c: RestCase, r: RestRoute): Expectation {
  const codes = (...codes: string[]): Expectation => ({ mustRefuse: true, codes });
  const orCaller = (...codes: string[]): Expectation => ({ mustRefuse: true, codes: [...codes, ...callerRefusals] });
  switch (c.poison.kind) {
    case "invalid-json":
    case "not-object":
      return orCaller("invalid_json");
    case "invalid-utf8":
      return orCaller("invalid_json", "protocol_error");
    case "lone-surrogate":
    case "query":
      return orCaller("protocol_error");
    case "path-escape":
      return codes("protocol_error");
    case "wrong-type":
      // PushEvents keeps the reference's order: a non-list `events` is refused after auth.
      return c.poison.field === "events" && r.method.name === "PushEvents" ? codes("invalid_sync_batch", "invalid_auth") : orCaller("protocol_error");
    case "content-type":
      return orCaller("unsupported_media_type");
    case "too-large":
      return orCaller("payload_too_large");
    case "wrong-method":
    case "bad-slash":
      return codes("route_not_found");
  }
}

