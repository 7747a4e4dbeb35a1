import { fromJson, getOption, toJson, type DescMethod, type DescService, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { http } from "../../gen/ts/google/api/annotations_pb.js";
import { ErrorInfoSchema } from "../../gen/ts/google/rpc/error_details_pb.js";
import { LeaseSchema } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { servedServices } from "../../src/server/routes.js";
import { withHeaders } from "../fixtures/clients.js";
import type { TestHub } from "../fixtures/hub.js";
import { frameTimeoutMs, until } from "../fixtures/streams.js";
import { authenticate, ctxFor, TARGET, type As, type CallerClass, type Creds, type Json, type MethodRow, type Rule } from "./matrix.cases.js";
import { changes, cut, fingerprint, headersOf, KEEPALIVE_MS, probeAlpha, sameState, type HubPool, type MatrixHub } from "./matrix.seed.js";

/** Runs one matrix case over a face: the call, and what it leaked and changed. */

// --- faces ------------------------------------------------------------------------------------

/** What a call answered: "ok" or the hub's code (REST: prefixed by the status), and all it said. */
export interface Answer {
  answer: string;
  text: string;
  payload?: Json;
  streamed?: boolean;
}

export function methodOf(rpc: string): { service: DescService; method: DescMethod } {
  const [typeName, name] = rpc.split("/");
  const service = servedServices.find((s) => s.typeName === typeName);
  const method = service?.methods.find((m) => m.name === name);
  if (!service || !method) throw new Error(`no served method ${rpc}`);
  return { service, method };
}

function refusal(e: unknown): Answer {
  if (!(e instanceof ConnectError)) throw e;
  const info = e.findDetails(ErrorInfoSchema)[0];
  const lease = e.findDetails(LeaseSchema)[0];
  const text = JSON.stringify({ message: e.rawMessage, metadata: info?.metadata, lease: lease && toJson(LeaseSchema, lease) });
  return { answer: info ? info.reason.toLowerCase() : `connect ${Code[e.code]}: ${e.rawMessage}`, text };
}

const timed = <T>(p: Promise<T>): Promise<T> =>
  Promise.race([p, new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`no frame in ${frameTimeoutMs} ms`)), frameTimeoutMs).unref())]);

type AnyClient = Record<string, (req: unknown, opts?: { signal?: AbortSignal }) => Json>;

/**
 * Calls `rpc` over `make` (a transport). A server stream is read until the hub idles, then one
 * keep-alive later: every frame of the initial burst and of `midStream`'s changes is in `payload`.
 */
export async function callRpc(
  h: MatrixHub,
  make: (url: string, i: Interceptor[]) => Transport,
  rpc: string,
  creds: Creds,
  req: JsonObject,
  /** Runs once a stream is open (after its first frame). */
  midStream?: () => Promise<void>,
): Promise<Answer> {
  const { service, method } = methodOf(rpc);
  const client = createClient(service, make(h.t.baseUrl, [withHeaders(headersOf(creds))])) as unknown as AnyClient;
  const input = fromJson(method.input, req);
  if (method.methodKind === "unary") {
    try {
      const payload = toJson(method.output, await client[method.localName]!(input));
      return { answer: "ok", text: JSON.stringify(payload), payload };
    } catch (e) {
      return refusal(e);
    }
  }
  const ac = new AbortController();
  const frames: Json[] = [];
  try {
    const it = (client[method.localName]!(input, { signal: ac.signal }) as AsyncIterable<Json>)[Symbol.asyncIterator]();
    const read = async () => {
      const r = await timed(it.next() as Promise<IteratorResult<Json>>);
      if (!r.done) frames.push(toJson(method.output, r.value));
      return r;
    };
    if ((await read()).done) return { answer: "ok", text: "[]", payload: frames, streamed: true };
    await midStream?.();
    await until(() => h.t.clock.sleepers >= 1, "an idle stream");
    h.t.clock.advance(KEEPALIVE_MS);
    // A keep-alive ends the read: the stream's own, or one of WatchProject's views'.
    const keepAlive = (v: Json) => v.event.case === "keepAlive" || v.event.value?.event?.case === "keepAlive";
    for (let r = await read(); !r.done && !keepAlive(r.value); r = await read());
    return { answer: "ok", text: JSON.stringify(frames), payload: frames, streamed: true };
  } catch (e) {
    const r = refusal(e);
    return { ...r, answer: frames.length ? `${r.answer} after ${frames.length} frame(s)` : r.answer, text: `${r.text} ${JSON.stringify(frames)}`, streamed: true };
  } finally {
    ac.abort();
  }
}

const verbs = { get: "GET", post: "POST", put: "PUT", delete: "DELETE", patch: "PATCH" } as const;

/** The REST route of a method from its google.api.http rule, or undefined (streams). */
export function restRouteOf(rpc: string): { verb: string; template: string; body: boolean } | undefined {
  const { method } = methodOf(rpc);
  if (method.methodKind !== "unary") return undefined;
  const rule = getOption(method, http);
  if (rule.pattern.case === undefined || rule.pattern.case === "custom") return undefined;
  return { verb: verbs[rule.pattern.case], template: rule.pattern.value, body: rule.body === "*" };
}

