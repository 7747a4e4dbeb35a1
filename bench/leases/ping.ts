/**
 * A no-op service defined at runtime (no .proto file, no generated code):
 *   package kxm.bench.v1;
 *   service PingService { rpc Ping(google.protobuf.Empty) returns (google.protobuf.Empty); }
 * Served beside the hub's own services through `overrides.extraServices`, it measures the RPC
 * stack (HTTP, Connect framing, interceptors, protobuf) without touching the store.
 */
import { create, createFileRegistry, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, file_google_protobuf_empty } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";

const pingFile = create(FileDescriptorProtoSchema, {
  name: "kxm/bench/v1/ping.proto",
  package: "kxm.bench.v1",
  syntax: "proto3",
  dependency: ["google/protobuf/empty.proto"],
  service: [
    {
      name: "PingService",
      method: [{ name: "Ping", inputType: ".google.protobuf.Empty", outputType: ".google.protobuf.Empty" }],
    },
  ],
});

const registry = createFileRegistry(pingFile, (name) =>
  name === "google/protobuf/empty.proto" ? file_google_protobuf_empty : undefined,
);

const found = registry.getService("kxm.bench.v1.PingService");
if (!found) throw new Error("PingService missing from the runtime registry");
export const PingService: DescService = found;

/** Answers every Ping with an empty message. */
export const pingImpl = { ping: () => ({}) } as unknown as Partial<ServiceImpl<DescService>>;
