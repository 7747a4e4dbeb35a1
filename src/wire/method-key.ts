import type { DescMethod } from "@bufbuild/protobuf";

const keys = new WeakMap<DescMethod, string>();

/**
 * `<service type name>/<method name>`, the key of a method's rules (auth/rules.ts), made once per
 * method: a string built at every call is hashed again at every lookup it keys.
 */
export function methodKey(method: DescMethod): string {
  let key = keys.get(method);
  if (key === undefined) keys.set(method, (key = `${method.parent.typeName}/${method.name}`));
  return key;
}