/** Calls the REST route of `rpc` (path variables and query from the request's JSON), or `path` itself. */
export async function callRest(h: MatrixHub, target: { rpc: string } | { path: string }, creds: Creds, req: JsonObject): Promise<Answer> {
  let init: Parameters<TestHub["rest"]>[1] = { method: "GET", headers: headersOf(creds) };
  let path: string;
  if ("path" in target) path = target.path;
  else {
    const { method } = methodOf(target.rpc);
    const route = restRouteOf(target.rpc)!;
    const used = new Set<string>();
    path = route.template.replace(/\{(\w+)(?:=\*)?\}/g, (_, f: string) => {
      const json = method.input.fields.find((x) => x.name === f)!.jsonName;
      used.add(json);
      return encodeURIComponent(String(req[json]));
    });
    init = { ...init, method: route.verb };
    if (route.body) init = { ...init, json: req };
    else {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(req)) if (!used.has(k)) for (const x of [v].flat()) q.append(k, String(x));
      if ([...q].length) path += `?${q}`;
    }
  }
  const res = await h.t.rest(path, init);
  const text = await res.text();
  let payload: Json;
  try {
    payload = text ? JSON.parse(text) : undefined;
  } catch {
    payload = text;
  }
  return { answer: res.ok ? `${res.status} ok` : `${res.status} ${payload?.code ?? "(no code)"}`, text, payload };
}

const restStatusOf: Record<string, number> = {
  invalid_auth: 401,
  invalid_agent_identity: 401,
  admin_auth_not_configured: 503,
  token_scope_insufficient: 403,
  lease_not_found: 404,
  message_not_found: 404,
  target_not_found: 404,
  lease_superseded: 409,
};

// --- one case -----------------------------------------------------------------------------------

export interface Verdict {
  answer: string;
  /** Other projects' secrets found in what the caller got, and any managed token's secret or hash (its own project's too). */
  leaks: string[];
  /** Projects whose state changed though they were not the caller's. */
  changed: string[];
  problems: string[];
}

export type Face = { kind: "rpc"; make: (url: string, i: Interceptor[]) => Transport } | { kind: "rest" };

/**
 * Runs one (row × caller) over a face and returns what happened beside what the model says must
 * happen; the test compares the two.
 */
export async function runCase(
  pool: HubPool,
  face: Face,
  row: MethodRow | { path: string; rule: Rule },
  caller: CallerClass,
): Promise<{ actual: Verdict; expected: Verdict }> {
  const h = await pool.get();
  const creds = caller.creds(h.seed, h.auth);
  const ctx = ctxFor(h.seed, caller.home);
  const req = "request" in row ? row.request(ctx) : {};
  const authn = authenticate(row.rule, h.auth, h.seed, creds, req);
  const as: As | undefined = "as" in authn ? authn.as : undefined;
  let want = "refused" in authn ? authn.refused : "request" in row ? row.expect(authn.as) : "ok";
  let mid: Map<string, string[]> | undefined;
  const probe = async () => {
    mid = await fingerprint(h.t, h.seed);
    await probeAlpha(h);
  };
  const got =
    face.kind === "rpc"
      ? await callRpc(h, face.make, (row as MethodRow).rpc, creds, req, probe)
      : await callRest(h, "path" in row ? { path: row.path } : { rpc: row.rpc }, creds, req);
  if (face.kind === "rest") want = want === "ok" ? `${("restStatus" in row && row.restStatus) || 200} ok` : `${restStatusOf[want] ?? "?"} ${want}`;

  const after = mid ?? (await fingerprint(h.t, h.seed));
  const adminWrites = "adminWrites" in row && row.adminWrites === true;
  const own = !as ? [] : as.kind !== "admin" ? [as.project] : adminWrites ? [TARGET] : [];
  const seesAll = ("path" in row && row.path === "/metrics") || ("adminSeesAll" in row && row.adminSeesAll === true);
  const visible = as?.kind === "admin" ? (seesAll ? Object.keys(h.seed.projects) : [TARGET]) : as ? [as.project] : [];
  const supplied = JSON.stringify(req) + JSON.stringify(creds);
  // A project the caller may see still never sees a managed token's secret or hash (`hidden`).
  const leaks = Object.values(h.seed.projects).flatMap((p) =>
    (visible.includes(p.name) ? p.hidden : p.secrets).filter((x) => x && !supplied.includes(x) && got.text.includes(x)).map((x) => `${p.name}: ${x}`),
  );
  const problems = "check" in row && row.check && as && got.answer.endsWith("ok") && got.payload ? row.check(as, got.payload, ctx) : [];
  const actual: Verdict = { answer: got.answer, leaks, changed: changes(h.baseline, after, own), problems };
  if (leaks.length || actual.answer !== want) actual.problems.push(`hub said: ${cut(got.text, 600)}`);
  // A stream that opened ran the probe (alpha changed); a refused one changed nothing, or it shows.
  if (mid !== undefined || !sameState(h.baseline, after)) await pool.discard();
  return { actual, expected: { answer: want, leaks: [], changed: [], problems: [] } };
}
