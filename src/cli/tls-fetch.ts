import https from "node:https";
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { hasTls, type HubTls } from "./tls-client.js";

/**
 * fetch toward the hub with the command's TLS settings. Node's fetch takes no CA or client
 * certificate of its own (only a dispatcher of the undici package), so with a TLS setting a call
 * to an `https://` URL goes through node:https, whose options are Node's tls.connect options, the
 * same the client library hands its transports: one way to give TLS to every call. HTTP/1.1 on a
 * keep-alive agent (its idle sockets keep no process alive); the response body streams (the MCP
 * bridge's event streams); an abort ends the request and its body. Enough of fetch for the hub's
 * REST face and the MCP SDK's transport: string or byte bodies, no redirects followed.
 */
export function hubFetch(t: HubTls | undefined): typeof fetch {
  if (!hasTls(t)) return fetch;
  let f = made.get(t);
  if (!f) made.set(t, (f = tlsFetch(t)));
  return f;
}

/** One fetch (one agent, its connections) per TLS setting. */
const made = new WeakMap<HubTls, typeof fetch>();

function tlsFetch(t: HubTls): typeof fetch {
  const agent = new https.Agent({ keepAlive: true, ca: t.ca, cert: t.cert, key: t.key });
  return (async (input: string | URL | Request, init: RequestInit = {}) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.protocol !== "https:") return fetch(input, init);
    const body = bodyOf(init.body);
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    if (body !== undefined) headers["content-length"] = String(body.byteLength);
    const signal = init.signal ?? undefined;
    signal?.throwIfAborted();
    return new Promise<Response>((resolve, reject) => {
      const req = https.request(url, { method: init.method ?? "GET", headers, agent, signal }, (res) => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) for (const one of [v ?? []].flat()) h.append(k, one);
        const status = res.statusCode ?? 0;
        const empty = status === 204 || status === 304 || req.method === "HEAD";
        if (empty) res.resume();
        const stream = empty ? null : (Readable.toWeb(res) as WebReadableStream as ReadableStream<Uint8Array>);
        resolve(new Response(stream, { status, statusText: res.statusMessage, headers: h }));
      });
      // As fetch: an abort rejects with the signal's reason, anything else is "fetch failed" with the cause.
      req.on("error", (e) => reject(signal?.aborted ? signal.reason : new TypeError("fetch failed", { cause: e })));
      req.end(body);
    });
  }) as typeof fetch;
}

function bodyOf(body: RequestInit["body"]): Uint8Array | undefined {
  if (body === undefined || body === null) return undefined;
  if (typeof body === "string") return Buffer.from(body);
  if (body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  throw new TypeError("the hub's fetch sends string or byte bodies only");
}
