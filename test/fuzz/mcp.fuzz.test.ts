// Property: hostile requests at `/mcp` (JSON-RPC garbage and batches, huge and odd ids, unknown
// methods, wrong protocol versions, missing, foreign and huge Mcp-Session-Id, a missing Accept,
// wrong content types, oversized bodies, tool calls whose arguments are poisoned one field at a
// time, initialize with hostile identity headers, protocol 2026-07-28 requests without a session
// whose `_meta` envelope and MCP-Protocol-Version / Mcp-Method / Mcp-Name headers are poisoned one
// at a time) on HTTP/1.1 and HTTP/2 get a 4xx or a JSON-RPC
// error (never a 5xx, an internal error, a hang or a crash); a tool's refusal is a result with a
// code from the error table in docs/api.md; the store is unchanged unless a call that may succeed did.
import { afterAll, beforeAll, describe } from "vitest";
import { fc, test } from "@fast-check/vitest";
import { errorTable } from "../../src/errors.js";
import { describeRequest } from "./checks.js";
import { anyString, invalidUtf8, jsonBytes, loneSurrogate, nastyValue, unknownKey, type JVal } from "./generators.js";
import { params, PROJECT_TOKEN, report, runBatch, startWorld, stopWorld, timeoutFor, type Checked, type Violation, type World } from "./harness.js";
import { send, type RawRequest, type RawResponse } from "./raw.js";

const VERSION = "2025-06-18";
const MODERN = "2026-07-28";
/** The agent 2026-07-28 requests name (bound before the batch's first snapshot, so a sound request registers nothing). */
const MODERN_AGENT = "fz-modern";
const ACCEPT = "application/json, text/event-stream";
const MAX_BODY = 262_144;

/** The session each batch acts in (opened as agent `fz-mcp` of project p before the batch's first snapshot). */
const sessions = new WeakMap<World["t"], string>();
/** The tools the hub lists: names, the fields each takes and their JSON types. */
let tools: { name: string; readOnly: boolean; fields: Record<string, string> }[] = [];

async function rpc(w: World, body: object, session?: string, extra: Record<string, string> = {}) {
  const res = await w.t.rest("/mcp", {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: ACCEPT,
      authorization: `Bearer ${PROJECT_TOKEN}`,
      "x-kxm-project": "p",
      "x-kxm-agent": "fz-mcp",
      ...(session && { "mcp-session-id": session, "mcp-protocol-version": VERSION }),
      ...extra,
    },
    body: JSON.stringify(body),
  });
  return { res, text: await res.text() };
}

/** The 2026-07-28 envelope a client sends in every request's params. */
const envelope = () => ({ "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": { name: "fuzz", version: "0" } });

/** The worlds whose 2026-07-28 agent is bound (its first request registered it). */
const modernBound = new WeakSet<World["t"]>();

/** Opens the batch's session when the world has none (a fresh world, or the last one was ended), and binds its 2026-07-28 agent. */
async function prepare(w: World): Promise<void> {
  if (!modernBound.has(w.t)) {
    const res = await w.t.rest("/mcp", {
      method: "POST",
      headers: { "content-type": "application/json", accept: ACCEPT, authorization: `Bearer ${PROJECT_TOKEN}`, "x-kxm-project": "p", "x-kxm-agent": MODERN_AGENT, "mcp-protocol-version": MODERN, "mcp-method": "tools/list" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: { _meta: envelope() } }),
    });
    const text = await res.text();
    if (res.status !== 200 || !text.includes('"tools"')) throw new Error(`2026-07-28 tools/list: ${res.status} ${text.slice(0, 300)}`);
    modernBound.add(w.t);
  }
  if (sessions.has(w.t)) return;
  const init = await rpc(w, { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: "fuzz", version: "0" } } });
  const id = init.res.headers.get("mcp-session-id");
  if (init.res.status !== 200 || !id) throw new Error(`initialize: ${init.res.status} ${init.text}`);
  await rpc(w, { jsonrpc: "2.0", method: "notifications/initialized" }, id);
  sessions.set(w.t, id);
  if (tools.length === 0) {
    const listed = await rpc(w, { jsonrpc: "2.0", id: 1, method: "tools/list" }, id);
    const data = listed.text.split("\n").find((l) => l.startsWith("data: "));
    const result = JSON.parse(data!.slice(6)).result as { tools: { name: string; annotations?: { readOnlyHint?: boolean }; inputSchema: { properties?: Record<string, { type?: string }> } }[] };
    tools = result.tools.map((t) => ({
      name: t.name,
      readOnly: t.annotations?.readOnlyHint === true,
      fields: Object.fromEntries(Object.entries(t.inputSchema.properties ?? {}).map(([k, v]) => [k, v.type ?? "string"])),
    }));
  }
}

