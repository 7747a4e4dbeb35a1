/** Connect binary transports for the benchmarks' load generators. */
import http from "node:http";
import type { Transport } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";

/**
 * A Connect binary transport; `close` drops its connections. HTTP/2: one h2c connection (its own
 * `Http2SessionManager`, so two transports never share a connection). HTTP/1.1: a keep-alive
 * pool of up to `sockets` connections.
 */
export function makeTransport(baseUrl: string, httpVersion: "2" | "1.1", sockets: number) {
  if (httpVersion === "2") {
    const sessionManager = new Http2SessionManager(baseUrl);
    const transport: Transport = createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true, sessionManager });
    return { transport, close: () => sessionManager.abort() };
  }
  const agent = new http.Agent({ keepAlive: true, maxSockets: sockets });
  const transport: Transport = createConnectTransport({
    baseUrl,
    httpVersion: "1.1",
    useBinaryFormat: true,
    nodeOptions: { agent },
  });
  return { transport, close: () => agent.destroy() };
}
