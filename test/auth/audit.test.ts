import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { backupTo, restoreFrom } from "../../src/store/sqlite/backup.js";
import { startTestHub, jsonOf, type TestHub } from "../fixtures/hub.js";
import { eventually } from "../fixtures/streams.js";
import { syncEvent } from "../sync/fixtures.js";

/**
 * The audit trail (OpsService.ListAuditEvents, `GET /v1/ops/audit`): token decisions, security
 * alerts (sync conflicts, bursts of refused authentication, bounded), restores; admin only,
 * paged, filtered by project.
 */

const ADMIN = "tok-admin-audit";
const admin = { authorization: `Bearer ${ADMIN}` };

let hubs: TestHub[] = [];
afterEach(async () => {
  await Promise.all(hubs.map((h) => h.close()));
  hubs = [];
});

async function hub(options: Parameters<typeof startTestHub>[0] = {}): Promise<TestHub> {
  const t = await startTestHub({ ...options, config: { authToken: ADMIN, ...options.config } });
  hubs.push(t);
  return t;
}

interface AuditJson {
  seq: string;
  at: string;
  project: string;
  kind: string;
  detail: Record<string, string>;
}

const audit = async (t: TestHub, query = ""): Promise<{ events: AuditJson[]; nextPageToken?: string }> => {
  const res = await t.rest(`/v1/ops/audit${query}`, { headers: admin });
  expect(res.status).toBe(200);
  return res.json() as Promise<{ events: AuditJson[]; nextPageToken?: string }>;
};

