import { expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";

/** `/health` and `/ready` answer HEAD as GET, without a body (RFC 9110 §9.3.2): probes that ask with HEAD were told 404. */
it("HEAD /health and /ready answer as GET does, without a body", async () => {
  await using t = await startTestHub();
  for (const p of ["/health", "/ready"]) {
    const get = await t.rest(p);
    await get.arrayBuffer();
    const head = await t.rest(p, { method: "HEAD" });
    expect({ path: p, status: head.status, body: (await head.arrayBuffer()).byteLength }).toEqual({ path: p, status: get.status, body: 0 });
  }
});
