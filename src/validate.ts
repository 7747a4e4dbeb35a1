import { errors } from "./errors.js";

/**
 * Field rules shared by every domain. Both faces decode into the same typed request, so each
 * rule runs once, here, whichever face the request came through. Messages follow the
 * reference hub's wording; the code (protocol_error) is the contract.
 */

/** Trims; refuses empty or longer than `max` characters. */
export function requireString(label: string, value: string | undefined, max: number): string {
  const v = (value ?? "").trim();
  if (v === "") throw errors.protocol(`${label} cannot be empty`, label);
  if (v.length > max) throw errors.protocol(`${label} exceeds ${max} characters`, label);
  return v;
}

/** Trims; undefined or empty means absent; refuses longer than `max` characters. */
export function optionalString(label: string, value: string | undefined, max: number): string | undefined {
  const v = value?.trim();
  if (v === undefined || v === "") return undefined;
  if (v.length > max) throw errors.protocol(`${label} exceeds ${max} characters`, label);
  return v;
}

/** An integer in [min, max]; undefined gives `fallback`. */
export function intInRange(
  label: string,
  value: number | bigint | undefined,
  min: number,
  max: number,
  fallback: number,
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw errors.protocol(`${label} must be an integer between ${min} and ${max}`, label);
  }
  return n;
}

export const runtimeIdPattern = /^[a-z][a-z0-9]{1,15}_[A-Za-z0-9][A-Za-z0-9_-]{5,127}$/;
