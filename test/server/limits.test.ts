import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/ts/google/rpc/error_details_pb.js";
import { hubClients, protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";

describe("request size limit on the RPC face", () => {
  for (const p of protocols) {
    it(`refuses a message over 256 KiB with PAYLOAD_TOO_LARGE over ${p.name}`, async () => {
      await using t = await startTestHub();
      const a = await t.register("alpha");
      const c = hubClients(p.make(t.baseUrl, [withHeaders(a.headers)]));
      const err = ConnectError.from(await c.leases.acquireLease({ name: "x".repeat(300_000) }).catch((e: unknown) => e));
      expect(err.code).toBe(Code.ResourceExhausted);
      expect(err.findDetails(ErrorInfoSchema)[0]?.reason).toBe("PAYLOAD_TOO_LARGE");
      expect((await t.rest("/v1/leases", { headers: a.headers }).then((r) => r.json())) as unknown).toEqual({
        leases: [],
        nextPageToken: "",
      });
    });
  }
});