// Cases

/** A field value that is valid for the seeded world, by name (a poison then replaces one). */
function validArgs(tool: string, w: World): [string, JVal][] {
  const byField: Record<string, JVal> = {
    name: "db",
    target: "beta",
    content: "fuzz",
    message_id: w.openMessageId,
    fencing_token: 1,
    ttl_ms: 60_000,
    include_offline: true,
    include_expired: true,
    limit: 5,
    page_size: 5,
  };
  const t = tools.find((x) => x.name === tool);
  return Object.keys(t?.fields ?? {})
    .filter((k) => k in byField)
    .map((k) => [k, byField[k]!]);
}

/** Values of the wrong type (or out of range, or not text) for a field of JSON type `type`. */
const raw = (text: string): JVal => ({ $raw: text });
function wrongFor(type: string): fc.Arbitrary<JVal> {
  const structured = fc.constantFrom<JVal>([], [1], { $obj: [] }, { $obj: [["a", 1]] });
  switch (type) {
    case "integer":
      return fc.oneof(fc.constantFrom(raw("1e309"), raw("-1"), raw("18446744073709551616"), raw("9223372036854775808"), raw("1.5"), raw("-0.5")), fc.constantFrom<JVal>("", "x", "0x10", true, null), structured);
    case "boolean":
      return fc.oneof(fc.constantFrom<JVal>("true", "", 1, 0, null), structured);
    default:
      return fc.oneof(fc.integer(), fc.boolean(), structured, loneSurrogate, fc.constantFrom<JVal>({ $big: 40_000 }, ""), anyString(), invalidUtf8.map((bytes): JVal => ({ $utf8: "fz", bytes })));
  }
}

/**
 * Waits must not wait: the hub's clock is frozen, so a valid wait_ms would never end. Only
 * values that are refused, or that mean "do not wait", are sent.
 */
const waitValue = fc.constantFrom<JVal>(0, null, -1, 60_001, 600_001, raw("1e309"), "x", true, 1.5, raw("18446744073709551616"), "-5", []);

type ArgPoison =
  | { kind: "none" }
  | { kind: "wrong"; field: string; value: JVal }
  | { kind: "unknown-key"; key: string; value: JVal }
  | { kind: "not-object"; value: JVal }
  | { kind: "identity"; key: "agent_id" | "project" | "agent_key" | "sender"; value: JVal };

/** What is wrong with a 2026-07-28 request's `_meta` envelope (at most one thing). */
type MetaPoison =
  | { kind: "sound" }
  | { kind: "missing" }
  | { kind: "not-object"; value: JVal }
  | { kind: "field"; key: string; value: JVal }
  | { kind: "dropped"; key: string };

/** What is wrong with a 2026-07-28 request's standard headers (at most one thing). */
type ModernHeaders = "sound" | "no-version" | "old-version" | "unknown-version" | "no-method" | "wrong-method" | "no-name" | "wrong-name" | "huge";

type Body =
  | { kind: "tool"; tool: string; poison: ArgPoison; id: JVal }
  | {
      kind: "modern";
      /** A tool call (its arguments poisoned as for "tool"), or another method with hostile params. */
      call: { kind: "tool"; tool: string; poison: ArgPoison } | { kind: "method"; method: string; params: JVal | undefined };
      meta: MetaPoison;
      headers: ModernHeaders;
      /** The agent its X-Kxm-Agent names; null: none (tools then answer that the header is needed). */
      agent: string | null;
      id: JVal | undefined;
    }
  | { kind: "method"; method: string; params: JVal | undefined; id: JVal | undefined }
  | { kind: "batch"; size: number; method: string }
  | { kind: "not-jsonrpc"; value: JVal }
  | { kind: "garbage"; bytes: number[] }
  | { kind: "invalid-json"; cut: number }
  | { kind: "big"; size: number }
  | { kind: "initialize"; version: string; agent: string | null; project: string | null };

