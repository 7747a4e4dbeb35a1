/**
 * Reading a request body and following a response, for every face: a body read with plain
 * stream events (and replayed to a reader that must see it after all), a Node request's headers
 * as a Headers object, the signal of a client that went away, and a response's drain.
 */
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";
import { HeaderBag } from "./header-bag.js";
import type { NodeRequest as Req, NodeResponse as Res } from "./types.js";

/**
 * Whether the request's client went away already: its `close` (and, on HTTP/2, the `end` of the
 * body it dumps) has been emitted, so a reader that starts now would wait forever. HTTP/1.1
 * destroys the request; on HTTP/2 its stream is closed (reset) before any answer was written.
 */
export function requestGone(req: Req): boolean {
  if (req.destroyed || (req as { aborted?: boolean }).aborted === true) return true;
  const stream = (req as { stream?: { closed: boolean; destroyed: boolean } }).stream;
  return stream !== undefined && (stream.closed || stream.destroyed);
}

/** A request body connect must read after all: the bytes read so far, then the rest. */
export type ReplayBody = AsyncIterable<Uint8Array>;

export type BodyRead = { kind: "whole" | "long"; chunks: Buffer[] } | { kind: "gone" };

/**
 * Reads a request body with plain stream events: all of it, or the first chunks past `max`
 * (the request is then paused, its rest unread), or "gone" when the request closes first.
 */
export function readBody(req: Req, max: number): Promise<BodyRead> {
  if (requestGone(req)) return Promise.resolve({ kind: "gone" });
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

/**
 * The request headers a unary call's rules read (server/unary-rules.ts: the request id, the
 * declared length, the credentials): a unary call served in-process hands on only these, as the
 * REST face does, without the cost of a Fetch API `Headers` of every header.
 */
const ruleHeaderNames = ["x-request-id", "content-length", "authorization", "x-kxm-agent-id", "x-kxm-agent-key"] as const;

/**
 * `ruleHeaderNames` of a Node request, each as `Headers` would give it: a repeated header's
 * values joined with ", ", leading and trailing whitespace trimmed.
 */
export function ruleHeadersOf(req: Req): HeaderBag {
  const header = new HeaderBag();
  const h = req.headers;
  for (const name of ruleHeaderNames) {
    const v = h[name];
    if (typeof v === "string") header.set(name, trimmed(v));
    else if (Array.isArray(v)) header.set(name, v.map(trimmed).join(", "));
  }
  return header;
}

/** A header value without the leading and trailing whitespace `Headers` strips (HTTP/1.1's parser already has). */
const edgeSpace = /^[\t\n\r ]+|[\t\n\r ]+$/g;
function trimmed(v: string): string {
  const last = v.length - 1;
  const space = (i: number) => {
    const c = v.charCodeAt(i);
    return c === 32 || c === 9 || c === 10 || c === 13;
  };
  return last >= 0 && (space(0) || space(last)) ? v.replace(edgeSpace, "") : v;
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

/**
 * The server streams whose client takes nothing: a response that has waited for its client to
 * read (a full window or socket) for `stallMs` of the hub clock without a drain is destroyed by
 * the sweeper's `check`, which ends the stream (its writer waits on "close" too) and its
 * subscriptions. A reader that stops reading is behind by then and would stay so: a stream's own
 * lag check runs only when its writer does. Times are the sweeper's (no timer per stream).
 */
export function createStallWatch(stallMs: number) {
  const streams = new Map<Res, { since?: number }>();
  return {
    /** Watches `res` until it closes. */
    watch(res: Res): void {
      const entry: { since?: number } = {};
      const onDrain = () => (entry.since = undefined);
      streams.set(res, entry);
      res.on("drain", onDrain);
      res.once("close", () => {
        streams.delete(res);
        res.off("drain", onDrain);
      });
    },
    /** Ends the streams that have waited for their client since `stallMs` before `nowMs`; how many. */
    check(nowMs: number): number {
      let ended = 0;
      for (const [res, entry] of streams) {
        if (!res.writableNeedDrain) {
          entry.since = undefined;
          continue;
        }
        entry.since ??= nowMs;
        if (nowMs - entry.since < stallMs) continue;
        res.destroy();
        ended++;
      }
      return ended;
    },
  };
}

export type StallWatch = ReturnType<typeof createStallWatch>;

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
