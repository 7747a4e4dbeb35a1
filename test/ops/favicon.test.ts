import { describe, expect, it } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { parseExposition, valueOf } from "../fixtures/prometheus.js";

/**
 * A browser asks every site for `/favicon.ico`. The hub has no icon and answers 204, never a
 * route_not_found that is logged and counted in kxm_errors_total on every visit (issue 20).
 */

const errorsTotal = async (t: TestHub) => valueOf(parseExposition(await (await t.rest("/metrics")).text()), "kxm_errors_total") ?? 0;

describe("/favicon.ico", () => {
  it("is answered 204, cacheable, without logging or counting an error", async () => {
    await using t = await startTestHub();
    const logged = t.events.length;
    for (const method of ["GET", "HEAD"]) {
      const res = await t.rest("/favicon.ico", { method });
      expect(res.status, method).toBe(204);
      expect(await res.text()).toBe("");
      expect(res.headers.get("cache-control")).toBe("public, max-age=86400");
    }
    expect(t.events.slice(logged)).toEqual([]);
    expect(t.counters.get("errors") ?? 0).toBe(0);
    expect(await errorsTotal(t)).toBe(0);
  });

  it("leaves other unknown paths refused and counted (the check above is not vacuous)", async () => {
    await using t = await startTestHub();
    const res = await t.rest("/favicon.png");
    expect(res.status).toBe(404);
    expect(((await res.json()) as { code: string }).code).toBe("route_not_found");
    expect(await errorsTotal(t)).toBe(1);
  });
});
