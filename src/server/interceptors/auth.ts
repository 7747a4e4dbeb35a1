import type { Interceptor } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import type { Authenticator, Credentials } from "../../auth/authenticate.js";
import { rateKey, type RateLimiter } from "../../auth/rate-limit.js";
import { authRules, type AuthRule } from "../../auth/rules.js";
import type { Caller } from "../../caller.js";
import type { Clock } from "../../clock.js";
import { errors, HubError, type HubCode } from "../../errors.js";
import type { RefusalMonitor } from "../../auth/audit.js";

/** The refusals that say a caller failed to prove who it is. */
const authRefusals = new Set<HubCode>(["invalid_auth", "invalid_agent_identity", "token_scope_insufficient"]);
import { sha256Hex } from "../../ids.js";
import { rateHeaders } from "../../http/rate-headers.js";
import { kCaller, kRemoteAddress, kResponseHeaders } from "../../http/context.js";
import type { Bus } from "../../events/bus.js";
import { framesWhileTokenLives } from "../token-guard.js";

export interface AuthInterceptorDeps {
  authenticator: Authenticator;
  /** Rules of services added beside the hub's own (auth/rules.ts has those). */
  extraRules?: Record<string, AuthRule>;
  limiter: RateLimiter;
  clock: Clock;
  /** Ids of managed tokens revoked or expired: the streams opened with them end. */
  endedTokens: Bus<string>;
  /** Told of every refused authentication, by remote address (bursts become audit alerts). */
  refusals?: RefusalMonitor;
}

/**
 * Authenticates every call by the method's rule (auth/rules.ts), puts the caller in the
 * context (kCaller), then charges the request budget of the authenticated identity; a request
 * that fails authentication is charged to its remote address. A server stream opened with a
 * managed project token ends with invalid_auth when the token is revoked or expires.
 */
export function createAuthInterceptor({ authenticator, limiter, clock, extraRules, endedTokens, refusals }: AuthInterceptorDeps): Interceptor {
  return (next) => async (req) => {
    const key = `${req.service.typeName}/${req.method.name}`;
    const rule = authRules[key] ?? extraRules?.[key];
    if (!rule) throw errors.internal(new Error(`no auth rule for ${req.service.typeName}/${req.method.name}`));
    const creds: Credentials = {
      authorization: req.header.get("authorization"),
      agentId: req.header.get("x-kxm-agent-id"),
      agentKey: req.header.get("x-kxm-agent-key"),
    };
    const remote = req.contextValues.get(kRemoteAddress);
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
    const extraHeaders = req.contextValues.get(kResponseHeaders);
    let caller: Caller;
    try {
      caller = await authenticator.authenticate(rule, creds, (f) => message?.[f]);
    } catch (e) {
      if (e instanceof HubError && authRefusals.has(e.code)) refusals?.refused(remote ?? "unknown", e.code);
      const verdict = limiter.take(rateKey(undefined, remote), clock.now());
      rateHeaders(verdict, extraHeaders);
      if (verdict?.retryAfterMs !== undefined) throw errors.rateLimited(verdict.retryAfterMs);
      throw e;
    }
    const identity =
      caller.kind === "agent"
        ? { agentId: caller.agentId }
        : creds.authorization
          ? { token: sha256Hex(creds.authorization) }
          : undefined;
    const verdict = limiter.take(rateKey(identity, remote), clock.now());
    rateHeaders(verdict, extraHeaders);
    if (verdict?.retryAfterMs !== undefined) throw errors.rateLimited(verdict.retryAfterMs);
    req.contextValues.set(kCaller, caller);
    const token = caller.kind === "agent" || caller.kind === "project" ? caller.token : undefined;
    if (!token || !req.stream) return next(req);
    const res = await next(req);
    if (!res.stream) return res;
    return { ...res, message: framesWhileTokenLives(res.message, token, { endedTokens, clock }) };
  };
}