/** At most one thing wrong around the body: the rest of the request is what a client sends. */
type Around =
  | { kind: "none" }
  | { kind: "verb"; verb: "DELETE" | "GET" | "PUT" | "PATCH" | "OPTIONS" }
  | { kind: "session"; session: "none" | "foreign" | "huge" | "garbled" }
  | { kind: "token"; token: "none" | "wrong" | "admin" }
  | { kind: "accept"; accept: "json" | "sse" | "none" | "wildcard" }
  | { kind: "content-type"; contentType: "text" | "none" | "json-utf8" }
  | { kind: "version"; version: "none" | "old" | "unknown" | "huge" };

interface McpCase {
  transport: "h1" | "h2";
  around: Around;
  body: Body;
}

const ids: fc.Arbitrary<JVal> = fc.oneof(
  { weight: 6, arbitrary: fc.oneof(fc.nat(), anyString(8)) },
  { weight: 1, arbitrary: fc.constantFrom<JVal>(-1, "", null, 1.5, raw("1e309"), raw("18446744073709551616"), { $big: 50_000 }, [], { $obj: [] }, true) },
);
const methodNames = fc.oneof(
  fc.constantFrom(
    "initialize", "ping", "tools/list", "tools/call", "resources/list", "resources/read", "resources/subscribe", "resources/unsubscribe",
    "resources/templates/list", "prompts/list", "prompts/get", "logging/setLevel", "completion/complete", "notifications/initialized",
    "notifications/cancelled", "notifications/progress", "sampling/createMessage", "roots/list", "server/discover", "subscriptions/listen",
    "", "__proto__", "constructor", "tools/call/", "TOOLS/LIST", "rpc.discover",
  ),
  anyString(20),
);

function toolBody(w: World): fc.Arbitrary<Body> {
  return toolCall(w).chain(({ tool, poison }) => fc.record({ kind: fc.constant("tool" as const), tool: fc.constant(tool), poison: fc.constant(poison), id: ids }));
}

/** A tool and what is wrong with its arguments (at most one thing). */
function toolCall(w: World): fc.Arbitrary<{ tool: string; poison: ArgPoison }> {
  return fc.constantFrom(...tools.map((t) => t.name)).chain((tool) => {
    const fields = Object.entries(tools.find((t) => t.name === tool)!.fields);
    const wrong =
      fields.length === 0
        ? fc.constant<ArgPoison>({ kind: "none" })
        : fc.constantFrom(...fields).chain(([field, type]) =>
            (field === "wait_ms" ? waitValue : wrongFor(type)).map((value): ArgPoison => ({ kind: "wrong", field, value })),
          );
    const poison = fc.oneof(
      fc.constant<ArgPoison>({ kind: "none" }),
      wrong,
      wrong,
      fc.record({ kind: fc.constant("unknown-key" as const), key: unknownKey, value: nastyValue }),
      fc.record({ kind: fc.constant("not-object" as const), value: fc.constantFrom<JVal>([], [1], "x", 1, null, true) }),
      fc.record({ kind: fc.constant("identity" as const), key: fc.constantFrom("agent_id" as const, "project" as const, "agent_key" as const, "sender" as const), value: fc.constantFrom<JVal>(w.a.id, "p", "other", 1) }),
    );
    return fc.record({ tool: fc.constant(tool), poison });
  });
}

const metaKeys = ["io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/clientInfo"];

