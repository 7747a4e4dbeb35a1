import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startTestHub } from "../fixtures/hub.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ServerReflection, ServerReflectionRequestSchema } from "../../gen/ts/grpc/reflection/v1/reflection_pb.js";

/**
 * gRPC server reflection is a bidirectional stream: a client such as `buf curl` or grpcurl
 * keeps its request stream open while it reads each answer. The hub must answer a request
 * before the client's stream ends (nothing may read the whole request stream first).
 */
describe("gRPC server reflection", () => {
  it("answers list_services while the client's request stream is still open", async () => {
    await using t = await startTestHub();
    const client = createClient(ServerReflection, createGrpcTransport({ baseUrl: t.baseUrl }));
    let answered!: () => void;
    const read = new Promise<void>((resolve) => (answered = resolve));
    async function* requests(): AsyncGenerator<MessageInitShape<typeof ServerReflectionRequestSchema>> {
      yield { host: "", messageRequest: { case: "listServices", value: "" } };
      await read; // the stream stays open until the answer has come
    }
    const names: string[] = [];
    // A deadline, so that a hub that waits for the end of the request stream fails the test with
    // deadline_exceeded instead of hanging it.
    for await (const res of client.serverReflectionInfo(requests(), { timeoutMs: 10_000 })) {
      if (res.messageResponse.case === "listServicesResponse") names.push(...res.messageResponse.value.service.map((s) => s.name));
      answered();
    }
    expect(names).toEqual(expect.arrayContaining(["kxm.hub.v1.LeaseService", "kxm.hub.v1.PresenceService", "grpc.reflection.v1.ServerReflection"]));
  });
});
