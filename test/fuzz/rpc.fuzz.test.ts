// Property: every method of every service (the hub's five, plus server reflection) on every RPC
// wire (Connect JSON, Connect binary over HTTP/1.1 and HTTP/2, gRPC over h2c, gRPC-Web) refuses
// malformed payloads and lying framing with a typed client error (never internal/unknown, never
// a 5xx, always an ErrorInfo from the error table in docs/api.md), stays up, and the batch changes nothing.
import { afterAll, beforeAll, describe } from "vitest";
import { fc, test } from "@fast-check/vitest";
import { checkRpc, describeRequest } from "./checks.js";
import { params, report, runBatch, startWorld, stopWorld, timeoutFor, type World } from "./harness.js";
import { send } from "./raw.js";
import { materializeRpc, rpcCase, rpcCaseFor, rpcPairs, type RpcCase } from "./rpc-generators.js";
import { readAnswer } from "./rpc-wire.js";

let w: World;
beforeAll(async () => {
  w = await startWorld();
}, 60_000);
afterAll(async () => {
  report("rpc");
  await stopWorld(w);
});

async function call(c: RpcCase) {
  const { req, expect, protocol, method } = materializeRpc(c, w);
  const res = await send(protocol.transport, w.port, req);
  const answer = readAnswer(protocol, method, res);
  const where = method.methodKind === "unary" ? "unary" : method.methodKind.replace("_", "-");
  return checkRpc(protocol, where, c.poison.kind, answer, res, expect, `${c.method} ${describeRequest(protocol.transport, req)}`);
}

describe("RPC face: hostile payloads and framing on every method and wire", () => {
  test.prop([fc.array(rpcCase, { minLength: 1, maxLength: 6 })], params(600))(
    "are refused with invalid_argument/PROTOCOL_ERROR (or the documented code), never internal, and change nothing",
    async (cases) => {
      await runBatch(w, cases, call);
    },
    timeoutFor(600),
  );
});

// Every (method, wire) pair on its own, whatever the sampling above picked.
describe.each(rpcPairs)("RPC $method over $protocol", (pair) => {
  test.prop([fc.array(rpcCaseFor(pair), { minLength: 1, maxLength: 4 })], params(2))(
    "refuses hostile calls with a typed error and changes nothing",
    async (cases) => {
      await runBatch(w, cases, call);
    },
    timeoutFor(2),
  );
});
