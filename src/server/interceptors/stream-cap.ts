import type { Interceptor } from "@connectrpc/connect";
import type { Caller } from "../../caller.js";
import { errors } from "../../errors.js";
import { kCaller } from "../../http/context.js";
import { sha256Hex } from "../../ids.js";

/**
 * The most server streams one caller holds open on a hub at once: an agent, and a project
 * token (which many watchers of a project may share).
 */
export const maxStreams = { agent: 32, token: 1_024 } as const;

/**
 * Whose streams a call's stream counts among: an agent's, or a proven bearer's (a project
 * token, by its digest, as its rate budget, D40). None for the admin, and for a caller nothing
 * proved (an open project on a loopback hub), whose streams are as many as its clients on this
 * host open. @NOTE decision D73.
 */
export function streamOwner(caller: Caller | undefined, authorization: string | null): { key: string; max: number } | undefined {
  if (caller?.kind === "agent") return { key: `agent:${caller.agentId}`, max: maxStreams.agent };
  if (caller?.kind === "project" && caller.proven === true && authorization !== null) return { key: `token:${sha256Hex(authorization)}`, max: maxStreams.token };
  return undefined;
}

/**
 * Holds each owner (streamOwner) to its most open server streams: one more ends at its start with
 * too_many_streams, before its first frame (on REST, an ordinary 429). A stream counts from its
 * first frame's request to its end, however it ends, as the open-streams gauge does
 * (interceptors/observe.ts), so a stream nobody ever read holds no place. Runs after the auth
 * interceptor, which names the caller.
 */
export function createStreamCapInterceptor(): Interceptor {
  const open = new Map<string, number>();
  return (next) => async (req) => {
    const res = await next(req);
    if (!res.stream || req.method.methodKind !== "server_streaming") return res;
    const owner = streamOwner(req.contextValues.get(kCaller), req.header.get("authorization"));
    if (owner === undefined) return res;
    const source = res.message;
    return {
      ...res,
      message: (async function* () {
        const { key, max } = owner;
        const held = open.get(key) ?? 0;
        if (held >= max) {
          await source[Symbol.asyncIterator]().return?.(); // what the stream set up, if anything, goes
          throw errors.tooManyStreams(max);
        }
        open.set(key, held + 1);
        try {
          yield* source;
        } finally {
          const left = open.get(key)! - 1;
          if (left === 0) open.delete(key);
          else open.set(key, left);
        }
      })(),
    };
  };
}