/** A 2026-07-28 request (no session): a sound one most of the time, else one thing wrong in its envelope, headers or identity. */
function modernBody(w: World): fc.Arbitrary<Body> {
  const call = fc.oneof(
    { weight: 3, arbitrary: toolCall(w).map(({ tool, poison }) => ({ kind: "tool" as const, tool, poison })) },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant("method" as const),
        // subscriptions/listen only with hostile params: a sound one is a stream that stays open.
        method: fc.oneof(fc.constantFrom("server/discover", "tools/list", "resources/list", "resources/read", "resources/templates/list", "subscriptions/listen", "ping", "initialize", "prompts/list", "logging/setLevel"), methodNames),
        params: fc.option(nastyValue, { nil: undefined }),
      }),
    },
  );
  const meta = fc.oneof(
    { weight: 4, arbitrary: fc.constant<MetaPoison>({ kind: "sound" }) },
    { weight: 1, arbitrary: fc.constant<MetaPoison>({ kind: "missing" }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("not-object" as const), value: fc.constantFrom<JVal>([], "x", 1, null, true, [{ $obj: [] }]) }) },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant("field" as const),
        key: fc.oneof(fc.constantFrom(...metaKeys), fc.constantFrom("io.modelcontextprotocol/logLevel", "io.modelcontextprotocol/subscriptionId", "progressToken", "__proto__"), unknownKey),
        value: fc.oneof(fc.constantFrom<JVal>("2025-06-18", "2099-01-01", "", "2026-07-28", { $big: 50_000 }, { $deep: 200 }), nastyValue),
      }),
    },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("dropped" as const), key: fc.constantFrom(...metaKeys) }) },
  );
  const headers = fc.oneof(
    { weight: 6, arbitrary: fc.constant<ModernHeaders>("sound") },
    { weight: 2, arbitrary: fc.constantFrom<ModernHeaders>("no-version", "old-version", "unknown-version", "no-method", "wrong-method", "no-name", "wrong-name", "huge") },
  );
  return fc.record({
    kind: fc.constant("modern" as const),
    call,
    meta,
    headers,
    agent: fc.oneof({ weight: 5, arbitrary: fc.constant<string | null>(MODERN_AGENT) }, { weight: 1, arbitrary: fc.constant<string | null>(null) }),
    // Mostly a plain id (the envelope and headers are what this kind is about); sometimes an odd one, or none (a notification).
    id: fc.oneof({ weight: 8, arbitrary: fc.nat() as fc.Arbitrary<JVal | undefined> }, { weight: 1, arbitrary: ids }, { weight: 1, arbitrary: fc.constant(undefined) }),
  });
}

/** The arguments of a tool call: the valid ones, with its poison. */
function toolArgs(tool: string, p: ArgPoison, w: World): JVal {
  const entries = validArgs(tool, w);
  if (p.kind === "wrong") return { $obj: [...entries.filter(([k]) => k !== p.field), [p.field, p.value]] };
  if (p.kind === "unknown-key" || p.kind === "identity") return { $obj: [...entries, [p.key, p.value]] };
  if (p.kind === "not-object") return p.value;
  return { $obj: entries };
}

/** The `_meta` envelope with its poison, or undefined when it is missing. */
function metaOf(m: MetaPoison): JVal | undefined {
  const sound: [string, JVal][] = [
    ["io.modelcontextprotocol/protocolVersion", MODERN],
    ["io.modelcontextprotocol/clientCapabilities", { $obj: [] }],
    ["io.modelcontextprotocol/clientInfo", { $obj: [["name", "fuzz"], ["version", "0"]] }],
  ];
  switch (m.kind) {
    case "sound":
      return { $obj: sound };
    case "missing":
      return undefined;
    case "not-object":
      return m.value;
    case "field":
      return { $obj: [...sound.filter(([k]) => k !== m.key), [m.key, m.value]] };
    case "dropped":
      return { $obj: sound.filter(([k]) => k !== m.key) };
  }
}

function mcpCase(w: World): fc.Arbitrary<McpCase> {
  const body: fc.Arbitrary<Body> = fc.oneof(
    { weight: 6, arbitrary: toolBody(w) },
    { weight: 5, arbitrary: modernBody(w) },
    { weight: 3, arbitrary: fc.record({ kind: fc.constant("method" as const), method: methodNames, params: fc.option(nastyValue, { nil: undefined }), id: fc.option(ids, { nil: undefined }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("batch" as const), size: fc.constantFrom(0, 1, 2, 100, 101, 1_000), method: fc.constantFrom("tools/list", "ping", "initialize", "nope") }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("not-jsonrpc" as const), value: nastyValue }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("garbage" as const), bytes: fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 24 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("invalid-json" as const), cut: fc.integer({ min: 1, max: 40 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("big" as const), size: fc.constantFrom(MAX_BODY + 1, 1_000_000) }) },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant("initialize" as const),
        version: fc.constantFrom(VERSION, "2024-11-05", "2025-11-25", "1999-01-01", "", "2026-07-28", "x".repeat(500)),
        agent: fc.constantFrom<string | null>(null, "", " ", "fz-new", "a".repeat(300), "a\u0000b", "caf\u00e9", "../x", "fz-mcp"),
        project: fc.constantFrom<string | null>(null, "", "p", "q", "p/x", "a".repeat(300)),
      }),
    },
  );
  const around: fc.Arbitrary<Around> = fc.oneof(
    { weight: 8, arbitrary: fc.constant<Around>({ kind: "none" }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("verb" as const), verb: fc.constantFrom("DELETE" as const, "GET" as const, "PUT" as const, "PATCH" as const, "OPTIONS" as const) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("session" as const), session: fc.constantFrom("none" as const, "foreign" as const, "huge" as const, "garbled" as const) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("token" as const), token: fc.constantFrom("none" as const, "wrong" as const, "admin" as const) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("accept" as const), accept: fc.constantFrom("json" as const, "sse" as const, "none" as const, "wildcard" as const) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("content-type" as const), contentType: fc.constantFrom("text" as const, "none" as const, "json-utf8" as const) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("version" as const), version: fc.constantFrom("none" as const, "old" as const, "unknown" as const, "huge" as const) }) },
  );
  return fc.record({ transport: fc.constantFrom("h1" as const, "h1" as const, "h2" as const), around, body });
}

