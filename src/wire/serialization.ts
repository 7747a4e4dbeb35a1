/** connect's own serialization of a method, for the calls the wire layer reads itself (unary.ts, stream.ts). */
import { getOption, type DescMessage, type DescMethod, type JsonReadOptions, type JsonWriteOptions } from "@bufbuild/protobuf";
import { createMethodSerializationLookup } from "@connectrpc/connect/protocol";
import { closed } from "../../gen/ts/kxm/hub/v1/options_pb.js";

type JsonOptions = Partial<JsonReadOptions & JsonWriteOptions>;

/**
 * Whether `message`, or a message any of its fields holds, is closed (`kxm.hub.v1.closed`) or
 * has an enum field.
 */
function holdsStrict(message: DescMessage, seen = new Set<DescMessage>()): boolean {
  if (seen.has(message)) return false;
  seen.add(message);
  if (getOption(message, closed)) return true;
  return message.fields.some((f) => {
    if (f.fieldKind === "enum" || (f.fieldKind === "list" && f.listKind === "enum") || (f.fieldKind === "map" && f.mapKind === "enum")) return true;
    const inner = f.fieldKind === "message" ? f.message : (f.fieldKind === "list" || f.fieldKind === "map") && f.message ? f.message : undefined;
    return inner !== undefined && holdsStrict(inner, seen);
  });
}

/**
 * The JSON options a method's request is read with: `json`, and unknown properties refused
 * instead of dropped for a request that holds a closed message (a sync event) or an enum field.
 * protobuf JSON cannot keep a closed message's unknown properties as the REST face's marks do, so
 * such a request is refused whole (invalid_argument), where over REST the event alone is
 * rejected. And reading JSON that ignores unknown properties also drops an enum value whose name
 * it does not know, leaving the field at its default: a misspelled token scope would mint the
 * broadest (D66). Nothing is silently changed either way. Other requests keep ignoring
 * properties they do not know (a newer client's).
 */
export function jsonOptionsOf(method: DescMethod, json: JsonOptions): JsonOptions {
  return holdsStrict(method.input) ? { ...json, ignoreUnknownFields: false } : json;
}

/** connect's serialization of each method (its JSON options and read limit), made once per method. */
export function methodSerializations(jsonOptions: JsonOptions, readMaxBytes: number) {
  const made = new Map<DescMethod, ReturnType<typeof createMethodSerializationLookup>>();
  return (method: DescMethod) => {
    let s = made.get(method);
    if (!s) {
      s = createMethodSerializationLookup(method, undefined, jsonOptionsOf(method, jsonOptions), { readMaxBytes, writeMaxBytes: 0xffffffff });
      made.set(method, s);
    }
    return s;
  };
}
