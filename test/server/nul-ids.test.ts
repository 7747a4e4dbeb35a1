import { describe, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { expectAgentIdentityRefused, expectRestError } from "../fixtures/rest.js";

/**
 * Ids, names and page tokens with a NUL character (U+0000) in them, on every route that takes
 * one: PostgreSQL's text cannot hold a NUL, so each is refused as the caller's mistake before any
 * store is asked (400 protocol_error, or 401 for an agent id), never answered as the database's
 * error (500), on either store (the PostgreSQL pass runs this file too).
 */

const tokens = { p: "tok-p" };
const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64url");

describe("a NUL in what a request names", () => {
  it("is refused as protocol_error (400), or as an unknown agent (401), on every route that names something", async () => {
    await using t = await startTestHub({ config: { projectTokens: tokens, authToken: "admin-token" } });
    const a = await t.register("alpha", "p", tokens.p);
    const as = { ...a.headers, "content-type": "application/json" };
    const admin = { authorization: "Bearer admin-token", "content-type": "application/json" };
    const project = { authorization: `Bearer ${tokens.p}` };
    const call = (method: string, path: string, headers: Record<string, string>, body?: unknown) =>
      fetch(`${t.baseUrl}${path}`, { method, headers, ...(body !== undefined && { body: JSON.stringify(body) }) });
    const refused: [string, string, Record<string, string>, unknown?][] = [
      ["GET", `/v1/leases?pageToken=${b64("\0")}`, as],
      ["GET", `/v1/leases/a%00b`, as],
      ["POST", `/v1/leases/a%00b/check`, as, { fencingToken: 1 }],
      ["GET", `/v1/messages?pageToken=${b64("1:\0")}`, as],
      ["GET", `/v1/messages/msg%00x`, as],
      ["POST", `/v1/messages/msg%00x/ack`, as, {}],
      ["POST", `/v1/messages/msg%00x/reply`, as, { content: "hi" }],
      ["DELETE", `/v1/messages/msg%00x`, as],
      ["GET", `/v1/sync/runs/prj_abcdef/run_abcdef%00/cursor`, project],
      ["GET", `/v1/sync/runs/prj_abc%00def/run_abcdef/cursor`, project],
      ["GET", `/v1/ops/audit?pageToken=${b64("\0")}`, admin],
      ["DELETE", `/v1/ops/projects/p/tokens/tok%00x`, admin],
      ["DELETE", `/v1/ops/projects/p/agents/agt%00x`, admin],
      ["POST", `/v1/ops/projects/p/leases/a%00b/release`, admin, {}],
    ];
    for (const [method, path, headers, body] of refused) {
      await expectRestError(await call(method, path, headers, body), 400, "protocol_error");
    }
    // An agent id with a NUL names no agent: refused before any credential is looked at.
    for (const [method, path] of [["POST", "/v1/agents/agt%00x/heartbeat"], ["DELETE", "/v1/agents/agt%00x"]] as const) {
      await expectAgentIdentityRefused(await call(method, path, { "x-kxm-agent-key": "k", authorization: `Bearer ${tokens.p}` }));
    }
  });
});
