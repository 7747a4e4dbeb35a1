import http from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { create, createFileRegistry, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, file_google_protobuf_empty } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type ServiceImpl } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { createRateLimiter } from "../../src/auth/rate-limit.js";
import { createHttpHandler } from "../../src/server/http-handler.js";
import { createInProcessCaller } from "../../src/wire/in-process.js";
import { createRestFace } from "../../src/transcode/rest-face.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type LogEvent } from "../fixtures/hub.js";

/**
 * The last line of defence: an exception that escapes a request handler is logged with the
 * request id and answered 500 internal_error, and the process keeps serving.
 */

/** A service defined at runtime whose one method throws a plain (non-hub) error. */
const file = create(FileDescriptorProtoSchema, {
  name: "kxm/test/v1/boom.proto",
  package: "kxm.test.v1",
  syntax: "proto3",
  dependency: ["google/protobuf/empty.proto"],
  service: [{ name: "BoomService", method: [{ name: "Boom", inputType: ".google.protobuf.Empty", outputType: ".google.protobuf.Empty" }] }],
});
const BoomService = createFileRegistry(file, (n) => (n === "google/protobuf/empty.proto" ? file_google_protobuf_empty : undefined)).getService(
  "kxm.test.v1.BoomService",
) as DescService;
const boomImpl = {
  boom: () => {
    throw new TypeError("boom: a bug in a handler");
  },
} as unknown as Partial<ServiceImpl<DescService>>;

describe("last line of defence", () => {
  it("a handler that throws synchronously gets 500 internal_error with a request id; the server lives", async () => {
    const events: LogEvent[] = [];
    const observer = {
      log: (event: string, fields: Record<string, unknown>) => events.push({ event, fields }),
      count: () => {},
      call: () => {},
      stream: () => {},
    };
    const inProcess = createInProcessCaller(() => {}, [], new AbortController().signal);
    const handler = createHttpHandler({
      routes: () => {},
      interceptors: [],
      inProcess,
      wire: { mode: "fast", fastServed: 0 },
      readMaxBytes: 1 << 20,
      maxBodyBytes: 1 << 18,
      shutdownSignal: new AbortController().signal,
      corsOrigins: [],
      observer,
      // A bug in a route that throws before it returns a promise.
      ops: (req) => {
        if (req.url === "/throw") throw new TypeError("boom");
        return Promise.resolve(false);
      },
      rest: createRestFace({ routes: [], call: inProcess, limiter: createRateLimiter(false), clock: new FakeClock(), observer, maxBodyBytes: 1 << 18, shutdownSignal: new AbortController().signal, authorize: () => Promise.reject(new Error("no route, no call to authorize")) }),
    });
    const server = http.createServer(handler);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const res = await fetch(`${base}/throw`, { headers: { "x-request-id": "req-boom-1" } });
      expect(res.status).toBe(500);
      expect(await res.json()).toEqual({ error: "internal server error", code: "internal_error", requestId: "req-boom-1" });
      expect(events.find((e) => e.event === "internal_error")?.fields).toMatchObject({ requestId: "req-boom-1" });
      // Still serving.
      expect((await fetch(`${base}/nothing-here`)).status).toBe(404);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("an RPC handler that throws a plain error is internal, logged, and the hub lives", async () => {
    await using t = await startTestHub({ overrides: { extraServices: [{ service: BoomService, impl: boomImpl, auth: { kind: "public" } }] } });
    const client = createClient(BoomService, createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1" }));
    const e = await (client as unknown as { boom: (m: object) => Promise<unknown> }).boom({}).catch((x: unknown) => x);
    expect(e instanceof ConnectError && e.code).toBe(Code.Internal);
    expect(e instanceof ConnectError && e.rawMessage).toBe("internal server error");
    expect(t.events.some((x) => x.event === "internal_error" && String(x.fields.error).includes("boom"))).toBe(true);
    expect((await t.rest("/health")).status).toBe(200);
  });
});
