// REST JSON codec: the plain-JSON dialect of the older hub, driven by the protobuf descriptors.
//
// It differs from ProtoJSON on purpose: keys are always `field.jsonName` (json_name honoured),
// 64-bit integers are JSON numbers (limited to ±2^53-1 so they survive a JS client), enums use
// their `kxm.hub.v1.rest_name` option ("followUp") and fall back to the proto name, and every
// implicit-presence field is written even at its default. Decoding is strict about JSON types
// and never coerces ("5" is not an integer) nor trims strings (trimming is a domain rule).
import { create, getOption, hasOption, ScalarType } from "@bufbuild/protobuf";
import type { DescEnum, DescField, DescMessage, DescOneof, JsonObject, JsonValue, MessageShape } from "@bufbuild/protobuf";
import { reflect, reflectList, reflectMap, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { base64Decode, base64Encode } from "@bufbuild/protobuf/wire";
import { FeatureSet_FieldPresence, TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { closed, rest_name } from "../../gen/ts/kxm/hub/v1/options_pb.js";
import { FieldBehavior, field_behavior } from "../../gen/ts/google/api/field_behavior_pb.js";
import { isoOfMs } from "../clock.js";
import { markAbsentList, markUnknownProperty } from "../wire/unknown-properties.js";

/** A client error in one field; `field` is the dotted JSON path ("events.3.payload.lease"). */
export class RestFieldError extends Error {
  constructor(readonly field: string, message: string) {
    super(message);
    this.name = "RestFieldError";
  }
}

const TIMESTAMP = "google.protobuf.Timestamp";
const join = (prefix: string, key: string | number): string => (prefix === "" ? String(key) : `${prefix}.${key}`);

const isJsonObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);

// Decoding

/** A UTF-16 surrogate without its pair: JSON can carry one (`"\udc00"`), UTF-8 cannot. */
const loneSurrogate = /\p{Cs}/u;

/**
 * Refuses a lone surrogate in any string or key of a parsed JSON body, naming where it is: no
 * protobuf string (nor SQLite text) can hold one, so it is the client's error, not ours. The
 * walk keeps its own stack: a body nested thousands of levels deep is a value like any other.
 */
export function assertWellFormedJson(root: unknown): void {
  const pending: [unknown, string][] = [[root, ""]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [value, path] = next;
    if (typeof value === "string") {
      if (loneSurrogate.test(value)) throw new RestFieldError(path, `${path || "body"} is not valid Unicode (lone surrogate)`);
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) pending.push([value[i], `${path}[${i}]`]);
    } else if (isJsonObject(value)) {
      for (const [k, v] of Object.entries(value).reverse()) {
        if (loneSurrogate.test(k)) throw new RestFieldError(path, `a key of ${path || "body"} is not valid Unicode (lone surrogate)`);
        pending.push([v, join(path, k)]);
      }
    }
  }
}

/**
 * Strictly decodes a REST JSON object into `into` (or a new message). Keys present in `json`
 * replace what `into` held; `null` and absent keys leave the field as it was; unknown keys are
 * ignored.
 */
export function fromRestJson<Desc extends DescMessage>(schema: Desc, json: JsonObject, into?: MessageShape<Desc>): MessageShape<Desc> {
  assertNotWkt(schema, "");
  if (!isJsonObject(json)) throw new RestFieldError("", "request body must be an object");
  const message = into ?? create(schema);
  decodeObject(reflect(schema, message), json, "");
  return message;
}

/** Whether a field is required (google.api.field_behavior REQUIRED), read once per field. */
const requiredCache = new WeakMap<DescField, boolean>();
function isRequiredField(f: DescField): boolean {
  let v = requiredCache.get(f);
  if (v === undefined) requiredCache.set(f, (v = getOption(f, field_behavior).includes(FieldBehavior.REQUIRED)));
  return v;
}

/** Whether a message type is closed (the option, read once per type: reading options is not cheap). */
const closedCache = new WeakMap<DescMessage, boolean>();
function isClosedMessage(desc: DescMessage): boolean {
  let v = closedCache.get(desc);
  if (v === undefined) closedCache.set(desc, (v = getOption(desc, closed)));
  return v;
}

