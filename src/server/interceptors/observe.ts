import type { Interceptor } from "@connectrpc/connect";
import type { FaceObserver } from "../../observe.js";
import { noteOutcome, kCall } from "../../http/call-record.js";
import { kCaller, kRequestId } from "../../http/context.js";

/** The stream kind of a method: its name in snake_case ("WatchLeases" -> "watch_leases"). */
export const streamKindOf = (methodName: string) => methodName.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase();

/**
 * Outermost interceptor: notes each call's method, caller, request id and final outcome (after
 * the error interceptor mapped it) in the call's record, which the face reports when the answer
 * is written; and keeps the open-streams gauge, from a stream's first frame request to its end,
 * however it ends (finished, failed, or abandoned by the client).
 */
export function createObserveInterceptor(observer: FaceObserver): Interceptor {
  return (next) => async (req) => {
    const call = req.contextValues.get(kCall);
    if (call) {
      call.service = req.service.typeName;
      call.method = req.method.name;
    }
    const settle = (error?: unknown) => {
      if (!call) return;
      noteOutcome(call, error);
      call.requestId = req.contextValues.get(kRequestId) || call.requestId;
      call.caller = req.contextValues.get(kCaller);
    };
    let res: Awaited<ReturnType<typeof next>>;
    try {
      res = await next(req);
    } catch (e) {
      settle(e);
      throw e;
    }
    if (!res.stream) {
      settle();
      return res;
    }
    const kind = streamKindOf(req.method.name);
    const source = res.message;
    return {
      ...res,
      message: (async function* () {
        observer.stream(kind, 1);
        try {
          yield* source;
          settle();
        } catch (e) {
          settle(e);
          throw e;
        } finally {
          observer.stream(kind, -1);
        }
      })(),
    };
  };
}
