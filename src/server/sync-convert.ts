import type { DescMessage, Message, MessageShape } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { absentLists, unknownProperties } from "../wire/unknown-properties.js";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * A sync event's JSON form, the same whichever wire it came over: the fields that are set, under
 * their JSON names, 64-bit integers as numbers, and every list and map, empty or not, but one a
 * REST body left out (markAbsentList): protobuf has no absent list, so over the other wires an
 * empty one may have been sent (D21). A property the message could not hold (see
 * unknown-properties.ts) comes back as a key with value null, which no rule accepts. The schema
 * checks this form; the content hash is taken over it without its empty lists (prepare.ts).
 */
export function eventJson<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): { [key: string]: Json } {
  return objectJson(reflect(schema, message));
}

function objectJson(r: ReflectMessage): { [key: string]: Json } {
  const out: { [key: string]: Json } = {};
  const absent = absentLists(r.message as Message);
  for (const f of r.fields) {
    if (f.fieldKind === "list") {
      const list = r.get(f);
      if (list.size === 0 && absent.has(f.jsonName)) continue;
      out[f.jsonName] = [...list].map((v) => valueJson(v));
    } else if (f.fieldKind === "map") {
      const map = r.get(f);
      if (map.size === 0 && absent.has(f.jsonName)) continue;
      out[f.jsonName] = Object.fromEntries([...map].map(([k, v]) => [String(k), valueJson(v)]));
    } else if (r.isSet(f)) {
      out[f.jsonName] = valueJson(r.get(f));
    }
  }
  // Defined, not assigned: a key named `__proto__` would otherwise set the object's prototype and
  // vanish instead of being kept for validation to refuse.
  for (const key of unknownProperties(r.message as Message)) Object.defineProperty(out, key, { value: null, enumerable: true, writable: true, configurable: true });
  return out;
}

function valueJson(v: unknown): Json {
  // An int64 beyond 2^53-1 comes out rounded, and still beyond it (at least 2^53 in size): the
  // schema refuses it, and the sync domain echoes no such sequence (sync.ts echo).
  if (typeof v === "bigint") return Number(v);
  if (typeof v === "object" && v !== null && "fields" in v && "desc" in v) return objectJson(v as ReflectMessage);
  return v as Json;
}
