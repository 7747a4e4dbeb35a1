import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";

/** A request as Node hands it to the one port's handler: HTTP/1.1 or HTTP/2 (with or without TLS). */
export type NodeRequest = IncomingMessage | Http2ServerRequest;
/**
 * Its response. The two kinds' `writeHead` overloads differ (@types/node 24), so a union of them
 * is not callable; the form both take is stated once here.
 */
export type NodeResponse = (ServerResponse | Http2ServerResponse) & {
  writeHead(statusCode: number, headers?: OutgoingHttpHeaders): unknown;
};
