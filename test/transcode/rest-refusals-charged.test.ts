import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { expectRestError } from "../fixtures/rest.js";

/**
 * Every request counts against a budget (spec §1.6), also one the REST face refuses before the
 * call runs (a body or path it cannot take): once its caller is authenticated, against the
 * caller's budget; a path that names no route, against its address.
 */
const limited = { rateLimit: { windowMs: 60_000, maxRequests: 3 } } as never;

describe("requests the REST face refuses before the call runs are rate limited too", () => {
  it("malformed JSON bodies of an agent count against its budget and end in 429", async () => {
    await using t = await startTestHub({ config: limited });
    const a = await t.register("alpha");
    const malformed = () => t.rest("/v1/messages", { method: "POST", headers: { ...a.headers, "content-type": "application/json" }, body: "{" });
    for (let i = 0; i < 3; i++) {
      const r = await malformed();
      expect(r.status).toBe(400);
      expect(r.headers.get("x-ratelimit-limit")).toBe("3");
      expect(r.headers.get("x-ratelimit-remaining")).toBe(String(2 - i));
      await r.text();
    }
    await expectRestError(await malformed(), 429, "rate_limited");
  });

  it("256 KiB bodies (413) are not free: the 4th in a window of 3 is 429", async () => {
    await using t = await startTestHub({ config: limited });
    const a = await t.register("alpha");
    const big = JSON.stringify({ target: "x", content: "x".repeat(300_000) });
    const tooLarge = () => t.rest("/v1/messages", { method: "POST", headers: { ...a.headers, "content-type": "application/json" }, body: big });
    for (let i = 0; i < 3; i++) {
      const r = await tooLarge();
      expect(r.status).toBe(413);
      await r.text();
    }
    await expectRestError(await tooLarge(), 429, "rate_limited");
  });

  it("a malformed path escape counts too, against the address", async () => {
    await using t = await startTestHub({ config: limited });
    for (let i = 0; i < 3; i++) await (await t.rest("/v1/messages/%zz")).text();
    await expectRestError(await t.rest("/v1/messages/%zz"), 429, "rate_limited");
  });
});
