// Differential: every generated RPC request is sent twice to the same hub, once with the wire
// switch on "fast" (plain Connect calls served by src/wire/unary.ts and stream.ts) and once on
// "connect" (every call through connect's own handlers), and both answers must be the same HTTP
// message: the status, every header but `date` and the message framing (content-length,
// transfer-encoding, connection), the body byte for byte and the trailers. That is the wire
// layer's contract (src/wire/adapter.ts).
//
// The requests: each method's valid sample on every wire, and the hostile cases of
// rpc.fuzz.test.ts. A call that changed the store cannot be repeated to the same answer (a
// second registration of a name is refused), so an accepted call that writes is not compared;
// every other answer must match exactly: refusals of every kind, and the answers of reads, which
// go through the same encoding of an answer as a write's.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fc, test } from "@fast-check/vitest";
import type { DescMethod } from "@bufbuild/protobuf";
import { describeRequest } from "./checks.js";
import { params, report, runBatch, startWorld, stopWorld, timeoutFor, type Checked, type Violation, type World } from "./harness.js";
import { comparable, send, type RawRequest, type RawResponse } from "./raw.js";
import { jsonSample, materializeRpc, rpcCase, rpcMethods } from "./rpc-generators.js";
import { rpcProtocols, rpcRequest, type RpcProtocol } from "./rpc-wire.js";
import { credHeaders, credsKinds, sampleBinary, type Creds } from "./samples.js";

let w: World;
const counts = { compared: 0, writesNotCompared: 0 };
beforeAll(async () => {
  w = await startWorld();
}, 60_000);
afterAll(async () => {
  report("differential");
  console.log(`differential: ${counts.compared} answers compared byte for byte, ${counts.writesNotCompared} accepted writes not compared`);
  await stopWorld(w);
});

const readOnly = /^(Get|List|Read|Watch|Check|Subscribe|ServerReflectionInfo)/;

/** Sends `req` with the switch on each setting; the answers must match. */
async function bothWays(req: RawRequest, p: RpcProtocol, m: DescMethod, label: string): Promise<Checked> {
  const sameId: RawRequest = { ...req, headers: [...req.headers, ["x-request-id", "req-differential"]] };
  const wire = w.t.hub.wire;
  let fast: RawResponse, viaConnect: RawResponse;
  try {
    wire.mode = "fast";
    fast = await send(p.transport, w.port, sameId);
    wire.mode = "connect";
    viaConnect = await send(p.transport, w.port, sameId);
  } finally {
    wire.mode = "fast";
  }
  const accepted = fast.status === 200 && !/error|grpc-status: [1-9]/.test(JSON.stringify({ ...fast.headers, ...fast.trailers }));
  const violations: Violation[] = [];
  const a = comparable(fast);
  const b = comparable(viaConnect);
  const writes = accepted && !readOnly.test(m.name);
  if (writes) counts.writesNotCompared++;
  else counts.compared++;
  if (!writes && JSON.stringify(a) !== JSON.stringify(b)) {
    violations.push({
      signature: `${m.name} over ${p.name}: the fast path and connect answer differently`,
      detail: `${label}\nfast:    ${JSON.stringify(a).slice(0, 700)}\nconnect: ${JSON.stringify(b).slice(0, 700)}`,
    });
  }
  return { violations, accepted: accepted || viaConnect.status === 200 };
}

/** A method's valid sample on one wire, with one kind of credentials. */
interface ValidCase {
  method: string;
  protocol: string;
  creds: Creds;
}
const methodByPath = new Map(rpcMethods.map((m) => [`${m.parent.typeName}/${m.name}`, m]));
const protocolByName = new Map(rpcProtocols.map((p) => [p.name, p]));
const validCase: fc.Arbitrary<ValidCase> = fc.record({
  method: fc.constantFrom(...methodByPath.keys()),
  protocol: fc.constantFrom(...rpcProtocols.map((p) => p.name)),
  creds: fc.constantFrom(...credsKinds),
});

async function valid(c: ValidCase): Promise<Checked> {
  const m = methodByPath.get(c.method)!;
  const p = protocolByName.get(c.protocol)!;
  const payload = p.codec === "proto" ? sampleBinary(m, w) : Buffer.from(jsonSample(m, w));
  const req = rpcRequest(p, m, payload, {}, credHeaders(c.creds, w));
  return bothWays(req, p, m, `${c.method} ${describeRequest(p.transport, req)}`);
}

describe("the wire layer answers as connect does, byte for byte", () => {
  test.prop([fc.array(validCase, { minLength: 1, maxLength: 6 })], params(60))(
    "valid calls of every method on every wire",
    async (cases) => {
      await runBatch(w, cases, valid);
    },
    timeoutFor(60),
  );

  test.prop([fc.array(rpcCase, { minLength: 1, maxLength: 6 })], params(120))(
    "hostile calls of every method on every wire",
    async (cases) => {
      await runBatch(w, cases, async (c) => {
        const { req, protocol, method } = materializeRpc(c, w);
        return bothWays(req, protocol, method, `${c.method} ${describeRequest(protocol.transport, req)}`);
      });
    },
    timeoutFor(120),
  );

  it("compares two paths: the switch decides which one serves a plain Connect call", async () => {
    const m = methodByPath.get("kxm.hub.v1.LeaseService/GetLease")!;
    const wire = w.t.hub.wire;
    for (const p of rpcProtocols) {
      const headers: [string, string][] = [...credHeaders("agentA", w), ["x-request-id", "req-differential"]];
      const req = rpcRequest(p, m, p.codec === "proto" ? sampleBinary(m, w) : Buffer.from(jsonSample(m, w)), {}, headers);
      const before = wire.fastServed;
      const fast = await send(p.transport, w.port, req);
      expect(wire.fastServed - before, p.name).toBe(p.kind === "connect" ? 1 : 0);
      wire.mode = "connect";
      const viaConnect = await send(p.transport, w.port, req).finally(() => (wire.mode = "fast"));
      expect(wire.fastServed - before, p.name).toBe(p.kind === "connect" ? 1 : 0);
      expect(fast.status, p.name).toBe(200);
      expect(comparable(fast), p.name).toEqual(comparable(viaConnect));
    }
  });
});