function decodeObject(r: ReflectMessage, json: JsonObject, prefix: string): void {
  const oneofs = new OneofGuard();
  const isClosed = isClosedMessage(r.desc);
  if (isClosed) {
    // A closed message keeps what it cannot hold as marks, for validation to refuse.
    const known = new Set(r.fields.map((f) => f.jsonName));
    for (const key of Object.keys(json)) if (!known.has(key)) markUnknownProperty(r.message, key);
  }
  for (const field of r.fields) {
    // Own keys only: "constructor" or "__proto__" must never resolve through the prototype.
    if (!Object.hasOwn(json, field.jsonName)) {
      // A list a closed message requires cannot be told absent once decoded (an empty list is
      // what absent means in protobuf): keep its absence for validation to refuse. Any other
      // list or map of a closed message is marked absent, to be told from one sent empty (D21).
      if (isClosed && field.fieldKind === "list" && isRequiredField(field)) markUnknownProperty(r.message, field.jsonName);
      else if (isClosed && (field.fieldKind === "list" || field.fieldKind === "map")) markAbsentList(r.message, field.jsonName);
      continue;
    }
    const value = json[field.jsonName];
    if (value === null) {
      // No property of a closed message's schema admits null: keep it for validation to refuse.
      if (isClosed) markUnknownProperty(r.message, field.jsonName);
      continue;
    }
    const path = join(prefix, field.jsonName);
    if (!isClosed) {
      decodeField(r, field, value, path, oneofs);
      continue;
    }
    try {
      decodeField(r, field, value, path, oneofs);
    } catch (e) {
      if (!(e instanceof RestFieldError)) throw e;
      r.clear(field);
      markUnknownProperty(r.message, field.jsonName);
    }
  }
}

function decodeField(r: ReflectMessage, field: DescField, value: JsonValue, path: string, oneofs: OneofGuard): void {
  {
    oneofs.claim(field, path);
    switch (field.fieldKind) {
      case "list": {
        if (!Array.isArray(value)) throw new RestFieldError(path, `${path} must be a list`);
        const list = reflectList(field);
        value.forEach((item, i) => list.add(decodeElement(field, item, join(path, i))));
        r.set(field, list);
        break;
      }
      case "map": {
        if (!isJsonObject(value)) throw new RestFieldError(path, `${path} must be an object`);
        if (field.mapKey !== ScalarType.STRING) throw new Error(`REST JSON: only string map keys are supported (${field})`);
        const map = reflectMap(field);
        for (const [key, item] of Object.entries(value)) {
          // A "__proto__" key would rewrite the prototype of protobuf-es' plain-object map.
          if (key === "__proto__") throw new RestFieldError(path, `${path} may not have the key __proto__`);
          map.set(key, decodeValue(field, item, join(path, key)));
        }
        r.set(field, map);
        break;
      }
      default:
        r.set(field, decodeValue(field, value, path));
    }
  }
}

/** Rejects a second member of a oneof in one object (the first one set would be lost). */
class OneofGuard {
  private readonly seen = new Map<DescOneof, string>();
  claim(field: DescField, path: string): void {
    if (!field.oneof) return;
    const prev = this.seen.get(field.oneof);
    if (prev !== undefined) throw new RestFieldError(path, `${prev} and ${path} cannot both be set`);
    this.seen.set(field.oneof, path);
  }
}

/** A list element; one of a closed message type that is not an object becomes an empty, marked message. */
function decodeElement(field: DescField, value: JsonValue, path: string): unknown {
  if (field.message && isClosedMessage(field.message) && !isJsonObject(value)) {
    const r = reflect(field.message);
    markUnknownProperty(r.message, "");
    return r;
  }
  return decodeValue(field, value, path);
}

/** Decodes one singular value, list element or map value; `field` tells the element type. */
function decodeValue(field: DescField, value: JsonValue, path: string): unknown {
  if (field.message) return decodeMessage(field.message, value, path);
  if (field.enum) return decodeEnum(field.enum, value, path);
  return decodeScalar(field.scalar!, value, path);
}

function decodeMessage(desc: DescMessage, value: JsonValue, path: string): ReflectMessage {
  if (desc.typeName === TIMESTAMP) return reflect(TimestampSchema, parseTimestamp(value, path));
  assertNotWkt(desc, path);
  if (!isJsonObject(value)) throw new RestFieldError(path, `${path} must be an object`);
  const r = reflect(desc);
  decodeObject(r, value, path);
  return r;
}

function decodeScalar(type: ScalarType, value: JsonValue, path: string): unknown {
  switch (type) {
    case ScalarType.STRING:
      if (typeof value !== "string") throw new RestFieldError(path, `${path} must be a string`);
      return value;
    case ScalarType.BOOL:
      if (typeof value !== "boolean") throw new RestFieldError(path, `${path} must be a boolean`);
      return value;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      if (typeof value !== "number" || !Number.isFinite(value)) throw new RestFieldError(path, `${path} must be a number`);
      if (type === ScalarType.FLOAT && Math.abs(value) > 3.4028234663852886e38) throw new RestFieldError(path, `${path} is out of range`);
      return value;
    case ScalarType.BYTES:
      if (typeof value !== "string") throw new RestFieldError(path, `${path} must be a string`);
      return base64Decode(value);
    default:
      if (typeof value !== "number") throw new RestFieldError(path, `${path} must be an integer`);
      return checkInteger(type, value, path);
  }
}

