import type { JsonObject, Message } from "@bufbuild/protobuf";
import { markUnknownProperty } from "../wire/unknown-properties.js";

/**
 * Body facts of the REST face that the typed request cannot express: a protobuf list cannot be
 * "missing" or "not a list", but the reference answers those with their own code. Keyed by
 * `<service>/<method>`; run on the JSON body before it is decoded. A quirk does not refuse the
 * request itself (the reference checks auth and other fields first): it takes the offending key
 * out of the body and returns a step that marks it on the decoded request (unknown-properties.ts),
 * for the handler to refuse in the reference's order.
 */
export const restBodyChecks: Record<string, (body: JsonObject) => ((request: Message) => void) | undefined> = {
  "kxm.hub.v1.SyncService/PushEvents": (body) => {
    if (Array.isArray(body.events)) return undefined;
    delete body.events;
    return (request) => markUnknownProperty(request, "events");
  },
};
