import { describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import { errorTable, HubError, type HubCode } from "../../src/errors.js";
import { toConnectError } from "../../src/server/interceptors/errors.js";
import { restErrorFromConnect } from "../../src/transcode/rest-errors.js";
import { ErrorInfoSchema } from "../../gen/ts/google/rpc/error_details_pb.js";

const connectCodes: Record<string, Code> = {
  invalid_argument: Code.InvalidArgument,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  permission_denied: Code.PermissionDenied,
  resource_exhausted: Code.ResourceExhausted,
  failed_precondition: Code.FailedPrecondition,
  aborted: Code.Aborted,
  out_of_range: Code.OutOfRange,
  unimplemented: Code.Unimplemented,
  internal: Code.Internal,
  unauthenticated: Code.Unauthenticated,
  unavailable: Code.Unavailable,
};

describe("every error code through both faces", () => {
  for (const code of Object.keys(errorTable) as HubCode[]) {
    it(`maps ${code} to its Connect code and REST status`, () => {
      const row = errorTable[code];
      const err = toConnectError(new HubError(code, `because ${code}`, { metadata: { operation: "other", nextAction: "x" } }));
      expect(err.code).toBe(connectCodes[row.connect]);
      const info = err.findDetails(ErrorInfoSchema)[0];
      expect(info).toMatchObject({ reason: code.toUpperCase(), domain: "kxm-hub" });

      const rest = restErrorFromConnect(err, "req_1");
      expect(rest.status).toBe(row.rest);
      const extras = "restExtras" in row ? { operation: "other", nextAction: "x" } : {};
      expect(rest.body).toEqual({ error: `because ${code}`, code, requestId: "req_1", ...extras });
    });
  }
});