function bodyBytes(b: Body, w: World): Buffer {
  const obj = (entries: [string, JVal][]): JVal => ({ $obj: entries });
  switch (b.kind) {
    case "tool":
      return jsonBytes(obj([["jsonrpc", "2.0"], ["id", b.id], ["method", "tools/call"], ["params", obj([["name", b.tool], ["arguments", toolArgs(b.tool, b.poison, w)]])]]));
    case "modern": {
      const meta = metaOf(b.meta);
      const withMeta: [string, JVal][] = meta === undefined ? [] : [["_meta", meta]];
      const entries: [string, JVal][] = [["jsonrpc", "2.0"]];
      if (b.id !== undefined) entries.push(["id", b.id]);
      if (b.call.kind === "tool") {
        entries.push(["method", "tools/call"], ["params", obj([["name", b.call.tool], ["arguments", toolArgs(b.call.tool, b.call.poison, w)], ...withMeta])]);
      } else {
        entries.push(["method", b.call.method]);
        // Hostile params beside the envelope (as the value of `arg`).
        if (b.call.params !== undefined || meta !== undefined) entries.push(["params", obj([...withMeta, ...(b.call.params === undefined ? [] : [["arg", b.call.params] as [string, JVal]])])]);
      }
      return jsonBytes(obj(entries));
    }
    case "method": {
      const entries: [string, JVal][] = [["jsonrpc", "2.0"], ["method", b.method]];
      if (b.id !== undefined) entries.push(["id", b.id]);
      if (b.params !== undefined) entries.push(["params", b.params]);
      return jsonBytes(obj(entries));
    }
    case "batch":
      return jsonBytes(Array.from({ length: b.size }, (_, i) => obj([["jsonrpc", "2.0"], ["id", i + 1], ["method", b.method]])));
    case "not-jsonrpc":
      return jsonBytes(b.value);
    case "garbage":
      return Buffer.from(b.bytes);
    case "invalid-json":
      return Buffer.from(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`.slice(0, b.cut) + "\u0000");
    case "big":
      return Buffer.from(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"${"y".repeat(b.size)}"}}`);
    case "initialize":
      return jsonBytes(obj([["jsonrpc", "2.0"], ["id", 1], ["method", "initialize"], ["params", obj([["protocolVersion", b.version], ["capabilities", obj([])], ["clientInfo", obj([["name", "fz"], ["version", "0"]])]])]]));
  }
}