// Inclusive ranges. 64-bit kinds stop at ±2^53-1: beyond that a JSON number is not exact.
const I32 = [-(2 ** 31), 2 ** 31 - 1] as const;
const U32 = [0, 2 ** 32 - 1] as const;
const I64 = [-Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER] as const;
const U64 = [0, Number.MAX_SAFE_INTEGER] as const;
const INT_RANGE: Partial<Record<ScalarType, readonly [number, number]>> = {
  [ScalarType.INT32]: I32, [ScalarType.SINT32]: I32, [ScalarType.SFIXED32]: I32,
  [ScalarType.UINT32]: U32, [ScalarType.FIXED32]: U32,
  [ScalarType.INT64]: I64, [ScalarType.SINT64]: I64, [ScalarType.SFIXED64]: I64,
  [ScalarType.UINT64]: U64, [ScalarType.FIXED64]: U64,
};
const IS_64 = new Set([ScalarType.INT64, ScalarType.SINT64, ScalarType.SFIXED64, ScalarType.UINT64, ScalarType.FIXED64]);

/** Range-checks an integer; 64-bit kinds come back as bigint (protobuf-es' default long type). */
function checkInteger(type: ScalarType, n: number, path: string): number | bigint {
  if (!Number.isInteger(n)) throw new RestFieldError(path, `${path} must be an integer`);
  const range = INT_RANGE[type];
  if (!range) throw new Error(`REST JSON: not an integer type: ${ScalarType[type]}`);
  if (n < range[0] || n > range[1]) throw new RestFieldError(path, `${path} is out of range`);
  return IS_64.has(type) ? BigInt(n) : n + 0; // + 0 turns -0 into 0
}

// Enums: rest_name when the value has one, else the proto name. Value 0 is never named on input.

interface EnumNames {
  readonly byName: ReadonlyMap<string, number>;
  /** Every value's name, 0 included (an option read per value written was a cost per answer). */
  readonly byNumber: ReadonlyMap<number, string>;
  readonly accepted: string;
}
const enumCache = new WeakMap<DescEnum, EnumNames>();

function enumNames(desc: DescEnum): EnumNames {
  let names = enumCache.get(desc);
  if (!names) {
    const byNumber = new Map<number, string>();
    for (const v of desc.values) byNumber.set(v.number, hasOption(v, rest_name) ? getOption(v, rest_name) : v.name);
    const byName = new Map<string, number>();
    for (const [n, name] of byNumber) if (n !== 0) byName.set(name, n);
    names = { byName, byNumber, accepted: [...byName.keys()].join(", ") };
    enumCache.set(desc, names);
  }
  return names;
}

function decodeEnum(desc: DescEnum, value: JsonValue, path: string): number {
  const names = enumNames(desc);
  const n = typeof value === "string" ? names.byName.get(value) : undefined;
  if (n === undefined) throw new RestFieldError(path, `${path} must be one of ${names.accepted}`);
  return n;
}

// Timestamps: strict RFC 3339 in, millisecond ISO 8601 UTC out.

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;
const MIN_SECONDS = -62135596800; // 0001-01-01T00:00:00Z, the Timestamp lower bound
const MAX_SECONDS = 253402300799; // 9999-12-31T23:59:59Z, the Timestamp upper bound

function parseTimestamp(value: JsonValue, path: string): Timestamp {
  const bad = () => new RestFieldError(path, `${path} must be an RFC 3339 timestamp`);
  const m = typeof value === "string" ? RFC3339.exec(value) : null;
  if (!m) throw bad();
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number);
  const [frac, sign, oh, om] = [m[7] ?? "", m[8], Number(m[9] ?? 0), Number(m[10] ?? 0)];
  if (h > 23 || mi > 59 || s > 59 || oh > 23 || om > 59) throw bad();
  // setUTCFullYear avoids Date.UTC's 19xx mapping of years < 100; the read-back rejects Feb 30.
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  date.setUTCHours(h, mi, s, 0);
  if (date.getUTCFullYear() !== y || date.getUTCMonth() !== mo - 1 || date.getUTCDate() !== d) throw bad();
  const offsetMs = (sign === "-" ? -1 : 1) * (oh * 60 + om) * 60_000;
  const seconds = (date.getTime() - offsetMs) / 1000;
  if (seconds < MIN_SECONDS || seconds > MAX_SECONDS) throw new RestFieldError(path, `${path} is out of range`);
  return create(TimestampSchema, { seconds: BigInt(seconds), nanos: Number(frac.padEnd(9, "0")) });
}

