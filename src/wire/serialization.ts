/** connect's own serialization of a method, for the calls the wire layer reads itself (unary.ts, stream.ts). */
import type { DescMethod, JsonReadOptions, JsonWriteOptions } from "@bufbuild/protobuf";
import { createMethodSerializationLookup } from "@connectrpc/connect/protocol";

/** connect's serialization of each method (its JSON options and read limit), made once per method. */
export function methodSerializations(jsonOptions: Partial<JsonReadOptions & JsonWriteOptions>, readMaxBytes: number) {
  const made = new Map<DescMethod, ReturnType<typeof createMethodSerializationLookup>>();
  return (method: DescMethod) => {
    let s = made.get(method);
    if (!s) {
      s = createMethodSerializationLookup(method, undefined, jsonOptions, { readMaxBytes, writeMaxBytes: 0xffffffff });
      made.set(method, s);
    }
    return s;
  };
}
