import type { Interceptor } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import type { Authenticator, Credentials } from "../../auth/authenticate.js";
import { rateKey, type RateLimiter } from "../../auth/rate-limit.js";
import { authRules, type AuthRule } from "../../auth/rules.js";
import type { Caller } from "../../caller.js";
import type { Clock } from "../../clock.js";
import { errors } from "../../errors.js";
import type { RefusalMonitor } from "../../auth/audit.js";
import { sha256Hex } from "../../ids.js";
import { charge } from "../../http/rate-headers.js";
import { kCaller, kCharged, kRemoteAddress, kResponseHeaders } from "../../http/context.js";
import type { Bus } from "../../events/bus.js";
import type { HeaderView, HeaderWriter } from "../../http/header-bag.js";
import { methodKey } from "../../wire/method-key.js";
import { framesWhileProjectOpen, framesWhileTokenLives, watchToken, whileCallerLasts } from "../token-guard.js";

export interface AuthInterceptorDeps {
  authenticator: Authenticator;
  /** Rules of services added beside the hub's own (auth/rules.ts has those). */
  extraRules?: Record<string, AuthRule>;
  limiter: RateLimiter;
  clock: Clock;
  /** Ids of managed tokens revoked or expired: the streams opened with them end. */
  endedTokens: Bus<string>;
  /** Projects that got a token of their own: the streams let in for having none end. */
  closedProjects: Bus<string>;
  /** Told of every refused authentication, by remote address (bursts become audit alerts). */
  refusals?: RefusalMonitor;
}

/** One call as the auth rule sees it, whichever way it came (an interceptor, or a direct unary call). */
export interface AuthInput {
  /** `<service type name>/<method name>`: the key of its rule. */
  methodKey: string;
  /** The rule, for a request that is no RPC (`/metrics`); else the method's (auth/rules.ts). */
  rule?: AuthRule;
  /** The face charged the request's budget already (kCharged): authenticate only. */
  charged?: boolean;
  header: HeaderView;
  remote: string;
  /** The request message, whose fields a rule may name (undefined: a stream that reads as it goes). */
  message: Record<string, unknown> | undefined;
  /** Where the rate-limit headers go: they are answered whether the call succeeds or fails. */
  extraHeaders: HeaderWriter;
}

/**
 * The auth rule of every call: authenticates it by the method's rule (auth/rules.ts), then
 * charges the request budget of the authenticated identity; a request that fails authentication
 * is charged to its remote address, and told to the refusal monitor. Only a call the budget
 * admits is an agent's activity (a refused call changes nothing). Resolves with the caller, or
 * rejects with the refusal.
 */
export function createAuthorize({ authenticator, limiter, clock, extraRules, refusals }: Omit<AuthInterceptorDeps, "endedTokens" | "closedProjects">) {
  const refused = (e: unknown, remote: string) => refusals?.refusedWith(remote, e);
  return async function authorize({ methodKey, rule: given, charged, header, remote, message, extraHeaders }: AuthInput): Promise<Caller> {
    const rule = given ?? authRules[methodKey] ?? extraRules?.[methodKey];
    if (!rule) throw errors.internal(new Error(`no auth rule for ${methodKey}`));
    const creds: Credentials = {
      authorization: header.get("authorization"),
      agentId: header.get("x-kxm-agent-id"),
      agentKey: header.get("x-kxm-agent-key"),
    };
    let caller: Caller;
    try {
      caller = await authenticator.authenticate(rule, creds, (f) => message?.[f]);
    } catch (e) {
      refused(e, remote);
      if (!charged) charge(limiter, rateKey(undefined, remote), clock.now(), extraHeaders);
      throw e;
    }
    // @NOTE decision D40: the budget is the proven identity's; a bearer nothing checked (an open
    // project, a loopback hub without an admin token) is the caller's choice, so its address is.
    const proven = caller.kind === "agent" || ((caller.kind === "project" || caller.kind === "admin") && caller.proven === true);
    const identity =
      caller.kind === "agent"
        ? { agentId: caller.agentId }
        : proven && creds.authorization
          ? { token: sha256Hex(creds.authorization) }
          : undefined;
    if (!charged) charge(limiter, rateKey(identity, remote), clock.now(), extraHeaders);
    try {
      await authenticator.admitted(caller);
    } catch (e) {
      refused(e, remote);
      throw e;
    }
    return caller;
  };
}

export type Authorize = ReturnType<typeof createAuthorize>;

/**
 * The auth rule (createAuthorize) as an interceptor: puts the caller in the context (kCaller).
 * A server stream opened with a managed project token ends with invalid_auth when the token is
 * revoked or expires; so does a unary call that is still running then (one that waits). A server
 * stream let in because its project had no token of its own ends when the project gets one.
 */
export function createAuthInterceptor(deps: AuthInterceptorDeps): Interceptor {
  const authorize = createAuthorize(deps);
  const { endedTokens, clock } = deps;
  /** What ends a call let in while its project had no token of its own: made once, not per call. */
  const openProjects = { closedProjects: deps.closedProjects, projectClosed: (project: string) => deps.authenticator.projectClosed(project) };
  return (next) => async (req) => {
    let message: Record<string, unknown> | undefined;
    if (!req.stream) {
      message = req.message as Record<string, unknown>;
    } else if (req.method.methodKind === "server_streaming") {
      // The one request message, read and checked by the stream-request interceptor before this
      // one (interceptors/request-refusals.ts): taken out, then handed on.
      const first = await req.message[Symbol.asyncIterator]().next();
      message = first.value as Record<string, unknown>;
      req = { ...req, message: createAsyncIterable([first.value]) };
    }
    const watch = req.stream ? undefined : watchToken(req.header.get("authorization"), req.signal, { endedTokens, clock });
    let caller: Caller;
    try {
      caller = await authorize({
        methodKey: methodKey(req.method),
        header: req.header,
        remote: req.contextValues.get(kRemoteAddress) ?? "unknown",
        charged: req.contextValues.get(kCharged),
        message,
        extraHeaders: req.contextValues.get(kResponseHeaders),
      });
    } catch (e) {
      watch?.stop();
      throw e;
    }
    req.contextValues.set(kCaller, caller);
    const token = caller.kind === "agent" || caller.kind === "project" ? caller.token : undefined;
    if (!req.stream) return whileCallerLasts(watch, caller, message, req.signal, (signal) => next(signal === req.signal ? req : { ...req, signal }), openProjects);
    const untilClosed = (caller.kind === "agent" || caller.kind === "project") && caller.untilClosed === true ? caller.project : undefined;
    if (!token && untilClosed === undefined) return next(req);
    const res = await next(req);
    if (!res.stream) return res;
    if (token) return { ...res, message: framesWhileTokenLives(res.message, token, { endedTokens, clock, tokenLive: (id) => deps.authenticator.tokenLive(id) }) };
    return { ...res, message: framesWhileProjectOpen(res.message, untilClosed!, { ...openProjects, clock }) };
  };
}
