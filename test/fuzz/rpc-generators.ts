// fast-check arbitraries for hostile RPC calls: protobuf that does not decode (truncated fields,
// bad varints, illegal wire types, invalid UTF-8 in string fields, deep or unclosed groups),
// hostile Connect JSON, and framing that lies (envelope lengths, a compressed flag without an
// encoding, unknown encodings, truncated gzip, a gzip bomb, messages over 256 KiB). Cases are
// descriptions; materializeRpc() builds the bytes against the seeded world.
import zlib from "node:zlib";
import fc from "fast-check";
import { fromBinary, fromJsonString, ScalarType, toJsonString, type DescMethod } from "@bufbuild/protobuf";
import { ServerReflection } from "../../gen/ts/grpc/reflection/v1/reflection_pb.js";
import { servedServices } from "../../src/server/routes.js";
import { fromRestJson } from "../../src/transcode/rest-json.js";
import { jsonOptionsOf } from "../../src/wire/serialization.js";
import type { Expectation } from "./checks.js";
import { jsonBytes, loneSurrogate, invalidUtf8, wrongValue, entriesOf, type JVal } from "./generators.js";
import type { World } from "./harness.js";
import { rpcProtocols, rpcRequest, isStreaming, type Framing, type RpcProtocol } from "./rpc-wire.js";
import { credHeaders, credsKinds, sampleBinary, sampleJson, type Creds } from "./samples.js";
import type { RawRequest } from "./raw.js";

export const rpcMethods: DescMethod[] = [...servedServices, ServerReflection].flatMap((s) => s.methods);
const methodByPath = new Map(rpcMethods.map((m) => [`${m.parent.typeName}/${m.name}`, m]));
const protocolByName = new Map(rpcProtocols.map((p) => [p.name, p]));

export type RpcPoison =
  // protobuf payloads (appended to a valid sample at `keep` of its length)
  | { kind: "truncated-field"; keep: number; field: number; claimed: number; present: number }
  | { kind: "bad-varint"; keep: number; field: number; form: "overlong" | "unterminated" }
  | { kind: "illegal-tag"; keep: number; tag: number[] }
  | { kind: "invalid-utf8"; field: number; bytes: number[] }
  | { kind: "groups"; depth: number; end: "none" | "mismatched" | "matched" }
  | { kind: "garbage"; bytes: number[] }
  // Connect JSON payloads
  | { kind: "json-invalid"; cut: number; junk: string }
  | { kind: "json-not-object"; value: JVal }
  | { kind: "json-wrong-type"; field: string; value: JVal }
  | { kind: "json-lone-surrogate"; field: string; value: string }
  | { kind: "json-invalid-utf8"; field: string; bytes: number[] }
  // framing and compression
  | { kind: "envelope-short"; missing: number }
  | { kind: "envelope-long"; over: number }
  | { kind: "trailing-bytes"; bytes: number[] }
  | { kind: "second-message" }
  | { kind: "no-envelope" }
  | { kind: "compressed-flag-without-encoding" }
  | { kind: "unknown-encoding"; encoding: string; flag: boolean }
  | { kind: "truncated-gzip"; keep: number }
  | { kind: "gzip-of-garbage" }
  | { kind: "gzip-bomb"; size: number }
  | { kind: "too-large"; size: number };

export interface RpcCase {
  method: string;
  protocol: string;
  poison: RpcPoison;
  creds: Creds;
}

const keep = fc.double({ min: 0, max: 1, noNaN: true });
const field = fc.integer({ min: 1, max: 20 });