describe("the audit trail", () => {
  it("lists token decisions newest first, by page and by project, to the admin only", async () => {
    const t = await hub();
    const made = await jsonOf(await t.rest("/v1/ops/projects/p/tokens", { json: { scope: "read", label: "guard" }, headers: admin }));
    await t.rest("/v1/ops/projects/q/tokens", { json: {}, headers: admin });
    await t.rest(`/v1/ops/projects/p/tokens/${made.token.tokenId}`, { method: "DELETE", headers: admin });

    const all = await audit(t);
    expect(all.events.map((e) => `${e.kind} ${e.project}`)).toEqual(["token_revoked p", "token_created q", "token_created p"]);
    expect(all.events[2]!.detail).toMatchObject({ tokenId: made.token.tokenId, scope: "read", label: "guard" });
    expect(JSON.stringify(all)).not.toContain(made.secret);

    const first = await audit(t, "?pageSize=2");
    expect(first.events).toHaveLength(2);
    const rest = await audit(t, `?pageSize=2&pageToken=${first.nextPageToken}`);
    expect(rest.events.map((e) => e.kind)).toEqual(["token_created"]);
    expect(rest.nextPageToken ?? "").toBe("");
    expect((await audit(t, "?project=q")).events.map((e) => e.kind)).toEqual(["token_created"]);

    const refused = async (init: Parameters<TestHub["rest"]>[1], q = "") => {
      const res = await t.rest(`/v1/ops/audit${q}`, init);
      return `${res.status} ${(await jsonOf(res)).code}`;
    };
    expect(await refused({ headers: {} })).toBe("401 invalid_auth");
    expect(await refused({ headers: { authorization: `Bearer ${made.secret}` } })).toBe("401 invalid_auth");
    expect(await refused({ headers: admin }, "?pageToken=abc")).toBe("400 protocol_error");
    expect(await refused({ headers: admin }, "?pageSize=1001")).toBe("400 protocol_error");
  });

  it("keeps a sync conflict as a security alert", async () => {
    const t = await hub();
    const headers = admin;
    const push = (events: unknown[]) => t.rest("/v1/sync/events", { json: { project: "p", runtimeId: "rtm_home0001", events }, headers });
    const e1 = syncEvent({ homeRuntimeId: "rtm_home0001", sequence: 1 });
    expect((await push([e1])).status).toBe(200);
    const changed = syncEvent({ homeRuntimeId: "rtm_home0001", sequence: 1, sourceEventId: "evt_other0001" });
    const answer = await jsonOf(await push([changed]));
    expect(answer.results[0].outcome).toBe("conflict");
    await eventually(async () => (await audit(t)).events.length === 1, "the alert stored");
    const [entry] = (await audit(t)).events;
    expect(entry).toMatchObject({ kind: "sync_conflict", project: "p", detail: { alert: "sync_sequence_conflict", reason: "sequence_reused" } });
  });

  it("names the stored hash of a reused sequence to the project that stored it, never to another project", async () => {
    const t = await hub({ config: { projectTokens: { p: "tok-p", q: "tok-q" } } });
    const push = (project: "p" | "q", events: unknown[]) =>
      t.rest("/v1/sync/events", { json: { project, runtimeId: "rtm_home0001", events }, headers: { authorization: `Bearer tok-${project}` } });
    const e1 = syncEvent({ homeRuntimeId: "rtm_home0001", sequence: 1 });
    const changed = syncEvent({ homeRuntimeId: "rtm_home0001", sequence: 1, sourceEventId: "evt_other0001" });
    expect((await push("p", [e1])).status).toBe(200);
    expect((await jsonOf(await push("p", [changed]))).results[0].code).toBe("sync_sequence_reused");
    // q pushes under p's key: p's very content, and other content
    expect((await jsonOf(await push("q", [e1, changed]))).results.map((r: { code: string }) => r.code)).toEqual(["sync_sequence_reused", "sync_sequence_reused"]);
    await eventually(async () => (await audit(t)).events.length === 3, "the alerts stored");
    const [own] = (await audit(t, "?project=p")).events;
    expect(own!.detail).toMatchObject({ reason: "sequence_reused", existingHash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/) });
    expect(own!.detail.existingHash).not.toBe(own!.detail.presentedHash);
    const other = (await audit(t, "?project=q")).events;
    expect(other).toHaveLength(2);
    for (const entry of other) {
      expect(entry).toMatchObject({ kind: "sync_conflict", project: "q", detail: { reason: "sequence_reused" } });
      expect(entry.detail).not.toHaveProperty("existingHash");
    }
    // and the log lines alike
    const logged = t.events.filter((e) => e.event === "security_alert").map((e) => e.fields);
    expect(logged.map((f) => [f.project, "existingHash" in f])).toEqual([["p", true], ["q", false], ["q", false]]);
  });

  it("keeps one alert per address and minute for a burst of refused authentication", async () => {
    const t = await hub();
    const bad = () => t.rest("/v1/agents/register", { json: { name: "x", project: "p" }, headers: { authorization: "Bearer wrong" } });
    for (let i = 0; i < 19; i++) expect((await bad()).status).toBe(401);
    expect((await audit(t)).events).toEqual([]);
    for (let i = 0; i < 30; i++) await bad();
    await eventually(async () => (await audit(t)).events.length > 0, "the alert stored");
    const events = (await audit(t)).events;
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ kind: "auth_refusals", project: "", detail: { refusals: "20", lastCode: "invalid_auth" } });
    expect(events[0]!.detail.remoteAddress).toMatch(/127\.0\.0\.1/);
    t.clock.advance(60_000);
    for (let i = 0; i < 20; i++) await bad();
    await eventually(async () => (await audit(t)).events.length === 2, "a second alert, the next minute");
  });

  it("counts refused admin tokens at /metrics and refused project tokens at an MCP initialize toward the alert, as on every other face", async () => {
    const t = await hub({ config: { projectTokens: { p: "tok-p" } } });
    for (let i = 0; i < 20; i++) expect((await t.rest("/metrics", { headers: { authorization: `Bearer guess-${i}` } })).status).toBe(401);
    await eventually(async () => (await audit(t)).events.length === 1, "the /metrics burst's alert");
    expect((await audit(t)).events[0]).toMatchObject({ kind: "auth_refusals", detail: { refusals: "20", lastCode: "invalid_auth" } });

    t.clock.advance(60_000);
    const initialize = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "probe", version: "0" } } };
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`${t.baseUrl}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "x-kxm-project": "p", authorization: `Bearer guess-${i}` },
        body: JSON.stringify(initialize),
      });
      expect(res.status).toBe(401);
      await res.text();
    }
    await eventually(async () => (await audit(t)).events.length === 2, "the MCP burst's alert, the next minute");
  });

  it("bounds the alerts a project's flood can store, and says how many it dropped", async () => {
    const t = await hub();
    const push = (project: string) =>
      t.rest("/v1/sync/events", {
        json: { project, runtimeId: "rtm_other0001", events: [syncEvent({ homeRuntimeId: "rtm_home0001" })] },
        headers: admin,
      });
    for (let i = 0; i < 70; i++) await push("flood");
    await eventually(async () => (await audit(t, "?pageSize=1000")).events.length === 60, "60 alerts stored");
    // Another project's alert is stored all the same, and says nothing of the flood.
    await push("quiet");
    await eventually(async () => (await audit(t, "?pageSize=1000")).events.length === 61, "the other project's alert");
    expect((await audit(t, "?project=quiet")).events[0]!.detail).not.toHaveProperty("suppressed");
    t.clock.advance(60_000);
    await push("flood");
    await eventually(async () => (await audit(t, "?pageSize=1000")).events.length === 62, "the next minute's first alert");
    expect((await audit(t, "?pageSize=1")).events[0]!.detail).toMatchObject({ suppressed: "10", alert: "sync_runtime_mismatch" });
  });

  it("a restore is in the trail, and keeps revoked the tokens revoked after the backup", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-audit-restore-"));
    try {
      const dataPath = path.join(dir, "kxm.db");
      const first = await hub({ config: { dataPath } });
      const made = await jsonOf(await first.rest("/v1/ops/projects/p/tokens", { json: {}, headers: admin }));
      await backupTo(dataPath, path.join(dir, "b.db"), { hubVersion: "test", nowMs: Date.now() });
      await first.rest(`/v1/ops/projects/p/tokens/${made.token.tokenId}`, { method: "DELETE", headers: admin });
      await first.close();
      hubs = [];
      restoreFrom({ from: path.join(dir, "b.db"), dataPath, margin: 1_000 });
      const second = await hub({ config: { dataPath } });
      const res = await second.rest("/v1/agents/register", { json: { name: "a", project: "p" }, headers: { authorization: `Bearer ${made.secret}` } });
      expect(res.status).toBe(401);
      const kinds = (await audit(second)).events.map((e) => e.kind);
      // The replaced file's entries the backup does not hold are kept: the revocation after it.
      expect(kinds).toEqual(["restore", "token_revoked", "token_created"]);
      expect((await audit(second)).events[0]!.detail).toMatchObject({ margin: "1000", keptRevoked: "1", backup: "b.db" });
    } finally {
      await Promise.all(hubs.map((h) => h.close()));
      hubs = [];
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
