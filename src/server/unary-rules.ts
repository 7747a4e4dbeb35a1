import type { FaceObserver } from "../observe.js";
import { kCall } from "../http/call-record.js";
import { kCaller, kCharged, kRemoteAddress, kRequestId, kResponseHeaders } from "../http/context.js";
import { noHeaders, type HeaderView } from "../http/header-bag.js";
import type { UnaryRules } from "../wire/in-process.js";
import { methodKey } from "../wire/method-key.js";
import type { Authorize } from "./interceptors/auth.js";
import { callIdentity, createErrorMapping } from "./interceptors/errors.js";
import { checkDeclaredLength } from "./interceptors/limits.js";
import { settleCall } from "./interceptors/observe.js";
import { watchToken, whileCallerLasts, type OpenProjectDeps, type TokenGuardDeps } from "./token-guard.js";

export interface UnaryRulesDeps {
  observer: FaceObserver;
  maxBodyBytes: number;
  /** The auth rule (interceptors/auth.ts), built from the same dependencies as the auth interceptor. */
  authorize: Authorize;
  /** What ends a call made with a managed token once the token ends (token-guard.ts watchToken). */
  tokens: Omit<TokenGuardDeps, "tokenLive">;
  /** What ends a waiting call let in while its project had no token (token-guard.ts whileCallerLasts). */
  projects: OpenProjectDeps;
}

/**
 * The interceptors' rules for a unary call made in-process (the REST face, plain Connect calls,
 * MCP tool calls), applied as plain calls in the interceptors' order: observe (the call record),
 * errors (the request id, every error mapped once), limits (the declared length), auth (the
 * caller and its request budget), then the implementation. Each rule is the function its
 * interceptor runs (interceptors/*.ts), so a rule is written once for both ways; what this
 * spares is a promise, a closure and a `Headers` object per interceptor per call.
 *
 * The chain and this must give the same answer to every request: held so by
 * test/fuzz/differential.fuzz.test.ts (plain Connect calls, this against connect's own handler
 * and the chain) and test/fuzz/rest-differential.fuzz.test.ts (the REST face, this against the
 * chain), with the wire switch choosing the way (`wire: connect` takes the chain).
 */
export function createUnaryRules({ observer, maxBodyBytes, authorize, tokens, projects }: UnaryRulesDeps): UnaryRules {
  const mapError = createErrorMapping(observer);
  return {
    async run(method, input, callSignal, invoke) {
      const values = input.contextValues;
      const call = values.get(kCall);
      if (call) {
        call.service = method.parent.typeName;
        call.method = method.name;
      }
      const { requestId, extraHeaders } = callIdentity(input.header.get("x-request-id"));
      values.set(kRequestId, requestId);
      values.set(kResponseHeaders, extraHeaders);
      const watch = watchToken(input.header.get("authorization"), callSignal, tokens);
      try {
        checkDeclaredLength(input.header, maxBodyBytes);
        const caller = await authorize({
          methodKey: methodKey(method),
          header: input.header,
          remote: values.get(kRemoteAddress),
          charged: values.get(kCharged),
          message: input.message as unknown as Record<string, unknown>,
          extraHeaders,
        });
        values.set(kCaller, caller);
        const out = await whileCallerLasts(watch, caller, input.message, callSignal, invoke, projects);
        // The implementation's own headers, if it set any, with the rules' on top (as the chain sets them).
        let header: HeaderView = extraHeaders;
        if (out.header) {
          const own = out.header;
          extraHeaders.forEach((v, k) => own.set(k, v));
          header = own;
        }
        settleCall(call, undefined, requestId, caller);
        return { message: out.message, header, trailer: out.trailer ?? noHeaders };
      } catch (e) {
        const err = mapError(e, requestId, extraHeaders);
        settleCall(call, err, requestId, values.get(kCaller));
        throw err;
      } finally {
        watch?.stop();
      }
    },
  };
}
