import { tokenIdOfSecret } from "../auth/tokens.js";
import type { Caller, TokenGrant } from "../caller.js";
import type { Clock } from "../clock.js";
import { errors, isHubError } from "../errors.js";
import type { Bus } from "../events/bus.js";

/** The longest a timer may be set for (setTimeout's limit); longer waits are taken in steps. */
const maxTimerMs = 2 ** 31 - 1;

export interface TokenGuardDeps {
  /** Ids of managed tokens revoked or expired, from the change feed (every hub's). */
  endedTokens: Bus<string>;
  /** Whether a token is live as committed so far (what was published before the guard listened). */
  tokenLive: (id: string) => Promise<boolean>;
  clock: Clock;
}

/**
 * The frames of a server stream opened with a managed project token, until the token is revoked
 * or reaches its expiry (hub clock): then the stream ends with invalid_auth (unauthenticated).
 * One place for every stream of every face, since they all pass the auth interceptor.
 */
export function framesWhileTokenLives<T>(frames: AsyncIterable<T>, token: TokenGrant, deps: TokenGuardDeps): AsyncGenerator<T> {
  return framesWhile(frames, deps.clock, {
    subscribe: (end) => deps.endedTokens.subscribe(token.id, end),
    holds: () => deps.tokenLive(token.id),
    expiresAtMs: token.expiresAtMs,
  });
}

export interface ProjectGuardDeps {
  /** Projects that got a token of their own, from the change feed (every hub's). */
  closedProjects: Bus<string>;
  /** Whether a project is closed as committed so far (what was published before the guard listened). */
  projectClosed: (project: string) => Promise<boolean>;
  clock: Clock;
}

/**
 * The frames of a server stream let in only because its project had no token of its own (the
 * admin token standing in, or an open hub: Caller's `untilClosed`), until the project gets one:
 * then the stream ends with invalid_auth, as a call made so would now be refused.
 */
export function framesWhileProjectOpen<T>(frames: AsyncIterable<T>, project: string, deps: ProjectGuardDeps): AsyncGenerator<T> {
  return framesWhile(frames, deps.clock, {
    subscribe: (end) => deps.closedProjects.subscribe(project, end),
    holds: async () => !(await deps.projectClosed(project)),
  });
}

/** What a stream's frames last as long as: told when it ends, asked once, and maybe an expiry. */
interface StreamCondition {
  subscribe(end: () => void): () => void;
  /** Whether it holds as committed so far: asked once the subscription listens. */
  holds(): Promise<boolean>;
  /** On the hub clock. */
  expiresAtMs?: number | undefined;
}

async function* framesWhile<T>(frames: AsyncIterable<T>, clock: Clock, condition: StreamCondition): AsyncGenerator<T> {
  const ended = new AbortController();
  const done = new AbortController();
  const unsubscribe = condition.subscribe(() => ended.abort());
  // An end committed and published between the call's authentication and this subscription is
  // not told again: the condition is read once, now that nothing is missed.
  try {
    if (!(await condition.holds())) ended.abort();
  } catch (e) {
    unsubscribe();
    throw e;
  }
  const expiresAtMs = condition.expiresAtMs;
  if (expiresAtMs !== undefined) void untilExpiry(expiresAtMs, clock, done.signal).then((expired) => expired && ended.abort());
  let wake: ((v: typeof gone) => void) | undefined;
  const onEnd = () => wake?.(gone);
  ended.signal.addEventListener("abort", onEnd, { once: true });
  const it = frames[Symbol.asyncIterator]();
  try {
    for (;;) {
      // A fresh promise per frame: racing every frame against one long-lived promise would
      // leave a reaction on it per frame for the stream's whole life.
      const next = await new Promise<IteratorResult<T> | typeof gone>((resolve, reject) => {
        wake = resolve;
        if (ended.signal.aborted) resolve(gone);
        it.next().then(resolve, reject);
      });
      wake = undefined;
      if (next === gone) {
        // The handler's own generator ends when the response does (its signal aborts).
        void it.return?.()?.catch(() => {});
        throw errors.invalidAuth();
      }
      if (next.done) return;
      yield next.value;
    }
  } finally {
    unsubscribe();
    ended.signal.removeEventListener("abort", onEnd);
    done.abort();
  }
}

const gone = Symbol("token ended");

/** Resolves true once `expiresAtMs` has passed on the hub clock, false when `signal` aborts first. */
async function untilExpiry(expiresAtMs: number, clock: Clock, signal: AbortSignal): Promise<boolean> {
  for (;;) {
    if (signal.aborted) return false;
    const left = expiresAtMs - clock.now();
    if (left <= 0) return true;
    await clock.sleep(Math.min(left, maxTimerMs), signal);
  }
}

/** A managed token watched for the length of one unary call (watchToken). */
export interface TokenWatch {
  /** Aborts, with invalid_auth as its reason, once the token is revoked or has expired. */
  readonly signal: AbortSignal;
  /** The call was authenticated with the token: watch its expiry too, on the hub clock. */
  authenticated(token: TokenGrant): void;
  /** The call is over (or was made with no managed token): stop watching. */
  stop(): void;
}

