import { describe, expect, it } from "vitest";
import { jsonOf, startTestHub } from "../fixtures/hub.js";

describe("operations endpoints", () => {
  it("answers /health with the online agent count and /ready with the storage kind", async () => {
    await using t = await startTestHub();
    await t.register("alpha");
    await t.register("beta");
    const health = await t.rest("/health");
    expect(health.status).toBe(200);
    expect(await jsonOf(health)).toEqual({ ok: true, agents: 2 });
    const ready = await t.rest("/ready");
    // In-memory SQLite, or PostgreSQL when the run is on it (KXM_TEST_STORE=postgres).
    expect(await jsonOf(ready)).toEqual({ ok: true, storage: process.env.KXM_TEST_STORE === "postgres" ? "postgres" : "memory" });
  });

  it("reports sqlite storage for a file database", async () => {
    await using t = await startTestHub({ file: true });
    expect(await (await t.rest("/ready")).json()).toEqual({ ok: true, storage: "sqlite" });
  });

  it("exports the reference metric names with counts that follow the calls", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    await t.rest("/v1/leases/x/acquire", { method: "POST", headers: a.headers });
    await t.rest("/v1/leases/x/acquire", { method: "POST", headers: b.headers });
    const res = await t.rest("/metrics");
    expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const text = await res.text();
    const value = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(text)?.[1]);
    expect(value("kxm_online_agents")).toBe(2);
    expect(value("kxm_registrations_total")).toBe(2);
    expect(value("kxm_leases_granted_total")).toBe(1);
    expect(value("kxm_leases_refused_total")).toBe(1);
    expect(value("kxm_errors_total")).toBe(1);
    expect(value("kxm_requests_total")).toBe(5);
    expect(text).toMatch(/^# TYPE kxm_leases_released_total counter$/m);
    expect(text.endsWith("\n")).toBe(true);
  });

  it("logs lease events with the reference's names", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    await t.rest("/v1/leases/x/acquire", { method: "POST", headers: a.headers });
    await t.rest("/v1/leases/x/acquire", { method: "POST", headers: b.headers });
    await t.rest("/v1/leases/x/release", { method: "POST", headers: a.headers, json: { fencingToken: 1 } });
    const names = t.events.map((e) => e.event);
    expect(names).toEqual(
      expect.arrayContaining(["agent_registered", "lease_acquired", "lease_denied", "lease_released"]),
    );
    expect(t.events.find((e) => e.event === "lease_denied")?.fields).toMatchObject({ reason: "held", heldBy: "alpha" });
  });

  it("echoes a valid x-request-id and replaces an invalid one", async () => {
    await using t = await startTestHub();
    const echoed = await t.rest("/v1/nowhere", { headers: { "x-request-id": "abc.DEF-1_2" } });
    expect(echoed.headers.get("x-request-id")).toBe("abc.DEF-1_2");
    expect((await jsonOf(echoed)).requestId).toBe("abc.DEF-1_2");
    const replaced = await t.rest("/v1/nowhere", { headers: { "x-request-id": "bad id!" } });
    expect(replaced.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
  });

  describe("CORS", () => {
    const preflight = (origin: string) => ({
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "content-type" },
    });

    it("answers a preflight from an allowed origin and marks responses", async () => {
      await using t = await startTestHub({ config: { corsOrigins: ["http://app.example"] } });
      const res = await t.rest("/kxm.hub.v1.LeaseService/AcquireLease", preflight("http://app.example"));
      expect(res.status).toBe(204);
      expect(res.headers.get("access-control-allow-origin")).toBe("http://app.example");
      expect(res.headers.get("access-control-allow-headers")).toMatch(/X-Kxm-Agent-Key/);
      const get = await t.rest("/health", { headers: { origin: "http://app.example" } });
      expect(get.headers.get("access-control-allow-origin")).toBe("http://app.example");
    });

    it("refuses a preflight from another origin", async () => {
      await using t = await startTestHub({ config: { corsOrigins: ["http://app.example"] } });
      const res = await t.rest("/kxm.hub.v1.LeaseService/AcquireLease", preflight("http://evil.example"));
      expect(res.status).toBe(403);
      expect(res.headers.get("access-control-allow-origin")).toBeNull();
    });
  });
});