function materialize(c: McpCase, w: World): RawRequest {
  const a = c.around;
  const headers: [string, string][] = [];
  const own = sessions.get(w.t)!;
  const verb = a.kind === "verb" ? a.verb : "POST";
  // An open GET stream with a valid session is a legitimate server stream that never ends: a GET is sent without one.
  const session = verb === "GET" ? undefined : a.kind === "session" ? { none: undefined, foreign: "00000000-0000-4000-8000-000000000000", huge: "s".repeat(9_000), garbled: `${own}\u0001` }[a.session] : c.body.kind === "initialize" || c.body.kind === "modern" ? undefined : own;
  if (session !== undefined) headers.push(["mcp-session-id", session]);
  const token = a.kind === "token" ? { none: undefined, wrong: "Bearer nope", admin: "Bearer fuzz-admin" }[a.token] : `Bearer ${PROJECT_TOKEN}`;
  if (token) headers.push(["authorization", token]);
  const accept = a.kind === "accept" ? { json: "application/json", sse: "text/event-stream", none: undefined, wildcard: "*/*" }[a.accept] : ACCEPT;
  if (accept) headers.push(["accept", accept]);
  const version = a.kind === "version" ? { none: undefined, old: "2024-11-05", unknown: "1999-01-01", huge: "9".repeat(2_000) }[a.version] : VERSION;
  if (version && session !== undefined) headers.push(["mcp-protocol-version", version]);
  if (c.body.kind === "initialize") {
    if (c.body.agent !== null) headers.push(["x-kxm-agent", c.body.agent]);
    if (c.body.project !== null) headers.push(["x-kxm-project", c.body.project]);
  }
  if (c.body.kind === "modern") {
    const b = c.body;
    headers.push(["x-kxm-project", "p"]);
    if (b.agent !== null) headers.push(["x-kxm-agent", b.agent]);
    const method = b.call.kind === "tool" ? "tools/call" : b.call.method;
    const name = b.call.kind === "tool" ? b.call.tool : undefined;
    const h = b.headers;
    const version = ({ "old-version": VERSION, "unknown-version": "2099-01-01", huge: "9".repeat(2_000) } as Record<string, string>)[h] ?? MODERN;
    if (h !== "no-version") headers.push(["mcp-protocol-version", version]);
    if (h !== "no-method") headers.push(["mcp-method", h === "wrong-method" ? "tools/list" : h === "huge" ? method.repeat(50) : method]);
    if (name !== undefined && h !== "no-name") headers.push(["mcp-name", h === "wrong-name" ? "someone_else" : name]);
  }
  let body: Buffer | undefined;
  if (verb !== "GET" && verb !== "DELETE" && verb !== "OPTIONS") {
    body = bodyBytes(c.body, w);
    const ct = a.kind === "content-type" ? { "json-utf8": "application/json; charset=utf-8", text: "text/plain", none: undefined }[a.contentType] : "application/json";
    if (ct) headers.push(["content-type", ct]);
  }
  // HTTP/2 refuses header values with control characters before they leave this client, and
  // resets a stream whose header value has a character past U+00FF (an Mcp-Method from a hostile
  // method name), whatever the path: such headers are sent on HTTP/1.1 only.
  const h2Safe = headers.filter(([, v]) => c.transport === "h1" || !/[\u0000-\u001f\u0100-\uffff]/.test(v));
  return { method: verb, path: "/mcp", headers: h2Safe, body };
}

/** The JSON-RPC messages of an answer (a JSON body, or the `data:` lines of an SSE stream). */
function messagesOf(r: RawResponse): unknown[] | undefined {
  const text = r.body.toString("utf8");
  const ct = r.headers["content-type"] ?? "";
  try {
    if (ct.startsWith("text/event-stream")) {
      return text
        .split("\n")
        .filter((l) => l.startsWith("data: "))
        .map((l) => JSON.parse(l.slice(6)));
    }
    if (text === "") return [];
    const parsed: unknown = JSON.parse(text);
    return Array.isArray(parsed) ? parsed : [parsed];
  } catch {
    return undefined;
  }
}

const table = errorTable as Record<string, unknown>;

/** How the answers came out, printed at the end: the family must reach the tools, not only the transport's refusals. */
const outcomes = new Map<string, number>();
const tally = (k: string) => outcomes.set(k, (outcomes.get(k) ?? 0) + 1);