function poisonsFor(m: DescMethod, p: RpcProtocol): fc.Arbitrary<RpcPoison>[] {
  const enveloped = p.kind !== "connect" || isStreaming(m);
  const out: fc.Arbitrary<RpcPoison>[] = [];
  const strings = m.input.fields.filter((f) => f.fieldKind === "scalar" && f.scalar === ScalarType.STRING);
  if (p.codec === "proto") {
    out.push(
      fc.record({ kind: fc.constant("truncated-field" as const), keep, field, claimed: fc.integer({ min: 1, max: 1 << 20 }), present: fc.nat(64) }).map((x) => ({ ...x, present: Math.min(x.present, x.claimed - 1) })),
      fc.record({ kind: fc.constant("bad-varint" as const), keep, field, form: fc.constantFrom("overlong" as const, "unterminated" as const) }),
      fc.record({ kind: fc.constant("illegal-tag" as const), keep, tag: fc.oneof(fc.tuple(field, fc.constantFrom(4, 6, 7)).map(([f, wt]) => varint((f << 3) | wt)), fc.constantFrom<number[]>([0x00], [0x02, 0x00], [0x80, 0x00])) }),
      fc.record({ kind: fc.constant("groups" as const), depth: fc.oneof(fc.integer({ min: 1, max: 120 }), fc.integer({ min: 100, max: 60_000 })), end: fc.constantFrom("none" as const, "mismatched" as const, "matched" as const) }),
      fc.record({ kind: fc.constant("garbage" as const), bytes: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 48 }) }),
    );
    if (strings.length) out.push(fc.record({ kind: fc.constant("invalid-utf8" as const), field: fc.constantFrom(...strings.map((f) => f.number)), bytes: invalidUtf8 }));
  } else {
    out.push(
      fc.record({ kind: fc.constant("json-invalid" as const), cut: fc.double({ min: 0, max: 0.999, noNaN: true }), junk: fc.constantFrom("", "x", ",", "'", "NaN", "\u0000") }),
      fc.record({ kind: fc.constant("json-not-object" as const), value: fc.oneof(fc.constant(null), fc.integer(), fc.string(), fc.boolean(), fc.constant([] as JVal)) }),
    );
    for (const f of m.input.fields) out.push(wrongValue(f).map((value) => ({ kind: "json-wrong-type" as const, field: f.jsonName, value })));
    if (strings.length) {
      out.push(fc.record({ kind: fc.constant("json-lone-surrogate" as const), field: fc.constantFrom(...strings.map((f) => f.jsonName)), value: loneSurrogate }));
      out.push(fc.record({ kind: fc.constant("json-invalid-utf8" as const), field: fc.constantFrom(...strings.map((f) => f.jsonName)), bytes: invalidUtf8 }));
    }
  }
  if (enveloped) {
    out.push(
      fc.record({ kind: fc.constant("envelope-short" as const), missing: fc.oneof(fc.integer({ min: 1, max: 1000 }), fc.constant(2 ** 31)) }),
      fc.constant({ kind: "compressed-flag-without-encoding" as const }),
    );
  }
  // A bidi call may send no message or several, and answers each before reading the next.
  if (enveloped && m.methodKind !== "bidi_streaming") {
    out.push(
      fc.record({ kind: fc.constant("envelope-long" as const), over: fc.integer({ min: 1, max: 8 }) }),
      fc.record({ kind: fc.constant("trailing-bytes" as const), bytes: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 9 }) }),
      fc.constant({ kind: "second-message" as const }),
      fc.constant({ kind: "no-envelope" as const }),
    );
  }
  out.push(
    fc.record({ kind: fc.constant("unknown-encoding" as const), encoding: fc.constantFrom("snappy", "zstd", "deflate", "GZIP", "gzip, br", "x-made-up", "*"), flag: fc.boolean() }),
    fc.record({ kind: fc.constant("truncated-gzip" as const), keep: fc.double({ min: 0, max: 0.98, noNaN: true }) }),
    fc.constant({ kind: "gzip-of-garbage" as const }),
    fc.record({ kind: fc.constant("gzip-bomb" as const), size: fc.constantFrom(300_000, 2_000_000) }),
    fc.record({ kind: fc.constant("too-large" as const), size: fc.constantFrom(262_145, 300_000, 1_100_000) }),
  );
  return out;
}

/** Every (method, wire) pair: "<service>/<method>" and the protocol's name. */
export const rpcPairs = [...methodByPath.keys()].flatMap((method) => rpcProtocols.map((p) => ({ method, protocol: p.name })));

/** A hostile call of one method on one wire. */
export const rpcCaseFor = ({ method, protocol }: { method: string; protocol: string }): fc.Arbitrary<RpcCase> =>
  fc.record({
    method: fc.constant(method),
    protocol: fc.constant(protocol),
    poison: fc.oneof(...poisonsFor(methodByPath.get(method)!, protocolByName.get(protocol)!)),
    creds: fc.constantFrom(...credsKinds),
  });

export const rpcCase: fc.Arbitrary<RpcCase> = fc.constantFrom(...rpcPairs).chain(rpcCaseFor);

// Bytes

function varint(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}
const tag = (fieldNo: number, wireType: number) => varint(fieldNo * 8 + wireType);
const cat = (...parts: (Uint8Array | number[])[]) => Buffer.concat(parts.map((p) => Buffer.from(p)));
const cutAt = (b: Uint8Array, ratio: number) => b.subarray(0, Math.floor(ratio * b.length));

