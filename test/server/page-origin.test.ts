import http from "node:http";
import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";

/**
 * A browser page may make some calls without asking first (a POST with no body, `fetch` in
 * `no-cors` mode), and on a loopback hub without an admin token every caller is trusted as admin:
 * any web page the operator opened could release leases and mint tokens. A request that names
 * a page in `Origin` is served only for an origin the hub lists or its own (D67).
 */
/** One request with no body, as a page may send it without asking first; its status and body. */
const request = (method: "GET" | "POST", url: string, headers: Record<string, string>) =>
  new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request(url, { method, headers }, (res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c.toString()));
      res.on("end", () => resolve({ status: res.statusCode!, body }));
    });
    req.on("error", reject);
    req.end();
  });
const post = (url: string, headers: Record<string, string>) => request("POST", url, headers);
const get = (url: string, host: string) => request("GET", url, { host });

describe("requests from browser pages", () => {
  it("refuses a page of another origin on every face, and nothing changes", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    await t.rest("/v1/leases/db/acquire", { json: { ttlMs: 60_000 }, headers: a.headers });
    const page = { origin: "https://evil.example" };
    for (const path of ["/v1/ops/projects/p/leases/db/release", "/v1/ops/projects/p/tokens", "/v1/agents/register"]) {
      const r = await post(`${t.baseUrl}${path}`, page);
      expect(r.status, path).toBe(403);
      expect(JSON.parse(r.body)).toMatchObject({ code: "origin_not_allowed", error: expect.stringContaining("https://evil.example") });
    }
    // An RPC path takes no request without the content type a page may send only after a preflight.
    expect((await post(`${t.baseUrl}/kxm.hub.v1.OpsService/CreateProjectToken`, page)).status).toBe(415);
    expect(await (await t.rest("/v1/leases/db?project=p")).json()).toMatchObject({ lease: { holderAgentName: "alpha" } });
    expect((await t.rest("/v1/agents", { headers: a.headers })).status).toBe(200); // no token was minted
    // A sandboxed page or a file says "null": not an origin the hub is.
    expect((await post(`${t.baseUrl}/v1/ops/projects/p/tokens`, { origin: "null" })).status).toBe(403);
  });

  it("serves the hub's own pages, and the origins it lists", async () => {
    await using t = await startTestHub({ config: { corsOrigins: ["https://app.example"] } });
    const own = new URL(t.baseUrl).origin;
    expect((await post(`${t.baseUrl}/v1/ops/projects/p/tokens`, { origin: own })).status).toBe(201);
    const listed = await post(`${t.baseUrl}/v1/ops/projects/q/tokens`, { origin: "https://app.example" });
    expect(listed.status).toBe(201);
    expect((await post(`${t.baseUrl}/v1/ops/projects/r/tokens`, { origin: "https://other.example" })).status).toBe(403);
  });
});

describe("requests addressed to a name that is not a loopback one", () => {
  it("are refused by a loopback hub without an admin token (a page that rebinds its name to 127.0.0.1 is of its own origin)", async () => {
    await using t = await startTestHub();
    const port = new URL(t.baseUrl).port;
    const rebound = await get(`${t.baseUrl}/v1/ops/snapshot`, `evil.example:${port}`);
    expect(rebound.status).toBe(403);
    expect(JSON.parse(rebound.body)).toMatchObject({ code: "origin_not_allowed", error: expect.stringContaining("KXM_AUTH_TOKEN") });
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `127.1.2.3:${port}`, `hub.localhost:${port}`, `[::1]:${port}`]) {
      expect((await get(`${t.baseUrl}/health`, host)).status, host).toBe(200);
    }
  });

  it("are served by a hub with an admin token, which trusts no caller for its address", async () => {
    await using t = await startTestHub({ config: { authToken: "admin" } });
    const port = new URL(t.baseUrl).port;
    expect((await get(`${t.baseUrl}/health`, `hub.example:${port}`)).status).toBe(200);
  });
});
