/**
 * The generated code the library is built on (gen/ts, from proto/ by `buf generate`). The
 * package build (scripts/build.mjs) ships a copy of gen/ts inside the package and points these
 * imports at it; the generated files themselves are never edited.
 */
export * from "../../../gen/ts/kxm/hub/v1/lease_pb.js";
export * from "../../../gen/ts/kxm/hub/v1/peer_pb.js";
export * from "../../../gen/ts/kxm/hub/v1/presence_pb.js";
export { ErrorInfoSchema } from "../../../gen/ts/google/rpc/error_details_pb.js";
export * from "../../../gen/ts/kxm/hub/v1/sync_pb.js";
export * from "../../../gen/ts/kxm/hub/v1/sync_event_pb.js";
