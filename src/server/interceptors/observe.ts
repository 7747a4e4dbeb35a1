import type { Interceptor } from "@connectrpc/connect";
import type { FaceObserver } from "../../observe.js";
import { noteOutcome, kCall, type CallRecord } from "../../http/call-record.js";
import type { Caller } from "../../caller.js";
import { kCaller, kRequestId } from "../../http/context.js";

/** The stream kind of a method: its name in snake_case ("WatchLeases" -> "watch_leases"). */
export const streamKindOf = (methodName: string) => methodName.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase();

/**
 * The observe rule at a call's end: its outcome (as the error rule mapped it), its request id
 * and its caller, in the call's record, which the face reports when the answer is written.
 */
export function settleCall(call: CallRecord | undefined, error: unknown, requestId: string, caller: Caller | undefined): void {
  if (!call) return;
  noteOutcome(call, error);
  call.requestId = requestId || call.requestId;
  call.caller = caller;
}

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
    const settle = (error?: unknown) => settleCall(call, error, req.contextValues.get(kRequestId), req.contextValues.get(kCaller));
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
