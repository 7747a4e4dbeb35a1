import v8 from "node:v8";
import vm from "node:vm";
import type { Clock } from "../../src/clock.js";
import { isHubError, type HubError } from "../../src/errors.js";
import type { Observer } from "../../src/observe.js";

/**
 * What the pure-rule suites share: a fixed hub instant (no clock moves, no sleeps), a way to
 * catch a typed refusal, and stand-ins for the dependencies a rule must never touch.
 */

/** The hub instant every unit case decides at. */
export const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);

/** A clock stopped at `nowMs`: what a domain factory gets when only its pure checks run. */
export const fixedClock = (nowMs: number = NOW): Clock => ({
  now: () => nowMs,
  monotonicNow: () => nowMs,
  sleep: () => Promise.resolve(),
  after: () => () => {}, // never fires: no time passes here
});

/** An observer that keeps nothing. */
export const quietObserver: Observer = { log() {}, count() {} };

/** The HubError `fn` throws; fails when it answers or throws anything else. */
export function refusal(fn: () => unknown): HubError {
  try {
    fn();
  } catch (e) {
    if (isHubError(e)) return e;
    throw e;
  }
  throw new Error("expected a refusal, got an answer");
}

/** The HubError the promise rejects with; fails when it resolves or rejects with anything else. */
export async function refusalOf(p: Promise<unknown>): Promise<HubError> {
  try {
    await p;
  } catch (e) {
    if (isHubError(e)) return e;
    throw e;
  }
  throw new Error("expected a refusal, got an answer");
}

/** Thrown when code under test calls into a dependency handed in as `untouchable`: what it called, with what. */
export class DependencyUsed extends Error {
  constructor(
    readonly path: string,
    readonly args: unknown[],
  ) {
    super(`${path}() was called`);
  }
}

/**
 * A dependency that throws DependencyUsed as soon as the code under test calls anything of it
 * (reading its members is not a use, so any layout of it will do): handing it in shows what
 * was decided without it, such as a request refused before the store is reached.
 */
export function untouchable<T extends object>(what: string): T {
  const at = (path: string): unknown =>
    new Proxy(function dependency() {}, {
      // Promise resolution probes `then`: not a use, and not a thenable.
      get: (_target, prop) => (prop === "then" ? undefined : at(`${path}.${String(prop)}`)),
      apply: (_target, _this, args: unknown[]) => {
        throw new DependencyUsed(path, args);
      },
    });
  return at(what) as T;
}

/**
 * True when `p` ended by calling into an untouchable dependency: every check before it passed.
 * A refusal (or any other error) fails the test with that error.
 */
export async function passesChecks(p: Promise<unknown>): Promise<boolean> {
  return (await dependencyCall(p)) !== undefined;
}

/** The call into an untouchable dependency that ended `p`; undefined when `p` resolved. */
export async function dependencyCall(p: Promise<unknown>): Promise<DependencyUsed | undefined> {
  try {
    await p;
  } catch (e) {
    if (e instanceof DependencyUsed) return e;
    throw e;
  }
  return undefined;
}

/**
 * The decide callback a domain handed its store in `call`: running it shows what the domain
 * validated and decided, the store's part left out.
 */
export function decideOf<F extends (...args: never[]) => unknown>(call: DependencyUsed | undefined): F {
  const f = call?.args.find((a) => typeof a === "function");
  if (!f) throw new Error(`no decide callback in ${call?.path ?? "a call that never reached the store"}`);
  return f as F;
}

/**
 * Table rows as `it.each` arguments, each titled by `title(row)` (use the title as "%s"): a
 * `$name` title would be quoted and cut at 40 characters.
 */
export const titled = <T>(rows: readonly T[], title: (row: T) => string): [string, T][] => rows.map((row) => [title(row), row]);

/** Table rows titled by their `name`. */
export const named = <T extends { name: string }>(rows: readonly T[]): [string, T][] => titled(rows, (row) => row.name);

/**
 * V8's collector, called on demand (`--expose-gc` set at run time), for the suites that check
 * what survives a collection: a young one (`minor`) or a full one (the default).
 */
export function exposedGc(): (o?: { type: "major" | "minor" }) => void {
  v8.setFlagsFromString("--expose-gc");
  return vm.runInNewContext("gc") as (o?: { type: "major" | "minor" }) => void;
}
