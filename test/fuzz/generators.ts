// fast-check arbitraries for hostile REST requests: JSON with leaves JSON.stringify cannot write
// (1e309, -0, 2^64, lone-surrogate escapes, invalid UTF-8 bytes), wrong JSON types per field
// (from the descriptors), bodies that are not JSON or not objects, wrong content types, bodies
// over 256 KiB, bad percent-escapes, methods and slashes no route has. Every case is small
// (a description); materialize() in rest.fuzz.test.ts turns it into bytes, so counterexamples
// stay readable.
import fc from "fast-check";
import { ScalarType, type DescField, type DescMethod } from "@bufbuild/protobuf";
import { servedServices } from "../../src/server/routes.js";
import { buildRestRoutes, type RestRoute } from "../../src/transcode/http-rules.js";
import { credsKinds, type Creds } from "./samples.js";

// JSON with hostile leaves

/** A JSON value; objects are entry lists so "__proto__" stays an ordinary key. */
export type JVal =
  | null
  | boolean
  | number
  | string
  | JVal[]
  | { $obj: [string, JVal][] }
  /** Literal JSON text, written as is ("1e309", "-0", "18446744073709551616"). */
  | { $raw: string }
  /** A string whose UTF-8 has these raw bytes after `prefix` (invalid UTF-8). */
  | { $utf8: string; bytes: number[] }
  /** `depth` nested arrays. */
  | { $deep: number }
  /** A string of `size` "y"s. */
  | { $big: number };

export function jsonBytes(v: JVal): Buffer {
  const out: Buffer[] = [];
  const put = (s: string) => out.push(Buffer.from(s, "utf8"));
  const walk = (x: JVal): void => {
    if (Array.isArray(x)) {
      put("[");
      x.forEach((e, i) => (i && put(","), walk(e)));
      put("]");
    } else if (x !== null && typeof x === "object") {
      if ("$raw" in x) put(x.$raw);
      else if ("$utf8" in x) {
        put(JSON.stringify(x.$utf8).slice(0, -1));
        out.push(Buffer.from(x.bytes));
        put('"');
      } else if ("$deep" in x) put("[".repeat(x.$deep) + "]".repeat(x.$deep));
      else if ("$big" in x) put(`"${"y".repeat(x.$big)}"`);
      else {
        put("{");
        x.$obj.forEach(([k, e], i) => (i && put(","), put(JSON.stringify(k) + ":"), walk(e)));
        put("}");
      }
    } else put(JSON.stringify(x));
  };
  walk(v);
  return Buffer.concat(out);
}

/** A REST JSON object (from samples) as entries. */
export const entriesOf = (o: Record<string, unknown>): [string, JVal][] => Object.entries(o).map(([k, v]) => [k, toJVal(v)]);
const toJVal = (v: unknown): JVal =>
  Array.isArray(v) ? v.map(toJVal) : v !== null && typeof v === "object" ? { $obj: entriesOf(v as Record<string, unknown>) } : (v as JVal);

const raw = (text: string): JVal => ({ $raw: text });

/** Well-formed text with NUL, controls, non-BMP characters (no lone surrogates: those are poisons). */
export const anyString = (maxLength = 12) =>
  fc.string({ unit: fc.oneof(fc.constantFrom("\u0000", "\u001f", "\u2028", "\ufeff", "\u{1f600}", "\\", '"'), fc.constantFrom(..."az09 _-/.")), maxLength });

/** Hostile but well-formed JSON, for unknown keys (the hub must ignore them). */
export const nastyValue: fc.Arbitrary<JVal> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  anyString(),
  fc.constantFrom(raw("1e309"), raw("-1e309"), raw("-0"), raw("18446744073709551616"), raw("9223372036854775808"), raw("1e-400")),
  fc.integer({ min: 1, max: 20_000 }).map((depth): JVal => ({ $deep: depth })),
  fc.integer({ min: 1, max: 60_000 }).map((size): JVal => ({ $big: size })),
  fc.array(fc.oneof(fc.integer(), anyString(4)), { maxLength: 4 }),
);

