// REST routes derived from the `google.api.http` annotations of the services.
//
// Only the subset the hub's protos use is supported: a GET/POST/PUT/PATCH/DELETE pattern made
// of literal segments and single-segment variables (`{field}` / `{field=*}`) naming top-level
// string fields, `body` either "" or "*", no additional bindings; a server-streaming method only
// as a GET without a body (served as server-sent events). Anything else throws from
// buildRestRoutes, so a proto change the router cannot honour fails at start-up, not per call.
import { create, getOption, hasOption, ScalarType, type DescField, type DescMethod, type DescService, type JsonObject, type Message } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { http } from "../../gen/ts/google/api/annotations_pb.js";
import { methodKey } from "../wire/method-key.js";
import { fromRestJson, fromRestQuery } from "./rest-json.js";

export type RestVerb = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

export interface RestRoute {
  verb: RestVerb;
  /** The path template as written in the proto, e.g. "/v1/leases/{name}/acquire". */
  template: string;
  service: DescService;
  method: DescMethod;
  /** "*" (the whole input message is the JSON body) or "" (no body; query parameters). */
  body: string;
  /** A server-streaming method: answered as server-sent events, one per message. */
  streaming: boolean;
  /** `<service>/<method>`, the key of its rules (wire/method-key.ts). */
  key: string;
  /** `/<service>/<method>`, its RPC path. */
  path: string;
  /** `<verb> <template>`, as the call's record names it. */
  label: string;
  /** The input's field each path variable names. */
  variables: ReadonlyMap<string, DescField>;
}

/** A percent-escape in a path variable that does not decode (e.g. "%E0%A4%A"). A client error. */
export class RestPathError extends Error {
  constructor(message = "malformed percent-escape in path") {
    super(message);
    this.name = "RestPathError";
  }
}

/** One template segment: a literal, or a variable naming a top-level string field. */
type Segment = { literal: string } | { variable: string };

const VERBS = { get: "GET", put: "PUT", post: "POST", delete: "DELETE", patch: "PATCH" } as const;
const LITERAL = /^[A-Za-z0-9._~-]+$/;
const VARIABLE = /^\{([A-Za-z_][A-Za-z0-9_]*)(?:=\*)?\}$/;

// Parsed templates, keyed by route so RestRoute stays the plain shape callers see.
const segmentCache = new WeakMap<RestRoute, readonly Segment[]>();

function parseTemplate(template: string, where: string): Segment[] {
  if (!template.startsWith("/") || template === "/") throw new Error(`${where}: path template must start with "/" and have segments: ${template}`);
  return template
    .slice(1)
    .split("/")
    .map((seg) => {
      const v = VARIABLE.exec(seg);
      if (v) return { variable: v[1] };
      if (LITERAL.test(seg)) return { literal: seg };
      throw new Error(`${where}: unsupported path segment "${seg}" in ${template} (only literals and {field} / {field=*})`);
    });
}

function segmentsOf(route: RestRoute): readonly Segment[] {
  let segs = segmentCache.get(route);
  if (!segs) {
    segs = parseTemplate(route.template, `${route.method.parent.typeName}.${route.method.name}`);
    segmentCache.set(route, segs);
  }
  return segs;
}

const literalCount = (segs: readonly Segment[]): number => segs.filter((s) => "literal" in s).length;

