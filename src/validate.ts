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
  return storable(label, v);
}

/** Trims; undefined or empty means absent; refuses longer than `max` characters. */
export function optionalString(label: string, value: string | undefined, max: number): string | undefined {
  const v = value?.trim();
  if (v === undefined || v === "") return undefined;
  if (v.length > max) throw errors.protocol(`${label} exceeds ${max} characters`, label);
  return storable(label, v);
}

/**
 * Refuses a NUL character (U+0000): PostgreSQL's text cannot hold one, so on that store the
 * write would fail, and with it every decision batched with this one, and a read would fail as
 * the database's error, not the caller's. Refused on both stores alike, as a typed error naming
 * the field.
 */
function storable(label: string, v: string): string {
  if (hasNul(v)) throw errors.protocol(`${label} must not contain a NUL character (U+0000)`, label);
  return v;
}

/** Whether `v` holds a NUL character, which no store can be asked about (above). */
export const hasNul = (v: string): boolean => v.includes("\u0000");

/**
 * An id the caller names (a message's, a run's), taken as given: refused when it holds a NUL
 * character, which no stored id does, or is longer than `max` (an id the hub issued is short, and
 * a refusal that echoes a long one would not fit in a gRPC answer's trailers).
 */
export function idOf(label: string, value: string, max = Number.POSITIVE_INFINITY): string {
  if (value.length > max) throw errors.protocol(`${label} exceeds ${max} characters`, label);
  return storable(label, value);
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

/** Any C0 or C1 control character, DEL included. */
const controlCharacter = /[\u0000-\u001f\u007f-\u009f]/;
/**
 * Bidirectional formatting characters (marks, embeddings, overrides, isolates): shown beside
 * other text they reorder it, so a name holding one can read as another name, or move the text
 * around it. @NOTE decision D74.
 */
const bidiControl = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
export const projectNameMax = 128;

/**
 * An agent's name, trimmed, up to 64 characters: no control character and no bidirectional
 * formatting character, as a project's (D74); names are shown in lists, logs, terminals and the
 * operator page, and one must not read as another there, nor write a terminal's escapes.
 */
export function agentName(value: string | undefined): string {
  const name = requireString("name", value, 64);
  if (controlCharacter.test(name)) throw errors.protocol("name must not contain control characters", "name");
  if (bidiControl.test(name)) throw errors.protocol("name must not contain bidirectional formatting characters", "name");
  return name;
}

/**
 * Why `value` cannot name a project, or undefined when it can. Pure, so configuration
 * (KXM_PROJECT_TOKENS) applies the same rule with its own error.
 */
export function projectNameProblem(value: string): string | undefined {
  if (value.trim() === "") return "cannot be empty";
  // A URL path takes them for its own dot segments: /v1/ops/projects/../tokens names no project.
  if (value === "." || value === "..") return "cannot be . or .. (a URL path takes it for a dot segment)";
  if (value.length > projectNameMax) return `exceeds ${projectNameMax} characters`;
  if (controlCharacter.test(value)) return "must not contain control characters";
  if (bidiControl.test(value)) return "must not contain bidirectional formatting characters";
  if (value.trim() !== value) return "must not start or end with whitespace";
  return undefined;
}

/**
 * A project name exactly as given: the one rule for every place a project name enters the hub
 * (registration, runtime heartbeats, project-token calls, watches, the operator snapshot).
 * Anything else the reference accepted stays valid (`org/repo`, any Unicode), up to 128 chars.
 * @NOTE decision D44: a project is an identity, so it is never trimmed into another one; names
 * with control characters or outer whitespace are refused (protocol_error, field `project`).
 */
export function projectName(label: string, value: string | undefined): string {
  const v = value ?? "";
  const problem = projectNameProblem(v);
  if (problem !== undefined) throw errors.protocol(`${label} ${problem}`, label);
  return v;
}

/** An opaque id of run facts (a run, its project, a runtime): `prefix_` and 6..128 more characters, 144 at most. */
export const opaqueIdPattern = /^[a-z][a-z0-9]{1,15}_[A-Za-z0-9][A-Za-z0-9_-]{5,127}$/;
/** The longest opaque id (the pattern alone allows one more). */
export const maxOpaqueIdChars = 144;
/** Whether `id` is an opaque id. */
export const isOpaqueId = (id: string): boolean => id.length <= maxOpaqueIdChars && opaqueIdPattern.test(id);