export const unknownKey = fc.oneof(fc.constantFrom("__proto__", "constructor", "toString", "prototype", "", "zz\u0000", "$ref"), anyString(8));

// Values of the wrong JSON type (or out of range) for a field, by its descriptor

const notAnInteger = ["1e309", "-1e309", "9223372036854775808", "18446744073709551616", "-9223372036854775809", "1.5", "0.5", "1e-7", "5e-324", "-1.25", "1e400"];
const int32Only = ["2147483648", "-2147483649", "4294967296"];
const int64Only = ["9007199254740992", "9007199254740993", "1e20"];
const is64 = (t: ScalarType) => [ScalarType.INT64, ScalarType.UINT64, ScalarType.SINT64, ScalarType.FIXED64, ScalarType.SFIXED64].includes(t);
const object: fc.Arbitrary<JVal> = fc.constantFrom({ $obj: [] }, { $obj: [["a", 1]] });
const list: fc.Arbitrary<JVal> = fc.constantFrom([], [1], ["x"], [null]);

export function wrongValue(field: DescField): fc.Arbitrary<JVal> {
  if (field.fieldKind === "list") return fc.oneof(fc.string(), fc.integer(), object, fc.boolean());
  if (field.fieldKind === "message") return fc.oneof(fc.string(), fc.integer(), list, fc.boolean());
  if (field.fieldKind === "enum") {
    return fc.oneof(fc.constantFrom("nonsense", "", "UNSPECIFIED", `${field.enum.values[1]?.name ?? "X"}`, "0"), fc.integer({ min: 0, max: 9 }), fc.boolean(), list);
  }
  if (field.fieldKind !== "scalar") return fc.string();
  switch (field.scalar) {
    case ScalarType.STRING:
      return fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), list, object, fc.constantFrom(raw("1e309"), raw("-0")));
    case ScalarType.BOOL:
      return fc.oneof(fc.constantFrom("true", "false", "1", ""), fc.integer({ min: 0, max: 1 }), list, object);
    default: {
      const texts = [...notAnInteger, ...(is64(field.scalar) ? int64Only : int32Only)];
      const fraction = fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e6, max: 1e6 }).filter((d) => !Number.isInteger(d));
      return fc.oneof(fc.constantFrom(...texts).map(raw), fraction, fc.constantFrom("5", "", "0x10", "1e3"), fc.boolean(), list, object);
    }
  }
}

// Strings the hub must refuse inside a string field

export const loneSurrogate = fc
  .tuple(fc.constantFrom("", "fz", "a\u00e9"), fc.constantFrom("\udc00", "\ud800", "\udfff\ud800", "\ud83d", "\ude00x"), fc.constantFrom("", "z"))
  .map(([a, s, b]) => a + s + b);

export const invalidUtf8: fc.Arbitrary<number[]> = fc.constantFrom<number[]>(
  [0xff],
  [0xfe, 0xff],
  [0xc0, 0xaf], // overlong "/"
  [0xe0, 0x80, 0xaf], // overlong
  [0xed, 0xa0, 0x80], // encoded surrogate U+D800
  [0xed, 0xb0, 0x80], // encoded surrogate U+DC00
  [0xe2, 0x82], // truncated sequence
  [0xf4, 0x90, 0x80, 0x80], // above U+10FFFF
  [0x80], // lone continuation byte
);

/** Percent-escapes that do not decode to UTF-8 text. */
export const badEscape = fc
  .tuple(fc.constantFrom("", "a", "db"), fc.constantFrom("%", "%z", "%zz", "%ff", "%FE", "%80", "%C0%AF", "%ED%B0%80", "%ED%A0%80", "%E0%A4%A", "%F4%90%80%80", "%%", "%2", "%g0"), fc.constantFrom("", "x", "%20"))
  .map(([a, e, b]) => a + e + b);