/** Builds the routes of every unary or server-streaming method with an http rule; throws on anything unsupported. */
export function buildRestRoutes(services: DescService[]): RestRoute[] {
  const routes: RestRoute[] = [];
  for (const service of services) {
    for (const method of service.methods) {
      const streaming = method.methodKind === "server_streaming";
      if ((method.methodKind !== "unary" && !streaming) || !hasOption(method, http)) continue;
      const where = `${service.typeName}.${method.name}`;
      const rule = getOption(method, http);
      const pattern = rule.pattern;
      if (pattern.case === undefined || pattern.case === "custom") throw new Error(`${where}: unsupported http pattern ${pattern.case ?? "(none)"}`);
      if (rule.additionalBindings.length > 0) throw new Error(`${where}: additional_bindings are not supported`);
      if (rule.responseBody !== "") throw new Error(`${where}: response_body is not supported`);
      if (rule.body !== "" && rule.body !== "*") throw new Error(`${where}: body must be "" or "*", got "${rule.body}"`);
      if (streaming && (pattern.case !== "get" || rule.body !== "")) throw new Error(`${where}: a server stream maps to a GET without a body`);
      const verb = VERBS[pattern.case];
      const key = methodKey(method);
      const variables = new Map<string, DescField>();
      const route: RestRoute = { verb, template: pattern.value, service, method, body: rule.body, streaming, key, path: `/${key}`, label: `${verb} ${pattern.value}`, variables };
      const segs = parseTemplate(route.template, where);
      for (const seg of segs) {
        if (!("variable" in seg)) continue;
        const field = method.input.fields.find((f) => f.name === seg.variable);
        if (!field || field.fieldKind !== "scalar" || field.scalar !== ScalarType.STRING) {
          throw new Error(`${where}: path variable {${seg.variable}} must name a top-level string field of ${method.input.typeName}`);
        }
        if (variables.has(seg.variable)) throw new Error(`${where}: path variable {${seg.variable}} appears twice`);
        variables.set(seg.variable, field);
      }
      segmentCache.set(route, segs);
      for (const other of routes) assertNotAmbiguous(other, route);
      routes.push(route);
    }
  }
  return routes;
}

/**
 * Two routes of one verb that can match the same path must differ in their literal count,
 * otherwise matchRestRoute's "most literals wins" rule could not pick one.
 */
function assertNotAmbiguous(a: RestRoute, b: RestRoute): void {
  if (a.verb !== b.verb) return;
  const sa = segmentsOf(a);
  const sb = segmentsOf(b);
  if (sa.length !== sb.length || literalCount(sa) !== literalCount(sb)) return;
  const overlap = sa.every((s, i) => !("literal" in s) || !("literal" in sb[i]) || s.literal === (sb[i] as { literal: string }).literal);
  if (overlap) throw new Error(`ambiguous REST routes: ${a.verb} ${a.template} and ${b.verb} ${b.template}`);
}

interface Candidate {
  route: RestRoute;
  /** Per segment, the literal it must equal, or undefined for a variable. */
  literalAt: readonly (string | undefined)[];
  /** Per segment, the variable it binds, or undefined for a literal. */
  variableAt: readonly (string | undefined)[];
  literals: number;
}

/**
 * A route table's routes by verb, then by segment count, in table order: what a path can only
 * match. Read once per REST call, so it holds plain arrays and no per-call strings.
 */
const candidateCache = new WeakMap<readonly RestRoute[], Map<string, Candidate[][]>>();
function candidatesOf(routes: readonly RestRoute[]): Map<string, Candidate[][]> {
  let byVerb = candidateCache.get(routes);
  if (!byVerb) {
    byVerb = new Map();
    for (const route of routes) {
      const segs = segmentsOf(route);
      const byLength = byVerb.get(route.verb) ?? [];
      byVerb.set(route.verb, byLength);
      (byLength[segs.length] ??= []).push({
        route,
        literalAt: segs.map((s) => ("literal" in s ? s.literal : undefined)),
        variableAt: segs.map((s) => ("variable" in s ? s.variable : undefined)),
        literals: literalCount(segs),
      });
    }
    candidateCache.set(routes, byVerb);
  }
  return byVerb;
}

/** Whether every literal of the candidate is its segment of the path, and no variable's segment is empty. */
function fits(c: Candidate, parts: readonly string[]): boolean {
  for (let i = 0; i < parts.length; i++) {
    const literal = c.literalAt[i];
    if (literal === undefined ? parts[i] === "" : literal !== parts[i]) return false;
  }
  return true;
}

/** A matched route, with its path variables decoded (frozen: a match may be answered again). */
export interface RestMatch {
  route: RestRoute;
  params: Readonly<Record<string, string>>;
}

