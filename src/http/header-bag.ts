/**
 * The few headers a call carries between the faces and the rules (wire/in-process.ts): what a
 * face forwards (credentials, the request id) and what the rules add to the answer (the request
 * id, rate-limit headers). The Fetch API's `Headers` fits this shape too; `HeaderBag` is the
 * same for a handful of known lower-case names without its per-call cost (its validation and
 * sorting were a visible share of a lease call; bench/steps.md).
 */
export interface HeaderView {
  get(name: string): string | null;
  forEach(fn: (value: string, name: string) => void): void;
}

export interface HeaderWriter {
  set(name: string, value: string): void;
}

/**
 * Headers by lower-case name, one value each. Names are taken as the hub writes them (lower
 * case, valid); values come from Node's parsed request or from the hub itself.
 */
export class HeaderBag implements HeaderView, HeaderWriter {
  private readonly values = new Map<string, string>();

  constructor(init?: Record<string, string>) {
    if (init) for (const name in init) this.values.set(name, init[name]!);
  }

  get(name: string): string | null {
    return this.values.get(name) ?? null;
  }

  set(name: string, value: string): void {
    this.values.set(name, value);
  }

  forEach(fn: (value: string, name: string) => void): void {
    this.values.forEach(fn);
  }
}

/** No headers (an answer whose implementation set none). */
export const noHeaders: HeaderView = { get: () => null, forEach: () => undefined };

/** A view as Fetch API `Headers` (what connect's interfaces take), copied only when it is not one. */
export function asHeaders(view: HeaderView): Headers {
  if (view instanceof Headers) return view;
  const h = new Headers();
  view.forEach((v, k) => h.set(k, v));
  return h;
}
