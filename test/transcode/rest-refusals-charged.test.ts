import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { expectRestError } from "../fixtures/rest.js";

/**
 * Every request counts against a budget (spec §1.6), also one the REST face refuses before the
 * call's rules run (a body or path it cannot take): it is charged to its address.
 */
const limited = { rateLimit: { windowMs: 60_000, maxRequests: 3 } } as never;

describe("requests the REST face refuses before the RPC interceptors are rate limited too", () => {
  it("malformed JSON bodies on a matched route count against the address and end in 429", async () => {
    await using t = await startTestHub({ config: limited });
    for (let i = 0; i < 3; i++) {
      const r = await t.rest("/v1/messages", { method: "POST", headers: { "content-type": "application/json" }, body: "{" });
      expect(r.status).toBe(400);
      expect(r.headers.get("x-ratelimit-limit")).toBe("3"); // hub: null
      await r.text();
    }
    const fourth = await t.rest("/v1/messages", { method: "POST", headers: { "content-type": "application/json" }, body: "{" });
    await expectRestError(fourth, 429, "rate_limited"); // hub: 400 invalid_json, forever
  });

  it("256 KiB bodies (413) are not free: the 4th in a window of 3 is 429", async () => {
    await using t = await startTestHub({ config: limited });
    const big = JSON.stringify({ target: "x", content: "x".repeat(300_000) });
    for (let i = 0; i < 3; i++) {
      const r = await t.rest("/v1/messages", { method: "POST", headers: { "content-type": "application/json" }, body: big });
      expect(r.status).toBe(413);
      await r.text();
    }
    const fourth = await t.rest("/v1/messages", { method: "POST", headers: { "content-type": "application/json" }, body: big });
    await expectRestError(fourth, 429, "rate_limited"); // hub: 413 payload_too_large, forever
  });

  it("a malformed path escape counts too", async () => {
    await using t = await startTestHub({ config: limited });
    for (let i = 0; i < 3; i++) await (await t.rest("/v1/messages/%zz")).text();
    await expectRestError(await t.rest("/v1/messages/%zz"), 429, "rate_limited"); // hub: 400 protocol_error
  });
});