/**
 * Finds the route for a raw (still percent-encoded) path. Matching happens on the encoded
 * segments, so "%2F" inside a variable never splits the path; variables are decoded after the
 * route is chosen. Returns undefined when no route of that verb matches (the caller's 404).
 */
export function matchRestRoute(
  routes: readonly RestRoute[],
  verb: string,
  pathname: string,
  /** The request's whole target (query included), when `pathname` is a part of it. */
  target: string = pathname,
): RestMatch | undefined {
  // The paths a busy hub is asked are few (an agent's leases, its inbox): a path matched before
  // is answered from its table's cache, with the same (frozen) params. A path that matches
  // nothing is not kept, nor one of a long target (a slice of a string keeps the whole string
  // alive: a short path with a long query would keep the query), and the cache is emptied when
  // it is full: at most a few MiB, whatever targets a client makes up.
  if (target.length > matchCachePathMax) return searchRestRoute(routes, verb, pathname, true);
  // By verb, then path: a key joined at every call would be a new string to hash at every call.
  const cache = matchCacheOf(routes);
  let paths = cache.byVerb.get(verb);
  const hit = paths?.get(pathname);
  if (hit) return hit;
  const match = searchRestRoute(routes, verb, pathname, target.length > ownCopyPast);
  if (match) {
    if (cache.size >= matchCacheMax) {
      cache.byVerb.clear();
      cache.size = 0;
      paths = undefined;
    }
    Object.freeze(match.params);
    if (!paths) cache.byVerb.set(verb, (paths = new Map()));
    paths.set(pathname, match);
    cache.size++;
  }
  return match;
}

const matchCacheMax = 4_096;
const matchCachePathMax = 512;
const matchCaches = new WeakMap<readonly RestRoute[], { byVerb: Map<string, Map<string, RestMatch>>; size: number }>();
function matchCacheOf(routes: readonly RestRoute[]) {
  let cache = matchCaches.get(routes);
  if (!cache) matchCaches.set(routes, (cache = { byVerb: new Map(), size: 0 }));
  return cache;
}

/**
 * Past this many characters of target, path variables are copies of their own: what the hub
 * keeps of a call's names (a lease row kept in memory, say) never keeps its whole target alive.
 */
const ownCopyPast = 128;
const ownCopy = (s: string) => Buffer.from(s, "utf8").toString("utf8");

function searchRestRoute(routes: readonly RestRoute[], verb: string, pathname: string, copy = false): RestMatch | undefined {
  if (!pathname.startsWith("/")) return undefined;
  const parts = pathname.slice(1).split("/");
  let best: Candidate | undefined;
  for (const c of candidatesOf(routes).get(verb)?.[parts.length] ?? []) {
    if (fits(c, parts) && (!best || c.literals > best.literals)) best = c;
  }
  if (!best) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < parts.length; i++) {
    const variable = best.variableAt[i];
    if (variable === undefined) continue;
    const part = parts[i]!;
    try {
      params[variable] = part.includes("%") ? decodeURIComponent(part) : copy ? ownCopy(part) : part;
    } catch {
      throw new RestPathError();
    }
  }
  return { route: best.route, params };
}

/**
 * Builds the input message of a matched route: from the JSON body when the rule says body "*"
 * (query ignored), else from the query string. Path variables are set last and win over body
 * keys, so a body cannot redirect a call to another resource than the URL names.
 */
export function decodeRestRequest(
  route: RestRoute,
  params: Readonly<Record<string, string>>,
  query: URLSearchParams,
  body: JsonObject | undefined,
): Message {
  const schema = route.method.input;
  const message = route.body === "*" ? fromRestJson(schema, body ?? {}) : fromRestQuery(schema, query, create(schema));
  const r = reflect(schema, message);
  for (const name of Object.keys(params)) {
    const field = route.variables.get(name);
    if (!field) throw new Error(`${route.template}: no field ${name} in ${schema.typeName}`);
    r.set(field, params[name]!);
  }
  return message;
}
