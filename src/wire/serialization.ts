/**
 * Reading a Connect request outside connect, as connect-unary.ts and connect-stream.ts do: the
 * body (and a replay of it for connect when it must answer after all), the headers, the
 * method's own serialization.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescMethod, JsonReadOptions, JsonWriteOptions } from "@bufbuild/protobuf";
import { createMethodSerializationLookup } from "@connectrpc/connect/protocol";

type Req = IncomingMessage | Http2ServerRequest;

/** connect's serialization of each method (its JSON options and read limit), made once per method. */
export function methodSerializations(jsonOptions: Partial<JsonReadOptions & JsonWriteOptions>, readMaxBytes: number) {
  const made = new Map<DescMethod, ReturnType<typeof createMethodSerializationLookup>>();
  return (method: DescMethod) => {
    let s = made.get(method);
    if (!s) {
      s = createMethodSerializationLookup(method, undefined, jsonOptions, { readMaxBytes, writeMaxBytes: 0xffffffff });
      made.set(method, s);
    }
    return s;
  };
}

/** A request body connect must read after all: the bytes read so far, then the rest. */
export type ReplayBody = AsyncIterable<Uint8Array>;

export type BodyRead = { kind: "whole" | "long"; chunks: Buffer[] } | { kind: "gone" };

/**
 * Reads a request body with plain stream events: all of it, or the first chunks past `max`
 * (the request is then paused, its rest unread), or "gone" when the request closes first.
 */
export function readBody(req: Req, max: number): Promise<BodyRead> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (read: BodyRead) => {
      req.off("data", onData).off("end", onEnd).off("error", onGone).off("close", onGone);
      resolve(read);
    };
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size <= max) return;
      req.pause();
      done({ kind: "long", chunks });
    };
    const onEnd = () => done({ kind: "whole", chunks });
    const onGone = () => done({ kind: "gone" });
    req.on("data", onData).on("end", onEnd).on("error", onGone).on("close", onGone);
  });
}

/** The body as connect reads it: the chunks already read, then whatever the request still holds. */
export async function* replay(chunks: Buffer[], req: Req): ReplayBody {
  yield* chunks;
  if (!req.readableEnded) yield* req as AsyncIterable<Buffer>;
}

/** A Node request's headers as the interceptors read them (pseudo-headers left out, as connect does). */
export function headersOf(req: Req): Headers {
  const header = new Headers();
  const h = req.headers;
  for (const k in h) {
    if (k.charCodeAt(0) === 58 /* ":" */) continue;
    const v = h[k];
    if (typeof v === "string") header.append(k, v);
    else if (Array.isArray(v)) for (const e of v) header.append(k, e);
  }
  return header;
}


/**
 * The signal of a call served in-process: it aborts when the client goes away before its answer
 * is written (the response closes before it was ended), which ends a call that waits on its client (a
 * blocking acquire leaves its queue).
 */
export function clientGoneSignal(res: ServerResponse | Http2ServerResponse): AbortSignal {
  const ac = new AbortController();
  res.once("close", () => {
    if (!res.writableEnded) ac.abort("client gone");
  });
  return ac.signal;
}