function check(c: McpCase, w: World, req: RawRequest, r: RawResponse): Checked {
  const problems: string[] = [];
  let accepted = false;
  if (r.outcome !== "answered") problems.push(`no answer (${r.outcome}${r.detail ? `: ${r.detail.split("\n")[0]}` : ""})`);
  else if (r.status !== -2) {
    const msgs = messagesOf(r);
    if (msgs === undefined) {
      if (r.status >= 400 || r.status === 200) problems.push(`${r.status} body is not JSON-RPC (${r.headers["content-type"] ?? "no content-type"})`);
    }
    tally(`${c.body.kind === "modern" ? "2026-07-28 " : ""}HTTP ${r.status}`);
    const capacity = r.status === 503 && JSON.stringify(msgs ?? "").includes("resource_exhausted");
    if (r.status >= 500 && !capacity) problems.push(`answered ${r.status}`);
    for (const m of msgs ?? []) {
      if (m === null || typeof m !== "object") {
        problems.push("a message that is not an object");
        continue;
      }
      const msg = m as { error?: { code?: unknown; message?: unknown }; code?: unknown; result?: { isError?: boolean; structuredContent?: { code?: unknown } } };
      // What the port refuses before any face (malformed HTTP) is the hub's HTTP error body.
      const wireRefusal = r.status >= 400 && typeof msg.error === "string" && typeof msg.code === "string" && msg.code in table;
      if (wireRefusal) continue;
      if (msg.error) {
        if (typeof msg.error.code !== "number" || typeof msg.error.message !== "string") problems.push("a JSON-RPC error without code and message");
        else if (msg.error.code === -32603) problems.push(`JSON-RPC internal error: ${String(msg.error.message).slice(0, 100)}`);
      } else if (msg.result?.isError) {
        const code = msg.result.structuredContent?.code;
        tally(`tool refusal ${String(code)}`);
        if (typeof code !== "string" || !(code in table)) problems.push(`tool refusal with undocumented code ${JSON.stringify(code)}`);
        else if (code === "internal" || code === "unknown") problems.push(`tool refusal ${code}`);
      } else if (msg.result && (c.body.kind === "tool" || (c.body.kind === "modern" && c.body.call.kind === "tool"))) {
        tally(c.body.kind === "modern" ? "tool result (2026-07-28)" : "tool result");
        const name = c.body.kind === "tool" ? c.body.tool : (c.body.call as { tool: string }).tool;
        const tool = tools.find((t) => t.name === name);
        if (!tool?.readOnly) accepted = true;
      } else if (msg.result && c.body.kind === "modern") tally("result (2026-07-28)");
    }
    // What may change the store when it succeeds: a session opened (an agent registered or taken
    // over), a session ended (its agent released and unregistered), a write tool's result.
    if (r.status === 200 && (c.body.kind === "initialize" || c.body.kind === "batch")) accepted = true;
    // A 2026-07-28 request with another token than the one its agent was bound with registers
    // (takes over) the agent again; the next one with the bound token then registers it back.
    if (r.status < 300 && c.body.kind === "modern" && c.around.kind === "token") accepted = true;
    if (req.method === "DELETE" && r.status < 300) {
      accepted = true;
      sessions.delete(w.t);
    }
  }
  const label =
    c.body.kind === "tool"
      ? `tool ${c.body.tool} ${c.body.poison.kind}`
      : c.body.kind === "method"
        ? `method`
        : c.body.kind === "modern"
          ? `2026-07-28 ${c.body.call.kind === "tool" ? `tool ${c.body.call.tool} ${c.body.call.poison.kind}` : "method"}; meta ${c.body.meta.kind}; headers ${c.body.headers}${c.body.agent === null ? "; no agent" : ""}`
          : c.body.kind;
  const violations: Violation[] = problems.map((p) => ({
    signature: `MCP [${label}; ${c.around.kind === "none" ? "sound request" : JSON.stringify(c.around)}] → ${p}`,
    detail: `${describeRequest(c.transport, req)} => ${r.status} ${r.body.subarray(0, 300).toString("utf8")}`,
  }));
  return { violations, accepted };
}

let w: World;
beforeAll(async () => {
  w = await startWorld();
  await prepare(w);
}, 60_000);
afterAll(async () => {
  report("mcp");
  console.log(`fuzz (mcp) answers: ${[...outcomes].sort(([a], [b]) => a.localeCompare(b)).map(([k, n]) => `${k}: ${n}`).join(", ")}`);
  await stopWorld(w);
});

describe("hostile requests at /mcp on both HTTP versions", () => {
  test.prop([fc.constant(null).chain(() => fc.array(mcpCase(w), { minLength: 1, maxLength: 6 }))], params(300))(
    "get a 4xx or a JSON-RPC error (never a 5xx, an internal error, a hang or a crash), tool refusals carry a table code, and refusals change nothing",
    async (cases) => {
      await runBatch(
        w,
        cases,
        async (c) => {
          const req = materialize(c, w);
          return check(c, w, req, await send(c.transport, w.port, req));
        },
        () => prepare(w),
      );
    },
    timeoutFor(300),
  );
});
