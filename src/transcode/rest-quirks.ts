import type { JsonObject } from "@bufbuild/protobuf";
import { errors } from "../errors.js";

/**
 * Body checks of the REST face that the typed request cannot express: a protobuf list cannot be
 * "missing" or "not a list", but the reference answers those with their own code. Keyed by
 * `<service>/<method>`; run on the JSON body before it is decoded.
 */
export const restBodyChecks: Record<string, (body: JsonObject) => void> = {
  "kxm.hub.v1.SyncService/PushEvents": (body) => {
    if (!Array.isArray(body.events)) throw errors.invalidSyncBatch();
  },
};
