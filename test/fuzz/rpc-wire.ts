// RPC requests written byte by byte for each protocol the hub serves, and their answers read
// back into one shape: ok, or an error with its Connect code and ErrorInfo.
import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromHttpStatus, endStreamFromJson, errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { ErrorInfoSchema } from "../../gen/ts/google/rpc/error_details_pb.js";
import type { RawRequest, RawResponse, Transport } from "./raw.js";

export interface RpcProtocol {
  name: string;
  transport: Transport;
  kind: "connect" | "grpc" | "grpc-web";
  codec: "proto" | "json";
}

/** Every wire of the RPC face (test/fixtures/clients.ts, plus Connect binary on both HTTP versions). */
export const rpcProtocols: readonly RpcProtocol[] = [
  { name: "connect-json (HTTP/1.1)", transport: "h1", kind: "connect", codec: "json" },
  { name: "connect-binary (HTTP/1.1)", transport: "h1", kind: "connect", codec: "proto" },
  { name: "connect-binary (HTTP/2)", transport: "h2", kind: "connect", codec: "proto" },
  { name: "grpc (h2c)", transport: "h2", kind: "grpc", codec: "proto" },
  { name: "grpc-web (HTTP/1.1)", transport: "h1", kind: "grpc-web", codec: "proto" },
];

/** How the payload is framed: honest by default; every knob makes it hostile. */
export interface Framing {
  /** Envelope flags byte (0x01 = compressed). */
  flags?: number;
  /** The length the envelope claims, when it is not the payload's. */
  declaredLength?: number;
  /** Bytes after the (first) envelope. */
  trailing?: Uint8Array;
  /** No envelope at all: the payload is the whole body. */
  bare?: boolean;
  /** grpc-encoding / connect-content-encoding / content-encoding. */
  encoding?: string;
}

export const isStreaming = (m: DescMethod) => m.methodKind !== "unary";
export const rpcPath = (m: DescMethod) => `/${m.parent.typeName}/${m.name}`;

export function envelope(flags: number, payload: Uint8Array, declaredLength = payload.byteLength): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(declaredLength >>> 0, 1);
  return Buffer.concat([head, payload]);
}

/** The raw request of one call: method, protocol, payload (already encoded) and framing. */
export function rpcRequest(p: RpcProtocol, m: DescMethod, payload: Uint8Array, framing: Framing, headers: [string, string][]): RawRequest {
  const stream = isStreaming(m);
  const enveloped = p.kind !== "connect" || stream;
  const body = !enveloped || framing.bare
    ? Buffer.from(payload)
    : Buffer.concat([envelope(framing.flags ?? 0, payload, framing.declaredLength), Buffer.from(framing.trailing ?? [])]);
  const h: [string, string][] = [];
  if (p.kind === "connect") {
    h.push(["content-type", `application/${stream ? "connect+" : ""}${p.codec}`], ["connect-protocol-version", "1"]);
    if (framing.encoding !== undefined) h.push([stream ? "connect-content-encoding" : "content-encoding", framing.encoding]);
  } else if (p.kind === "grpc") {
    h.push(["content-type", "application/grpc"], ["te", "trailers"]);
    if (framing.encoding !== undefined) h.push(["grpc-encoding", framing.encoding]);
  } else {
    h.push(["content-type", "application/grpc-web+proto"], ["x-grpc-web", "1"]);
    if (framing.encoding !== undefined) h.push(["grpc-encoding", framing.encoding]);
  }
  return { method: "POST", path: rpcPath(m), headers: [...h, ...headers], body, stream };
}

export interface RpcAnswer {
  kind: "ok" | "error" | "no-answer" | "unreadable";
  /** Connect code in snake_case ("invalid_argument"), for errors. */
  code?: string;
  reason?: string;
  domain?: string;
  message?: string;
  http: number;
}

const snake = (c: Code) => Code[c].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();

function fromError(err: ConnectError, http: number): RpcAnswer {
  const info = err.findDetails(ErrorInfoSchema)[0];
  return { kind: "error", code: snake(err.code), reason: info?.reason, domain: info?.domain, message: err.rawMessage, http };
}

/** Splits an enveloped body into its frames (a partial last frame is left out). */
function frames(body: Buffer): { flags: number; data: Buffer }[] {
  const out: { flags: number; data: Buffer }[] = [];
  let at = 0;
  while (body.length >= at + 5) {
    const len = body.readUInt32BE(at + 1);
    if (body.length < at + 5 + len) break;
    out.push({ flags: body[at], data: body.subarray(at + 5, at + 5 + len) });
    at += 5 + len;
  }
  return out;
}

/** The error (or success) a raw answer carries, read the way a client of `p` would. */
export function readAnswer(p: RpcProtocol, m: DescMethod, r: RawResponse): RpcAnswer {
  if (r.outcome !== "answered") return { kind: "no-answer", http: r.status };
  const http = r.status;
  if (r.streamOpened) return { kind: "ok", http };
  const headers = new Headers(r.headers);
  try {
    if (p.kind === "connect") {
      if (http !== 200) {
        const fallback = new ConnectError(`HTTP ${http}`, codeFromHttpStatus(http));
        return fromError(errorFromJsonBytes(r.body, headers, fallback), http);
      }
      if (!isStreaming(m)) return { kind: "ok", http };
      const end = frames(r.body).find((f) => f.flags & 0x02);
      if (!end) return { kind: "unreadable", http, message: "stream without end-stream message" };
      const { error } = endStreamFromJson(end.data);
      return error ? fromError(error, http) : { kind: "ok", http };
    }
    let trailers = new Headers(r.trailers);
    if (p.kind === "grpc-web") {
      const t = frames(r.body).find((f) => f.flags & 0x80);
      if (t) trailers = parseGrpcWebTrailer(t.data);
    }
    const status = trailers.get("grpc-status") ?? headers.get("grpc-status");
    if (status === null) return { kind: "unreadable", http, message: `no grpc-status (HTTP ${http})` };
    const err = findTrailerError(trailers.has("grpc-status") ? trailers : headers);
    if (err) return fromError(err, http);
    return { kind: "ok", http };
  } catch (e) {
    return { kind: "unreadable", http, message: String(e) };
  }
}

function parseGrpcWebTrailer(data: Buffer): Headers {
  const h = new Headers();
  for (const line of data.toString("utf8").split("\r\n")) {
    const i = line.indexOf(":");
    if (i > 0) h.append(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim());
  }
  return h;
}
