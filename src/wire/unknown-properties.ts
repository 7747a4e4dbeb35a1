import type { Message } from "@bufbuild/protobuf";
import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

/**
 * Closed messages (`option (kxm.hub.v1.closed) = true`, the sync event and its parts) must
 * refuse properties their schema does not name, but a protobuf message cannot hold them. A
 * decoder that meets one keeps its name as an unknown field with this number, which survives
 * the binary hop to the handler; validation then refuses the message. The REST face marks
 * unknown JSON keys and values of the wrong JSON type this way.
 */
export const unknownPropertyFieldNo = 536_870_911;

/**
 * A list or map of a closed message that a REST body left out. protobuf cannot tell an absent
 * list from an empty one; REST can, and the sync event's schema asks whether some are there (a
 * payload of at least one property, `suppliedRefs` for an approval). Kept under this number,
 * apart from the properties the message could not hold: an absent list is no violation.
 */
export const absentListFieldNo = 536_870_910;

/** Records that the list or map `property` of `message` was left out (not sent empty). */
export function markAbsentList(message: Message, property: string): void {
  const data = new BinaryWriter().string(property).finish();
  (message.$unknown ??= []).push({ no: absentListFieldNo, wireType: WireType.LengthDelimited, data });
}

/** The lists and maps of `message` its REST body left out (markAbsentList). */
const noneAbsent: ReadonlySet<string> = new Set();
export function absentLists(message: Message): ReadonlySet<string> {
  if (!message.$unknown?.length) return noneAbsent;
  const out = new Set<string>();
  for (const u of message.$unknown ?? []) if (u.no === absentListFieldNo && u.wireType === WireType.LengthDelimited) out.add(new BinaryReader(u.data).string());
  return out;
}

/**
 * Records that `property` of `message` could not be represented. Appended in place: a body can
 * carry tens of thousands of unknown keys, and it is decoded before its caller is authenticated,
 * so a copy of the list per key (quadratic) would let anyone hold the hub's thread for seconds.
 */
export function markUnknownProperty(message: Message, property: string): void {
  const data = new BinaryWriter().string(property).finish();
  (message.$unknown ??= []).push({ no: unknownPropertyFieldNo, wireType: WireType.LengthDelimited, data });
}

/**
 * The properties of `message` its schema could not hold: marked names, and `#<n>` for any other
 * unknown field (a binary client with a newer schema). Absent lists (markAbsentList) are none.
 */
export function unknownProperties(message: Message): string[] {
  return (message.$unknown ?? [])
    .filter((u) => !(u.no === absentListFieldNo && u.wireType === WireType.LengthDelimited))
    .map((u) => (u.no === unknownPropertyFieldNo && u.wireType === WireType.LengthDelimited ? new BinaryReader(u.data).string() : `#${u.no}`));
}