// REST cases

/**
 * The unary REST routes, derived from the google.api.http rules as the hub derives them. The
 * event streams (GET /v1/watch/...) answer a request they accept with a stream that never ends,
 * which a batch of fuzz cases cannot wait out: test/transcode/events.rest.test.ts sends them
 * hostile requests one by one.
 */
const allRestRoutes = buildRestRoutes(servedServices);
export const restRoutes = allRestRoutes.filter((r) => !r.streaming);

/** Whether some route of `verb` has a template that `path` fits (the test's own matcher). */
export function routed(verb: string, path: string): boolean {
  const parts = path.split("?")[0].slice(1).split("/");
  return allRestRoutes.some((r) => {
    const segs = r.template.slice(1).split("/");
    return r.verb === verb && segs.length === parts.length && segs.every((s, i) => (s.startsWith("{") ? parts[i] !== "" : s === parts[i]));
  });
}

export type RestPoison =
  | { kind: "invalid-json"; cut: number; junk: string }
  | { kind: "not-object"; value: JVal }
  | { kind: "invalid-utf8"; field: string | null; bytes: number[] }
  /** `where`: a string field of the body, or "key" / "value" / "nested" in an unknown key. */
  | { kind: "lone-surrogate"; where: string; value: string }
  | { kind: "wrong-type"; field: string; value: JVal }
  | { kind: "content-type"; type: string | null }
  | { kind: "too-large"; size: number; where: "unknown" | "field" | "nesting" }
  | { kind: "path-escape"; variable: string; escape: string }
  | { kind: "query"; param: string; value: string }
  | { kind: "wrong-method"; method: string }
  | { kind: "bad-slash"; variant: "empty-segment" | "trailing" | "leading" | "double-leading" };

export interface RestCase {
  /** "POST /v1/leases/{name}/acquire" */
  route: string;
  poison: RestPoison;
  creds: Creds;
  /** Unknown keys added to the body (ignored by the hub). */
  extras: [string, JVal][];
  /** Pad the body with an unknown key to exactly 256 KiB. */
  pad: boolean;
  transport: "h1" | "h2";
  requestId: string | null;
  contentType: string;
}

export const routeName = (r: RestRoute) => `${r.verb} ${r.template}`;
export const pathVariables = (r: RestRoute) => [...r.template.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]);

/** Fields the JSON body may carry (path variables win over the body, so they are left out). */
export const bodyFields = (r: RestRoute): DescField[] =>
  r.body === "*" ? r.method.input.fields.filter((f) => !pathVariables(r).includes(f.name)) : [];

/** Query fields whose text can fail to decode (integers and enums). */
export const typedQueryFields = (m: DescMethod): DescField[] =>
  m.input.fields.filter((f) => f.fieldKind === "enum" || (f.fieldKind === "list" && f.listKind === "enum") || (f.fieldKind === "scalar" && ![ScalarType.STRING, ScalarType.BOOL, ScalarType.BYTES].includes(f.scalar)));

/** Query text a field cannot decode from: 32-bit bounds only for 32-bit fields (a 64-bit one takes them). */
const badQueryValue = (f: DescField) =>
  f.fieldKind === "scalar"
    ? fc.constantFrom("ten", "1.5", "", "+1", " 1", "0x10", "1e3", "%ff", "9007199254740993", ...(is64(f.scalar) ? ["9223372036854775808", "-9223372036854775809"] : ["2147483648", "-2147483649"]))
    : fc.constantFrom("nonsense", "", "INBOX", "0", "1", "%ff");

/** Methods llhttp parses (the wire fuzz sends made-up ones). */
export const parsedMethods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "PROPFIND", "SEARCH", "QUERY", "PURGE", "LOCK"] as const;