/** A valid message with an unknown field of `size` bytes (field 900). */
const padded = (sample: Uint8Array, size: number) => cat(sample, tag(900, 2), varint(size), new Uint8Array(size));
/** A JSON object text with an unknown key holding `size` bytes. */
const paddedJson = (sample: Uint8Array, size: number) =>
  Buffer.from(`${Buffer.from(sample).subarray(0, -1).toString("utf8")}${sample.length > 2 ? "," : ""}"zz":"${"y".repeat(size)}"}`);

export interface Materialized {
  req: RawRequest;
  expect: Expectation;
  protocol: RpcProtocol;
  method: DescMethod;
}

/** The request `bytes` decode to, or undefined where they do not decode. */
const decoded = (m: DescMethod, bytes: Uint8Array): object | undefined => {
  try {
    return fromBinary(m.input, bytes);
  } catch {
    return undefined;
  }
};
/** The same for Connect JSON. */
const decodedJson = (m: DescMethod, bytes: Uint8Array): object | undefined => {
  try {
    // As the hub reads it: unknown properties dropped, but refused for the requests it reads strictly.
    return fromJsonString(m.input, new TextDecoder("utf-8", { fatal: true }).decode(bytes), jsonOptionsOf(m, { ignoreUnknownFields: true }));
  } catch {
    return undefined;
  }
};

/**
 * A poison that still decodes is a call like any other, and where its method can wait (`wait_ms`:
 * AcquireLease, ReadInbox) it may ask to: protobuf-es reads a scalar field whatever its wire type,
 * so a cut length-delimited field 3 reads as `wait_ms = <its length>`, and Connect JSON's
 * `"waitMs": "5"` is a number. On the world's frozen clock such a wait never ends, and the case
 * would time out on a call doing what it was asked. Its payload then asks for no wait: binary
 * with `wait_ms = 0` after it (a field's last value wins), JSON with `"waitMs": 0` instead.
 */
function answeredAtOnce(m: DescMethod, payload: Uint8Array, request: object, json = false): Uint8Array {
  const wait = m.input.fields.find((f) => f.localName === "waitMs");
  if (!wait || !(request as { waitMs?: number }).waitMs) return payload;
  if (!json) return cat(payload, tag(wait.number, 0), varint(0));
  const entries = entriesOf(JSON.parse(Buffer.from(payload).toString("utf8")) as Record<string, unknown>).filter(([k]) => k !== wait.jsonName);
  return jsonBytes({ $obj: [...entries, [wait.jsonName, 0]] });
}

const malformed: Expectation = { mustRefuse: true, codes: ["invalid_argument"], reasons: ["PROTOCOL_ERROR", "INVALID_JSON"] };
/** Bytes after the message may read as the header of a second, oversized envelope. */
const framingAfterMessage: Expectation = { mustRefuse: true, codes: ["invalid_argument", "resource_exhausted"], reasons: ["PROTOCOL_ERROR", "PAYLOAD_TOO_LARGE"] };
const tooLarge: Expectation = { mustRefuse: true, codes: ["resource_exhausted"], reasons: ["PAYLOAD_TOO_LARGE"] };

