import type { ServerResponse } from "node:http";
import { drained } from "../http/body.js";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";

/**
 * The MCP SDK's transport speaks the web's Request and Response; the hub's port speaks Node's
 * HTTP/1.1 and HTTP/2 compatibility objects. This is the bridge, both ways. The body is never part
 * of the Request: the face reads it (with the hub's size limit) and hands it over parsed.
 */

/** The request's method, URL and headers as a web Request (HTTP/2 pseudo-headers left out). */
export function webRequestOf(req: Req, signal: AbortSignal): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith(":") || value === undefined) continue;
    headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  const authority = req.headers.host ?? req.headers[":authority"];
  const scheme = (req.socket as { encrypted?: boolean } | undefined)?.encrypted ? "https" : "http";
  return new Request(`${scheme}://${typeof authority === "string" && authority !== "" ? authority : "hub.internal"}${req.url ?? "/"}`, {
    method: req.method ?? "GET",
    headers,
    signal,
  });
}

/** Hop-by-hop headers: meaningless across the bridge, and refused by HTTP/2. */
const hopByHop = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection"]);

/**
 * Writes a web Response to the Node response: its status and headers, then its body as it
 * comes (an SSE stream stays open until the transport ends it or the client goes away, which
 * cancels the body).
 */
export async function writeWebResponse(res: Res, response: Response): Promise<void> {
  const head: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    if (!hopByHop.has(name)) head[name] = value;
  });
  res.writeHead(response.status, head);
  // An event stream's head goes out at once: a client waits for it before it counts the stream open.
  if (head["content-type"]?.startsWith("text/event-stream")) (res as ServerResponse).flushHeaders?.();
  if (!response.body) {
    res.end();
    return;
  }
  const reader = response.body.getReader();
  const cancel = () => void reader.cancel().catch(() => undefined);
  res.once("close", cancel);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!(res as ServerResponse).write(value)) await drained(res);
    }
    res.end();
  } catch {
    res.destroy();
  } finally {
    res.off("close", cancel);
  }
}

/**
 * The JSON-RPC code of a refusal for room (HTTP 503, `data.code` `resource_exhausted`: too many
 * sessions or 2026-07-28 clients, on the hub or for the project): a server-defined code (JSON-RPC's
 * -32000 to -32099), since the request is neither invalid (-32600) nor met by a fault of the hub
 * (-32603, which the face keeps for that: D35).
 */
export const noRoomCode = -32000;

/** A JSON-RPC error answer at the HTTP level (before any session, server or tool). */
export function rpcError(res: Res, status: number, code: number, message: string, data?: unknown, headers: Record<string, string> = {}, id: unknown = null) {
  const body = JSON.stringify({ jsonrpc: "2.0", id, error: { code, message, ...(data !== undefined && { data }) } });
  res.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), ...headers });
  res.end(body);
}