function formatTimestamp(ts: Timestamp): string {
  // Truncate to the millisecond so a time never rounds up into the next second.
  return isoOfMs(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1_000_000));
}

/** Only Timestamp among the well-known types has a REST spelling; anything else is a schema bug. */
function assertNotWkt(desc: DescMessage, path: string): void {
  if (desc.file.name.startsWith("google/protobuf/")) {
    throw new Error(`REST JSON: unsupported well-known type ${desc.typeName} at ${path || "<root>"}`);
  }
}

// Encoding

/**
 * Encodes a message in the REST dialect. Written: every implicit-presence field (defaults
 * included), every list (`[]`) and map (`{}`), and explicit-presence fields (proto3 optional,
 * messages, oneof members) only when set. Enum fields at 0 (UNSPECIFIED) are left out.
 */
export function toRestJson<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): JsonObject {
  assertNotWkt(schema, "");
  return encodeObject(reflect(schema, message));
}

function hasExplicitPresence(field: DescField): boolean {
  if (field.fieldKind === "list" || field.fieldKind === "map") return false;
  return field.fieldKind === "message" || field.oneof !== undefined || field.presence !== FeatureSet_FieldPresence.IMPLICIT;
}

function encodeObject(r: ReflectMessage): JsonObject {
  const out: JsonObject = {};
  for (const field of r.fields) {
    if (hasExplicitPresence(field) && !r.isSet(field)) continue;
    switch (field.fieldKind) {
      case "list": {
        // Most lists in an answer are empty (a lease's waiters): no iteration for them.
        const list = r.get(field);
        out[field.jsonName] = list.size === 0 ? [] : Array.from(list, (item) => encodeValue(field, item));
        break;
      }
      case "map": {
        const obj: JsonObject = {};
        for (const [key, item] of r.get(field)) obj[String(key)] = encodeValue(field, item);
        out[field.jsonName] = obj;
        break;
      }
      case "enum":
        if (r.get(field) === 0) break;
        out[field.jsonName] = encodeValue(field, r.get(field));
        break;
      default:
        out[field.jsonName] = encodeValue(field, r.get(field));
    }
  }
  return out;
}

/** Encodes one singular value, list element or map value (as returned by the reflect API). */
function encodeValue(field: DescField, value: unknown): JsonValue {
  if (field.message) {
    const r = value as ReflectMessage;
    if (r.desc.typeName === TIMESTAMP) return formatTimestamp(r.message as Timestamp);
    assertNotWkt(r.desc, field.jsonName);
    return encodeObject(r);
  }
  if (field.enum) {
    const name = enumNames(field.enum).byNumber.get(value as number);
    // An open enum may hold a number the schema does not know: a server bug, not client input.
    if (name === undefined) throw new Error(`REST JSON: ${field} holds unknown enum value ${String(value)}`);
    return name;
  }
  if (typeof value === "bigint") return Number(value);
  if (value instanceof Uint8Array) return base64Encode(value);
  return value as JsonValue;
}

// Query parameters (GET / DELETE)

const QUERY_INTEGER = /^-?\d+$/;
const QUERY_NUMBER = /^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * Sets top-level scalar, enum and repeated scalar/enum fields from query parameters named by
 * jsonName. A singular field takes the first occurrence; a repeated one takes all of them.
 * Message and map fields cannot be spelled in a query and are ignored.
 */
export function fromRestQuery<Desc extends DescMessage>(schema: Desc, params: URLSearchParams, into: MessageShape<Desc>): MessageShape<Desc> {
  const r = reflect(schema, into);
  const oneofs = new OneofGuard();
  for (const field of r.fields) {
    const path = field.jsonName;
    const values = params.getAll(path);
    if (values.length === 0 || field.fieldKind === "message" || field.fieldKind === "map") continue;
    if (field.fieldKind === "list") {
      if (field.listKind === "message") continue;
      const list = reflectList(field);
      for (const v of values) list.add(decodeQueryValue(field, v, path));
      r.set(field, list);
      continue;
    }
    oneofs.claim(field, path);
    r.set(field, decodeQueryValue(field, values[0], path));
  }
  return into;
}

function decodeQueryValue(field: DescField, value: string, path: string): unknown {
  if (field.enum) return decodeEnum(field.enum, value, path);
  const type = field.scalar!;
  switch (type) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return decodeScalar(type, value, path);
    case ScalarType.BOOL:
      // The old hub's rule: exactly "true" is true, anything else (including "1") is false.
      return value === "true";
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      if (!QUERY_NUMBER.test(value)) throw new RestFieldError(path, `${path} must be a number`);
      return decodeScalar(type, Number(value), path);
    default:
      if (!QUERY_INTEGER.test(value)) throw new RestFieldError(path, `${path} must be an integer`);
      return checkInteger(type, Number(value), path);
  }
}