/**
 * Watches the managed token a unary call's bearer names, for as long as the call runs: a call
 * that waits (AcquireLease or ReadInbox with waitMs) ends with invalid_auth once its token is
 * revoked or expires, as a stream made with it does (framesWhileTokenLives), instead of waiting
 * on and answering as a caller that no longer is one. The call's own signal is the one to pass
 * on: `signal` follows it too. Subscribed before the call is authenticated, from the bearer,
 * so that a revocation published while the call was being authenticated is not missed.
 * Undefined when the bearer names no managed token.
 */
export function watchToken(authorization: string | null, callSignal: AbortSignal | undefined, deps: Omit<TokenGuardDeps, "tokenLive">): TokenWatch | undefined {
  const id = authorization?.startsWith("Bearer ") ? tokenIdOfSecret(authorization.slice("Bearer ".length)) : undefined;
  if (id === undefined) return undefined;
  const ended = new AbortController();
  const done = new AbortController();
  const end = () => ended.abort(errors.invalidAuth());
  const unsubscribe = deps.endedTokens.subscribe(id, end);
  const onCallEnd = () => ended.abort(callSignal!.reason);
  if (callSignal?.aborted) onCallEnd();
  else callSignal?.addEventListener("abort", onCallEnd, { once: true });
  return {
    signal: ended.signal,
    authenticated(token) {
      if (token.id !== id || token.expiresAtMs === undefined) return;
      void untilExpiry(token.expiresAtMs, deps.clock, done.signal).then((expired) => expired && end());
    },
    stop() {
      if (done.signal.aborted) return;
      unsubscribe();
      callSignal?.removeEventListener("abort", onCallEnd);
      done.abort();
    },
  };
}

/**
 * Runs a unary call's implementation (`run`) with the signal it is to see: the call's own, or,
 * when the call was made with a managed token (`token`, the one `watch` watches), one that also
 * ends with the token; a call whose token ended meanwhile fails with invalid_auth, whatever the
 * implementation threw then. The watch is stopped when the call is done. The one rule for the
 * auth interceptor and the in-process unary rules alike.
 */
export async function whileTokenLasts<T>(watch: TokenWatch | undefined, token: TokenGrant | undefined, callSignal: AbortSignal, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
  if (!watch || !token) {
    watch?.stop();
    return run(callSignal);
  }
  watch.authenticated(token);
  try {
    return await run(watch.signal);
  } catch (e) {
    throw tokenEnded(watch.signal) ? errors.invalidAuth() : e;
  } finally {
    watch.stop();
  }
}

/** What ends a waiting unary call let in while its project had no token of its own (whileCallerLasts). */
export type OpenProjectDeps = Omit<ProjectGuardDeps, "clock">;

/** Whether a unary request asks to wait (AcquireLease and ReadInbox with `waitMs`). */
function asksToWait(message: unknown): boolean {
  const waitMs = (message as { waitMs?: unknown } | undefined)?.waitMs;
  return typeof waitMs === "number" && waitMs > 0;
}

/**
 * Runs a unary call's implementation (`run`) for as long as its caller lasts: made with a managed
 * token, until the token ends (whileTokenLasts); let in only because its project had no token of
 * its own (`untilClosed`: the admin token standing in, or an open hub) and asking to wait, until
 * the project gets one. Then the call ends with invalid_auth, as its streams do
 * (framesWhileProjectOpen), instead of waiting on and being answered as a caller that would now be
 * refused. A call that does not wait answers before it could matter, and is spared the watch.
 * @NOTE decision D82.
 */
export function whileCallerLasts<T>(
  watch: TokenWatch | undefined,
  caller: Caller,
  message: unknown,
  callSignal: AbortSignal,
  run: (signal: AbortSignal) => Promise<T>,
  projects: OpenProjectDeps,
): Promise<T> {
  const token = caller.kind === "agent" || caller.kind === "project" ? caller.token : undefined;
  if (token || !(caller.kind === "agent" || caller.kind === "project") || caller.untilClosed !== true || !asksToWait(message)) {
    return whileTokenLasts(watch, token, callSignal, run);
  }
  watch?.stop();
  return whileProjectOpen(caller.project, callSignal, run, projects);
}

async function whileProjectOpen<T>(project: string, callSignal: AbortSignal, run: (signal: AbortSignal) => Promise<T>, deps: OpenProjectDeps): Promise<T> {
  const ended = new AbortController();
  const unsubscribe = deps.closedProjects.subscribe(project, () => ended.abort(errors.invalidAuth()));
  const onCallEnd = () => ended.abort(callSignal.reason);
  if (callSignal.aborted) onCallEnd();
  else callSignal.addEventListener("abort", onCallEnd, { once: true });
  try {
    // A token committed and published between the call's authentication and the subscription is
    // not told again: the project is read once, now that nothing is missed.
    if (await deps.projectClosed(project)) throw errors.invalidAuth();
    return await run(ended.signal);
  } catch (e) {
    throw tokenEnded(ended.signal) ? errors.invalidAuth() : e;
  } finally {
    unsubscribe();
    callSignal.removeEventListener("abort", onCallEnd);
  }
}

/** Whether a call's signal was aborted because its token ended (watchToken). */
const tokenEnded = (signal: AbortSignal | undefined): boolean => signal?.aborted === true && isTokenEnd(signal.reason);
const isTokenEnd = (reason: unknown) => isHubError(reason) && reason.code === "invalid_auth";
