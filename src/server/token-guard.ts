import type { TokenGrant } from "../caller.js";
import type { Clock } from "../clock.js";
import { errors } from "../errors.js";
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
export async function* framesWhileTokenLives<T>(frames: AsyncIterable<T>, token: TokenGrant, deps: TokenGuardDeps): AsyncGenerator<T> {
  const ended = new AbortController();
  const done = new AbortController();
  const unsubscribe = deps.endedTokens.subscribe(token.id, () => ended.abort());
  // A revocation committed and published between the call's authentication and this
  // subscription is not told again: the token's state is read once, now that nothing is missed.
  try {
    if (!(await deps.tokenLive(token.id))) ended.abort();
  } catch (e) {
    unsubscribe();
    throw e;
  }
  if (token.expiresAtMs !== undefined) void untilExpiry(token.expiresAtMs, deps.clock, done.signal).then((expired) => expired && ended.abort());
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