/** The request bytes of a case and what the hub must answer. */
export function materializeRpc(c: RpcCase, w: World): Materialized {
  const m = methodByPath.get(c.method)!;
  const p = protocolByName.get(c.protocol)!;
  const x = c.poison;
  const sample = p.codec === "proto" ? sampleBinary(m, w) : Buffer.from(jsonSample(m, w));
  let payload: Uint8Array = sample;
  const framing: Framing = {};
  // A payload poison is judged by protobuf-es' own strict decoder: the reference for "does not decode".
  let expect: Expectation = malformed;
  switch (x.kind) {
    case "truncated-field":
      payload = cat(cutAt(sample, x.keep), tag(x.field, 2), varint(x.claimed), new Uint8Array(x.present));
      break;
    case "bad-varint":
      payload = cat(cutAt(sample, x.keep), tag(x.field, 0), x.form === "overlong" ? [...Array(10).fill(0xff), 0x01] : [0x80, 0x80]);
      break;
    case "illegal-tag":
      payload = cat(cutAt(sample, x.keep), x.tag);
      break;
    case "invalid-utf8":
      payload = cat(sample, tag(x.field, 2), varint(x.bytes.length + 2), [0x66, 0x7a], x.bytes);
      break;
    case "groups": {
      const open = Array.from({ length: x.depth }, () => tag(1000, 3)).flat();
      const close = x.end === "none" ? [] : Array.from({ length: x.depth }, () => tag(x.end === "matched" ? 1000 : 1001, 4)).flat();
      payload = cat(sample, open, close);
      break;
    }
    case "garbage":
      payload = Buffer.from(x.bytes);
      break;
    case "json-invalid": {
      payload = cat(cutAt(sample, x.cut), Buffer.from(x.junk));
      if (payload.length === 0 || decodedJson(m, payload)) payload = cat(payload, Buffer.from("x"));
      break;
    }
    case "json-not-object":
      payload = jsonBytes(x.value);
      break;
    case "json-wrong-type":
    case "json-lone-surrogate":
    case "json-invalid-utf8": {
      const value: JVal = x.kind === "json-invalid-utf8" ? { $utf8: "fz", bytes: x.bytes } : x.value;
      const entries = entriesOf(JSON.parse(sample.toString("utf8")) as Record<string, unknown>).filter(([k]) => k !== x.field);
      payload = jsonBytes({ $obj: [...entries, [x.field, value]] });
      break;
    }
    case "envelope-short":
      framing.declaredLength = payload.length + x.missing;
      expect = x.missing >= 2 ** 20 ? { ...malformed, codes: ["invalid_argument", "resource_exhausted"], reasons: ["PROTOCOL_ERROR", "PAYLOAD_TOO_LARGE"] } : malformed;
      break;
    case "envelope-long":
      framing.declaredLength = Math.max(0, payload.length - x.over);
      framing.trailing = new Uint8Array(Math.max(0, x.over - payload.length)); // keeps the body longer than declared
      expect = framingAfterMessage;
      break;
    case "trailing-bytes":
      framing.trailing = Uint8Array.from(x.bytes);
      expect = framingAfterMessage;
      break;
    case "second-message":
      framing.trailing = Buffer.from(rpcRequest(p, m, payload, {}, []).body!);
      break;
    case "no-envelope":
      framing.bare = true;
      payload = new Uint8Array(0);
      break;
    case "compressed-flag-without-encoding":
      framing.flags = 1;
      break;
    case "unknown-encoding":
      framing.encoding = x.encoding;
      if (x.flag) framing.flags = 1;
      expect = { mustRefuse: true, codes: ["unimplemented"] };
      break;
    case "truncated-gzip":
      const gz = zlib.gzipSync(payload);
      payload = gz.subarray(0, Math.max(1, Math.floor(x.keep * gz.length))); // an empty body is an empty message
      Object.assign(framing, { encoding: "gzip", flags: 1 });
      break;
    case "gzip-of-garbage":
      payload = zlib.gzipSync(p.codec === "proto" ? Buffer.from([0x0f, 0xff]) : Buffer.from("{x"));
      Object.assign(framing, { encoding: "gzip", flags: 1 });
      break;
    case "gzip-bomb":
      payload = zlib.gzipSync(p.codec === "proto" ? padded(sample, x.size) : paddedJson(sample, x.size));
      Object.assign(framing, { encoding: "gzip", flags: 1 });
      expect = tooLarge;
      break;
    case "too-large":
      payload = p.codec === "proto" ? padded(sample, x.size) : paddedJson(sample, x.size);
      expect = tooLarge;
      break;
  }
  const poisonDecoded = ["truncated-field", "bad-varint", "illegal-tag", "groups", "garbage"].includes(x.kind)
    ? decoded(m, payload)
    : x.kind === "json-wrong-type"
      ? decodedJson(m, payload)
      : undefined;
  if (poisonDecoded) {
    expect = { mustRefuse: false };
    payload = answeredAtOnce(m, payload, poisonDecoded, x.kind === "json-wrong-type");
  }
  // Connect answers a bidi call over HTTP/1.1 with 505 before reading it (bidi needs HTTP/2).
  if (m.methodKind === "bidi_streaming" && p.transport === "h1") expect = { mustRefuse: true, httpStatus: 505 };
  const req = rpcRequest(p, m, payload, framing, credHeaders(c.creds, w));
  return { req, expect, protocol: p, method: m };
}

/** The sample in proto JSON (what Connect JSON clients send). */
export const jsonSample = (m: DescMethod, w: World) => toJsonString(m.input, fromRestJson(m.input, sampleJson(m, w)));
