/**
 * Reading a request body and following a response, for every face: a body read with plain
 * stream events (and replayed to a reader that must see it after all), a Node request's headers
 * as a Headers object, the signal of a client that went away, and a response's drain.
 */
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";
import type { NodeRequest as Req, NodeResponse as Res } from "./types.js";

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

/** Resolves when `res` can take more, or is gone. */
export function drained(res: Res): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done).off("close", done);
      resolve();
    };
    res.on("drain", done).on("close", done);
  });
}
