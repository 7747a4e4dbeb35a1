import { getOption, type DescField, type DescMessage, type Message, type MessageShape } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { FieldBehavior, field_behavior } from "../../gen/ts/google/api/field_behavior_pb.js";
import { unknownProperties } from "../wire/unknown-properties.js";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * A sync event's JSON form, the same whichever wire it came over: the fields that are set, under
 * their JSON names, 64-bit integers as numbers; lists and maps only when not empty (or when the
 * schema requires them, as `redaction.fieldsOmitted`). A property the message could not hold
 * (see unknown-properties.ts) comes back as a key with value null, which no rule accepts. The
 * content hash is taken over the canonical text of this form.
 */
export function eventJson<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): { [key: string]: Json } {
  return objectJson(reflect(schema, message));
}

/** Whether a list field is written even when empty (field_behavior REQUIRED), per field. */
const requiredLists = new WeakMap<DescField, boolean>();
function isRequiredList(f: DescField): boolean {
  let required = requiredLists.get(f);
  if (required === undefined) {
    required = getOption(f, field_behavior).includes(FieldBehavior.REQUIRED);
    requiredLists.set(f, required);
  }
  return required;
}

function objectJson(r: ReflectMessage): { [key: string]: Json } {
  const out: { [key: string]: Json } = {};
  for (const f of r.fields) {
    if (f.fieldKind === "list") {
      const list = r.get(f);
      if (list.size === 0 && !isRequiredList(f)) continue;
      out[f.jsonName] = [...list].map((v) => valueJson(v));
    } else if (f.fieldKind === "map") {
      const map = r.get(f);
      if (map.size === 0) continue;
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