export const jsonContentTypes = ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/json;charset=UTF-8"];
export const wrongContentTypes = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "json", "application/xml", "", "application/grpc", "application/proto", "*/*", "text/json", "application/jsonx", "application/json-seq"];

function poisonsFor(r: RestRoute, routed: (method: string, path: string) => boolean): fc.Arbitrary<RestPoison>[] {
  const out: fc.Arbitrary<RestPoison>[] = [];
  const fields = bodyFields(r);
  const strings = fields.filter((f) => f.fieldKind === "scalar" && f.scalar === ScalarType.STRING);
  const vars = pathVariables(r);
  if (r.body === "*") {
    out.push(
      fc.record({ kind: fc.constant("invalid-json" as const), cut: fc.double({ min: 0, max: 0.999, noNaN: true }), junk: fc.constantFrom("", "x", ",", "\u0000", "'", "NaN", "//", "\\x", '"\\u12"', "\u001f") }),
      fc.record({ kind: fc.constant("not-object" as const), value: fc.oneof(fc.constant(null), fc.integer(), fc.string(), fc.boolean(), fc.array(nastyValue, { maxLength: 3 }), fc.constant(raw("-0")), fc.constant(raw("1e309"))) }),
      fc.record({ kind: fc.constant("invalid-utf8" as const), field: fc.constantFrom(null, ...strings.map((f) => f.jsonName)), bytes: invalidUtf8 }),
      fc.record({ kind: fc.constant("content-type" as const), type: fc.constantFrom(null, ...wrongContentTypes) }),
      fc.record({ kind: fc.constant("too-large" as const), size: fc.constantFrom(262_145, 262_200, 300_000, 1_048_576, 1_100_000), where: fc.constantFrom("unknown" as const, "field" as const, "nesting" as const) }),
    );
    const where = fc.constantFrom("key", "value", "nested", ...strings.map((f) => f.jsonName));
    out.push(fc.record({ kind: fc.constant("lone-surrogate" as const), where, value: loneSurrogate }));
    for (const f of fields) out.push(wrongValue(f).map((value) => ({ kind: "wrong-type" as const, field: f.jsonName, value })));
  }
  if (vars.length) out.push(fc.record({ kind: fc.constant("path-escape" as const), variable: fc.constantFrom(...vars), escape: badEscape }));
  if (r.body === "") for (const f of typedQueryFields(r.method)) out.push(badQueryValue(f).map((value) => ({ kind: "query" as const, param: f.jsonName, value })));
  const example = r.template.replace(/\{[a-z_]+\}/g, "x");
  const others = parsedMethods.filter((m) => !routed(m, example));
  out.push(fc.constantFrom(...others).map((method) => ({ kind: "wrong-method" as const, method })));
  out.push(fc.constantFrom("empty-segment" as const, "trailing" as const, "leading" as const, "double-leading" as const).map((variant) => ({ kind: "bad-slash" as const, variant })));
  return out;
}

export const requestIds = fc.constantFrom(null, null, "fuzz-1", "x".repeat(80), "x".repeat(81), "bad id!", "a/b", "\u00e9");

/** One hostile REST request for `r`; `routed(method, path)` says whether the hub has a route. */
export function restCase(r: RestRoute, routed: (method: string, path: string) => boolean): fc.Arbitrary<RestCase> {
  const known = new Set(r.method.input.fields.map((f) => f.jsonName));
  return fc.record({
    route: fc.constant(routeName(r)),
    poison: fc.oneof(...poisonsFor(r, routed)),
    creds: fc.constantFrom(...credsKinds),
    extras: fc.array(fc.tuple(unknownKey.filter((k) => !known.has(k)), nastyValue), { maxLength: 2 }),
    pad: fc.boolean(),
    transport: fc.constantFrom("h1" as const, "h1" as const, "h1" as const, "h2" as const),
    requestId: requestIds,
    contentType: fc.constantFrom(...jsonContentTypes),
  });
}
