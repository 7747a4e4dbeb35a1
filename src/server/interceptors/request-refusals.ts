import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { errors, type HubError } from "../../errors.js";
import { ErrorInfoSchema } from "../../../gen/ts/google/rpc/error_details_pb.js";
import { readableEncodings } from "../../wire/adapter.js";

/** The encoding a request declares for its body, by protocol (none: identity). */
function requestEncoding(header: Headers): string {
  const type = header.get("content-type") ?? "";
  const name = type.startsWith("application/grpc")
    ? "grpc-encoding"
    : type.startsWith("application/connect+")
      ? "connect-content-encoding"
      : "content-encoding";
  return header.get(name) ?? "identity"; // compared exactly, as connect compares it
}

/**
 * The hub error that a refusal connect raised while it read a request stands for, or undefined
 * to answer it as connect did: one raised before any interceptor saw the call
 * (wire/framework-errors.ts finds those) or while a stream's request message was read (below). Decided by
 * the error's code and the request, never by connect's message text:
 * - resource_exhausted: the body is over the read limit (payload_too_large, `maxBodyBytes`);
 * - invalid_argument and internal: the request did not decode (a bad envelope, a body that is
 *   not its message, a compressed flag without an encoding) — the client's error, so
 *   `protocol_error`, never a 5xx;
 * - unimplemented: the protocol's own answer to an encoding the hub does not read stays as it
 *   is; otherwise the request held no message or more than one (`protocol_error`).
 * A refusal that already carries ErrorInfo is the hub's own and stays as it is.
 */
export function requestRefusal(e: ConnectError, requestHeader: Headers, maxBodyBytes: number): HubError | undefined {
  if (e.findDetails(ErrorInfoSchema).length > 0) return undefined;
  switch (e.code) {
    case Code.ResourceExhausted:
      return errors.payloadTooLarge(maxBodyBytes);
    case Code.InvalidArgument:
    case Code.Internal:
      return errors.protocol(`malformed request: ${e.rawMessage}`);
    case Code.Unimplemented:
      return readableEncodings.has(requestEncoding(requestHeader)) ? errors.protocol(`malformed request: ${e.rawMessage}`) : undefined;
    default:
      return undefined;
  }
}

/**
 * Reads a server stream's one request message, before the auth interceptor (whose rules read
 * its fields), so that what reading it raises is known by where it was raised, not by its text
 * (requestRefusal; the end of the call itself, a deadline or the client gone, is no refusal of
 * the request and stays as it is), and a request with no message or more than one is refused
 * the same way on every path. A bidirectional stream (server reflection) reads its requests as
 * they come, while it answers: each read is typed the same way, and nothing reads ahead.
 */
export function createStreamRequestInterceptor(maxBodyBytes: number): Interceptor {
  return (next) => async (req) => {
    if (!req.stream) return next(req);
    const typed = (e: unknown) => (e instanceof ConnectError && requestRefusal(e, req.header, maxBodyBytes)) || e;
    if (req.method.methodKind !== "server_streaming") {
      const source = req.message;
      const reads = (async function* () {
        try {
          yield* source;
        } catch (e) {
          throw typed(e);
        }
      })();
      return next({ ...req, message: reads } as typeof req);
    }
    const messages: unknown[] = [];
    try {
      for await (const m of req.message) {
        messages.push(m);
        if (messages.length > 1) break;
      }
    } catch (e) {
      throw typed(e);
    }
    if (messages.length === 0) throw errors.protocol("a server-streaming call needs exactly one request message");
    if (messages.length > 1) throw errors.protocol("a server-streaming call takes one request message, not more");
    return next({ ...req, message: createAsyncIterable(messages) } as typeof req);
  };
}
