import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";

/**
 * Every error is counted once, as it is logged (spec §1.3, §1.7): the calls connect refuses while
 * it decodes them too, which no rule of the hub saw.
 */
describe("kxm_errors_total counts every error response", () => {
  it("counts Connect requests refused while connect decodes them, as it logs them", async () => {
    await using t = await startTestHub();
    const url = `${t.baseUrl}/kxm.hub.v1.PeerService/SendMessage`;
    const refused = [
      await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: "{" }),
      await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ content: "x".repeat(300_000) }) }),
    ];
    for (const r of refused) {
      expect(r.ok).toBe(false);
      await r.text();
    }
    const logged = t.events.filter((e) => e.event === "request_error").length;
    expect(logged).toBe(2);
    expect(t.counters.get("errors") ?? 0).toBe(2); // hub: 0
    const metrics = await (await t.rest("/metrics")).text();
    expect(metrics).toMatch(/^kxm_errors_total 2$/m); // hub: kxm_errors_total 0
  });
});
