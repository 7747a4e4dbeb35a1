import fs from "node:fs";
import path from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterEach, describe, expect, it } from "vitest";
import { sha256Hex } from "../../src/ids.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { OpsService, TokenScope } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub, jsonOf, type TestHub } from "../fixtures/hub.js";
import { refused } from "../fixtures/rpc.js";
import { createDatabase } from "../fixtures/postgres.js";
import { until } from "../fixtures/streams.js";
import { mcpAgent } from "../fixtures/mcp.js";

/**
 * Project tokens managed through OpsService (docs/security.md): the secret shown
 * once and stored as a hash, scopes, expiry, revocation on every face and every replica, open
 * streams ended, the audit entries, and hostile input refused without a change.
 */

const ADMIN = "tok-admin-tokens";
const admin = { authorization: `Bearer ${ADMIN}` };
const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });

let hubs: TestHub[] = [];
afterEach(async () => {
  await Promise.all(hubs.map((h) => h.close()));
  hubs = [];
});

async function hub(config: Parameters<typeof startTestHub>[0] = {}): Promise<TestHub> {
  const t = await startTestHub({ ...config, config: { authToken: ADMIN, ...config.config } });
  hubs.push(t);
  return t;
}

interface Created {
  secret: string;
  token: { tokenId: string; scope: string; state: string; label: string; expiresAt?: string };
}

async function create(t: TestHub, project: string, json: Record<string, unknown> = {}): Promise<Created> {
  const res = await t.rest(`/v1/ops/projects/${encodeURIComponent(project)}/tokens`, { json, headers: admin });
  const body = await jsonOf(res);
  expect(res.status, JSON.stringify(body)).toBe(201);
  return body as Created;
}

const revoke = (t: TestHub, project: string, id: string, headers: Record<string, string> = admin) =>
  t.rest(`/v1/ops/projects/${encodeURIComponent(project)}/tokens/${id}`, { method: "DELETE", headers });

const list = async (t: TestHub, project: string) => {
  const res = await t.rest(`/v1/ops/projects/${encodeURIComponent(project)}/tokens`, { headers: admin });
  expect(res.status).toBe(200);
  return (await res.json()) as { tokens: Created["token"][] };
};

const registerWith = (t: TestHub, headers: Record<string, string>, name = "a1", project = "p") =>
  t.rest("/v1/agents/register", { json: { name, project }, headers });

async function agentWith(t: TestHub, secret: string, name = "a1", project = "p") {
  const res = await registerWith(t, bearer(secret), name, project);
  expect(res.status).toBe(201);
  const body = await jsonOf(res);
  return { ...bearer(secret), "x-kxm-agent-id": body.agent.id as string, "x-kxm-agent-key": body.agentKey as string };
}

/** How a stream ended: "ended" when it closed, else the Connect code it failed with. */
const endOf = async (s: AsyncIterable<unknown>): Promise<string> => {
  try {
    for await (const _ of s);
    return "ended";
  } catch (e) {
    return e instanceof ConnectError ? Code[e.code] : String(e);
  }
};

const codeOf = async (res: Response) => `${res.status} ${((await res.json()) as { code?: string }).code ?? "ok"}`;

describe("project tokens", () => {
  it("shows the secret once, lists the token without it, and the token serves the project's agents", async () => {
    const t = await hub();
    const made = await create(t, "p", { scope: "agent", label: "ci" });
    expect(made.secret).toMatch(/^kxmpt_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
    expect(made.secret.slice("kxmpt_".length, "kxmpt_".length + 16)).toBe(made.token.tokenId.slice(3));
    expect(made.token).toMatchObject({ scope: "agent", state: "live", label: "ci" });

    const agent = await agentWith(t, made.secret);
    const acquired = await t.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: agent });
    expect(acquired.status).toBe(200);

    const listed = await t.rest("/v1/ops/projects/p/tokens", { headers: admin });
    const text = await listed.text();
    expect(text).not.toContain(made.secret);
    expect(text).not.toContain(sha256Hex(made.secret));
    expect(JSON.parse(text).tokens).toEqual([expect.objectContaining({ tokenId: made.token.tokenId, scope: "agent", state: "live" })]);
  });

  it("keeps only the hash: the secret is in no row and no log line", async () => {
    const t = await hub({ file: true });
    const made = await create(t, "p");
    await agentWith(t, made.secret);
    await t.rest("/v1/leases/x/acquire", { json: { ttlMs: 1_000 }, headers: bearer(made.secret) }); // refused: no agent
    const rows = await t.sql("SELECT * FROM project_tokens");
    expect(rows).toHaveLength(1);
    expect(rows[0]!.hash).toBe(sha256Hex(made.secret));
    expect(JSON.stringify(rows)).not.toContain(made.secret);
    expect(JSON.stringify(await t.sql("SELECT * FROM audit_events"))).not.toContain(made.secret);
    expect(JSON.stringify(t.events)).not.toContain(made.secret);
    expect(t.events.map((e) => e.event)).toContain("project_token_created");
    // The database file and its WAL, byte for byte.
    const file = (t.hub.store as unknown as { db: { name: string } }).db.name;
    for (const f of [file, `${file}-wal`]) {
      if (fs.existsSync(f)) expect(fs.readFileSync(f).includes(Buffer.from(made.secret))).toBe(false);
    }
  });

  it("a project with a token of its own no longer takes the admin token, and stays closed after revocation", async () => {
    const t = await hub();
    expect((await registerWith(t, admin, "before")).status).toBe(201);
    const made = await create(t, "p");
    expect(await codeOf(await registerWith(t, admin, "after"))).toBe("401 invalid_auth");
    expect(await codeOf(await registerWith(t, {}, "none"))).toBe("401 invalid_auth");
    expect((await revoke(t, "p", made.token.tokenId)).status).toBe(200);
    expect(await codeOf(await registerWith(t, bearer(made.secret), "revoked"))).toBe("401 invalid_auth");
    expect(await codeOf(await registerWith(t, admin, "admin-again"))).toBe("401 invalid_auth");
    // Another project is not affected; the operator's reads of p still take the admin token.
    expect((await registerWith(t, admin, "q1", "q")).status).toBe(201);
    expect((await t.rest("/v1/leases?project=p", { headers: admin })).status).toBe(200);
  });

  it("a token works for its own project only", async () => {
    const t = await hub({ config: { projectTokens: { q: "tok-q" } } });
    const made = await create(t, "p");
    expect(await codeOf(await registerWith(t, bearer(made.secret), "x", "q"))).toBe("401 invalid_auth");
    expect(await codeOf(await registerWith(t, bearer(made.secret), "x", "p2"))).toBe("401 invalid_auth");
    // A secret of the right form that the hub never issued, and one with a wrong tail.
    const forged = `${made.secret.slice(0, -1)}${made.secret.endsWith("A") ? "B" : "A"}`;
    expect(await codeOf(await registerWith(t, bearer(forged), "x"))).toBe("401 invalid_auth");
    expect(await codeOf(await registerWith(t, bearer(`kxmpt_${"0".repeat(16)}_${"A".repeat(43)}`), "x"))).toBe("401 invalid_auth");
  });

  it("scopes: read reads and watches, check only checks fences, neither acts", async () => {
    const t = await hub();
    const owner = await create(t, "p", { scope: "agent" });
    const reader = await create(t, "p", { scope: "read" });
    const checker = await create(t, "p", { scope: "check" });
    const agent = await agentWith(t, owner.secret);
    const lease = await jsonOf(await t.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: agent }));
    const token = lease.lease.fencingToken;

    const calls: Record<string, (h: Record<string, string>) => Promise<Response>> = {
      list: (h) => t.rest("/v1/leases?project=p", { headers: h }),
      agents: (h) => t.rest("/v1/agents?project=p", { headers: h }),
      check: (h) => t.rest("/v1/leases/deploy/check", { json: { project: "p", fencingToken: token }, headers: h }),
      register: (h) => registerWith(t, h, "new"),
      forceRelease: (h) => t.rest("/v1/ops/projects/p/leases/deploy/release", { json: { fencingToken: 999 }, headers: h }),
      runtime: (h) => t.rest("/v1/runtime/presence", { json: { project: "p", runtimeId: "rtm_p_runtime01" }, headers: h }),
    };
    const answers = async (secret: string) =>
      Object.fromEntries(await Promise.all(Object.entries(calls).map(async ([k, f]) => [k, await codeOf(await f(bearer(secret)))])));
    expect(await answers(reader.secret)).toEqual({
      list: "200 ok",
      agents: "200 ok",
      check: "200 ok",
      register: "403 token_scope_insufficient",
      forceRelease: "403 token_scope_insufficient",
      runtime: "403 token_scope_insufficient",
    });
    expect(await answers(checker.secret)).toEqual({
      list: "403 token_scope_insufficient",
      agents: "403 token_scope_insufficient",
      check: "200 ok",
      register: "403 token_scope_insufficient",
      forceRelease: "403 token_scope_insufficient",
      runtime: "403 token_scope_insufficient",
    });
    // An agent's own calls need the agent scope, whatever key comes with the token.
    const withRead = { ...agent, ...bearer(reader.secret) };
    expect(await codeOf(await t.rest("/v1/leases/deploy/renew", { json: { fencingToken: token, ttlMs: 60_000 }, headers: withRead }))).toBe(
      "403 token_scope_insufficient",
    );
    const refusal = await jsonOf(await calls.register!(bearer(checker.secret)));
    expect(refusal).toMatchObject({ code: "token_scope_insufficient" });
    // Nothing of those refusals was written: still the one agent and the one lease.
    expect((await t.sql("SELECT count(*) AS n FROM agents"))[0]!.n).toBe(1);
    expect((await jsonOf(await calls.list!(admin))).leases).toHaveLength(1);
  });

  it("expires on the hub clock; the sweep notes it once in the audit trail", async () => {
    const t = await hub();
    const made = await create(t, "p", { ttlMs: 60_000 });
    expect(made.token.expiresAt).toBeDefined();
    expect((await registerWith(t, bearer(made.secret), "a")).status).toBe(201);
    t.clock.advance(59_999);
    expect((await registerWith(t, bearer(made.secret), "b")).status).toBe(201);
    t.clock.advance(1);
    expect(await codeOf(await registerWith(t, bearer(made.secret), "c"))).toBe("401 invalid_auth");
    expect((await list(t, "p")).tokens[0]!.state).toBe("expired");
    await t.hub.sweepNow();
    await t.hub.sweepNow();
    const audit = await t.sql("SELECT kind, project, detail FROM audit_events ORDER BY seq");
    expect(audit.map((r) => r.kind)).toEqual(["token_created", "token_expired"]);
    expect(JSON.parse(String(audit[1]!.detail))).toMatchObject({ tokenId: made.token.tokenId });
    expect(t.events.filter((e) => e.event === "project_token_expired")).toHaveLength(1);
  });

  it("revocation is at once, idempotent, and audited", async () => {
    const t = await hub();
    const a = await create(t, "p", { label: "old" });
    const b = await create(t, "p", { label: "new" });
    expect((await registerWith(t, bearer(a.secret), "x")).status).toBe(201);
    const first = await revoke(t, "p", a.token.tokenId);
    expect(first.status).toBe(200);
    expect((await jsonOf(first)).token).toMatchObject({ tokenId: a.token.tokenId, state: "revoked" });
    expect(await codeOf(await registerWith(t, bearer(a.secret), "y"))).toBe("401 invalid_auth");
    // The overlapping token goes on working: a rotation.
    expect((await registerWith(t, bearer(b.secret), "z")).status).toBe(201);
    const again = await revoke(t, "p", a.token.tokenId);
    expect(again.status).toBe(200);
    const audit = await t.sql("SELECT kind FROM audit_events ORDER BY seq");
    expect(audit.map((r) => r.kind)).toEqual(["token_created", "token_created", "token_revoked"]);
    const states = Object.fromEntries((await list(t, "p")).tokens.map((x) => [x.label, x.state]));
    expect(states).toEqual({ old: "revoked", new: "live" });
  });

  it("survives a restart", async () => {
    const first = await startTestHub({ file: true, config: { authToken: ADMIN } });
    const made = await create(first, "p");
    const dataPath = (first.hub.store as unknown as { db: { name: string } }).db.name;
    const dir = path.dirname(dataPath);
    const copy = path.join(dir, "..", `${path.basename(dir)}-copy.db`);
    await first.hub.close(); // the directory stays; the test hub's close would remove it
    fs.copyFileSync(dataPath, copy);
    try {
      const second = await hub({ config: { dataPath: copy } });
      expect((await registerWith(second, bearer(made.secret), "after-restart")).status).toBe(201);
      expect((await list(second, "p")).tokens.map((x) => x.tokenId)).toEqual([made.token.tokenId]);
      // The project stays closed to the admin token (the store knows its projects with tokens
      // from the file it opens), and another project still takes it.
      expect(await codeOf(await registerWith(second, admin, "admin-after-restart"))).toBe("401 invalid_auth");
      expect((await registerWith(second, admin, "q-after-restart", "q")).status).toBe(201);
    } finally {
      await Promise.all(hubs.map((h) => h.close()));
      hubs = [];
      for (const f of [copy, `${copy}-wal`, `${copy}-shm`]) fs.rmSync(f, { force: true });
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("ends the streams opened with a token when it is revoked, or when it expires", async () => {
    const t = await hub();
    const reader = await create(t, "p", { scope: "read" });
    const expiring = await create(t, "p", { scope: "agent", ttlMs: 120_000 });
    const owner = await create(t, "p", { scope: "agent" });
    const agentHeaders = await agentWith(t, owner.secret);
    const transport = (h: Record<string, string>) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1", interceptors: [withHeaders(h)] });
    const watch = createClient(LeaseService, transport(bearer(reader.secret))).watchLeases({ project: "p" });
    const expAgent = await agentWith(t, expiring.secret, "exp");
    const inbox = createClient(PeerService, transport(expAgent)).subscribe({});
    const ownInbox = createClient(PeerService, transport(agentHeaders)).subscribe({});
    const watchEnd = endOf(watch);
    const inboxEnd = endOf(inbox);
    const ownEnd = endOf(ownInbox);
    await until(() => t.clock.sleepers >= 3, "three idle streams");
    expect((await revoke(t, "p", reader.token.tokenId)).status).toBe(200);
    expect(await watchEnd).toBe("Unauthenticated");
    t.clock.advance(120_000);
    expect(await inboxEnd).toBe("Unauthenticated");
    // The stream opened with a token that still lives goes on.
    const settled = await Promise.race([ownEnd, new Promise((r) => setTimeout(() => r("open"), 200))]);
    expect(settled).toBe("open");
  });

  it("ends the streams the admin token opened for a project once it gets a token of its own; the operator's watch goes on", async () => {
    const t = await hub();
    const agent = await agentWith(t, ADMIN);
    const other = await agentWith(t, ADMIN, "q1", "q");
    const transport = (h: Record<string, string>) => createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1", interceptors: [withHeaders(h)] });
    let otherEnd: string | undefined;
    let operatorEnd: string | undefined;
    const inboxEnd = endOf(createClient(PeerService, transport(agent)).subscribe({}));
    const agentWatchEnd = endOf(createClient(LeaseService, transport(agent)).watchLeases({}));
    void endOf(createClient(PeerService, transport(other)).subscribe({})).then((e) => (otherEnd = e));
    void endOf(createClient(LeaseService, transport(admin)).watchLeases({ project: "p" })).then((e) => (operatorEnd = e));
    await until(() => t.clock.sleepers >= 4, "four idle streams");
    await create(t, "p");
    expect(await inboxEnd).toBe("Unauthenticated");
    expect(await agentWatchEnd).toBe("Unauthenticated");
    // Still open: another project's agent, and the operator's read, which the admin token still serves.
    expect((await t.rest("/v1/leases/build/acquire", { json: { ttlMs: 60_000 }, headers: other })).status).toBe(200);
    const acquired = await t.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: await agentWith(t, (await create(t, "p")).secret, "a2") });
    expect(acquired.status).toBe(200);
    await until(() => t.clock.sleepers >= 2, "the two streams that go on, idle again");
    expect([otherEnd, operatorEnd]).toEqual([undefined, undefined]);
  });

  it("ends an open hub's stream of a project once it gets a token, and one that got it between authentication and the stream's start", async () => {
    const t = await startTestHub({ config: {} });
    hubs.push(t);
    const transport = createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1" });
    const watch = endOf(createClient(LeaseService, transport).watchLeases({ project: "p" }));
    await until(() => t.clock.sleepers >= 1, "an idle stream");
    expect((await t.rest("/v1/ops/projects/p/tokens", { json: {} })).status).toBe(201);
    expect(await watch).toBe("Unauthenticated");

    // Project r gets its token right after a stream's authentication read it as open.
    const tokens = t.hub.store.tokens as { projectHasTokens(project: string, durable: boolean): Promise<boolean> };
    const has = tokens.projectHasTokens.bind(tokens);
    let armed = true;
    let made: number | undefined;
    tokens.projectHasTokens = async (project: string, durable: boolean) => {
      const answer = await has(project, durable);
      if (armed && project === "r") {
        armed = false;
        made = (await t.rest("/v1/ops/projects/r/tokens", { json: {} })).status;
      }
      return answer;
    };
    expect(await endOf(createClient(LeaseService, transport).watchLeases({ project: "r" }))).toBe("Unauthenticated");
    expect(made).toBe(201);
  });

  it("ends a stream whose token was revoked between the call's authentication and the stream's start", async () => {
    const t = await hub();
    const reader = await create(t, "p", { scope: "read" });
    // The revocation commits, is published and answered right after authentication read the
    // token as live, before the stream listens for revocations.
    const tokens = t.hub.store.tokens as { peekToken(id: string): Promise<unknown> };
    const peek = tokens.peekToken.bind(tokens);
    let armed = true;
    let revoked: number | undefined;
    tokens.peekToken = async (id: string) => {
      const row = await peek(id);
      if (armed && id === reader.token.tokenId) {
        armed = false;
        revoked = (await revoke(t, "p", reader.token.tokenId)).status;
      }
      return row;
    };
    const transport = createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1", interceptors: [withHeaders(bearer(reader.secret))] });
    let end: string | undefined;
    void (async () => {
      try {
        for await (const _ of createClient(LeaseService, transport).watchLeases({ project: "p" }));
        end = "ended";
      } catch (e) {
        end = e instanceof ConnectError ? Code[e.code] : String(e);
      }
    })();
    await until(() => end !== undefined, "the stream's end");
    expect(revoked).toBe(200);
    expect(end).toBe("Unauthenticated");
  });

  it("ends a REST event stream opened with a token when it is revoked, with an error event", async () => {
    const t = await hub();
    const reader = await create(t, "p", { scope: "read" });
    const res = await t.rest("/v1/watch/leases?project=p", { headers: bearer(reader.secret) });
    expect(res.status).toBe(200);
    const body = res.body!.getReader();
    let text = "";
    const read = (async () => {
      for (;;) {
        const { done, value } = await body.read();
        if (done) return text;
        text += Buffer.from(value).toString();
      }
    })();
    await until(() => text.includes("event: snapshot"), "the first frame");
    expect((await revoke(t, "p", reader.token.tokenId)).status).toBe(200);
    const all = await read;
    expect(all).toMatch(/event: error\ndata: .*"code":"invalid_auth"/);
  });

  it("an MCP agent's token is checked on every tool call, on both protocol eras", async () => {
    const t = await hub();
    const made = await create(t, "p");
    const legacy = await mcpAgent(t, "m1", { token: made.secret });
    const modern = await mcpAgent(t, "m2", { token: made.secret, era: "modern" });
    for (const agent of [legacy, modern]) expect((await agent.call("acquire_lease", { name: `lease-${agent === legacy ? 1 : 2}`, ttl_ms: 60_000 })).isError).toBeFalsy();
    expect((await revoke(t, "p", made.token.tokenId)).status).toBe(200);
    for (const agent of [legacy, modern]) {
      const refused = await agent.call("list_leases").catch((e: unknown) => ({ isError: true, content: [{ type: "text", text: String(e) }] }));
      expect(refused.isError, JSON.stringify(refused)).toBe(true);
      expect(JSON.stringify(refused)).toMatch(/invalid_auth|401|Unauthorized/i);
    }
    await legacy.client.close();
    await modern.client.close();
  });

  it("refuses a label with a bidi control or a line separator on both faces, and takes text of any script", async () => {
    const t = await hub();
    const ops = createClient(OpsService, createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1", interceptors: [withHeaders(admin)] }));
    // U+202E turns "ci-gpj.exe" around: the page would show "ci-exe.jpg"
    const e = await refused(ops.createProjectToken({ project: "p", scope: TokenScope.READ, label: "ci-\u202egpj.exe" }));
    expect([e.code, e.reason, e.metadata.field]).toEqual(["invalid_argument", "PROTOCOL_ERROR", "label"]);
    const rest = await t.rest("/v1/ops/projects/p/tokens", { json: { label: "ci\u2028token_created p pt_0000000000000000" }, headers: admin });
    expect(await codeOf(rest)).toBe("400 protocol_error");
    expect((await list(t, "p")).tokens).toEqual([]);
    const label = "ci \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 \u00e9t\u00e9 \u65e5\u672c";
    expect((await create(t, "p", { label })).token.label).toBe(label);
  });

  it("refuses hostile input with a typed error and changes nothing", async () => {
    const t = await hub({ config: { projectTokens: { q: "tok-q" } } });
    const made = await create(t, "p");
    const before = JSON.stringify(await t.sql("SELECT * FROM project_tokens ORDER BY id"));
    const post = (project: string, json: unknown, headers: Record<string, string> = admin) =>
      t.rest(`/v1/ops/projects/${encodeURIComponent(project)}/tokens`, { json, headers });
    const cases: [string, Promise<Response>, string][] = [
      ["unknown scope", post("p", { scope: "owner" }), "400 protocol_error"],
      ["label too long", post("p", { label: "x".repeat(201) }), "400 protocol_error"],
      ["label with a control character", post("p", { label: "a\u0007b" }), "400 protocol_error"],
      // line and paragraph separators, bidi controls: a label that reads as other text in a log or on the page
      ...["\u2028", "\u2029", "\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"].map(
        (c): [string, Promise<Response>, string] => [`label with U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`, post("p", { label: `ci${c}-2027` }), "400 protocol_error"],
      ),
      ["ttl too short", post("p", { ttlMs: 999 }), "400 protocol_error"],
      ["ttl too long", post("p", { ttlMs: 315_360_000_001 }), "400 protocol_error"],
      ["ttl not a number", post("p", { ttlMs: "soon" }), "400 protocol_error"],
      ["project too long", post("x".repeat(129), {}), "400 protocol_error"],
      ["a project token", post("q", {}, bearer("tok-q")), "401 invalid_auth"],
      ["the managed token itself", post("p", {}, bearer(made.secret)), "401 invalid_auth"],
      ["no token", post("p", {}, {}), "401 invalid_auth"],
      ["revoke: not an id", revoke(t, "p", "pt_nothex"), "400 protocol_error"],
      ["revoke: unknown id", revoke(t, "p", "pt_0000000000000000"), "404 token_not_found"],
      ["revoke: another project's token", revoke(t, "q", made.token.tokenId), "404 token_not_found"],
      ["revoke as the project", revoke(t, "p", made.token.tokenId, bearer(made.secret)), "401 invalid_auth"],
      ["list as the project", t.rest("/v1/ops/projects/p/tokens", { headers: bearer(made.secret) }), "401 invalid_auth"],
    ];
    for (const [what, res, want] of cases) expect(`${what}: ${await codeOf(await res)}`).toBe(`${what}: ${want}`);
    expect(JSON.stringify(await t.sql("SELECT * FROM project_tokens ORDER BY id"))).toBe(before);
    expect((await registerWith(t, bearer(made.secret), "still")).status).toBe(201);
  });

  it("allows 100 live tokens per project; a revoked or expired one frees its place", async () => {
    const t = await hub();
    const made: Created[] = [];
    for (let i = 0; i < 99; i++) made.push(await create(t, "p"));
    made.push(await create(t, "p", { ttlMs: 1_000 }));
    const over = await t.rest("/v1/ops/projects/p/tokens", { json: {}, headers: admin });
    expect(await codeOf(over)).toBe("409 token_limit_reached");
    expect((await t.sql("SELECT count(*) AS n FROM project_tokens"))[0]!.n).toBe(100);
    await create(t, "q"); // another project's count is its own
    t.clock.advance(1_000);
    await create(t, "p");
    expect(await codeOf(await t.rest("/v1/ops/projects/p/tokens", { json: {}, headers: admin }))).toBe("409 token_limit_reached");
    expect((await revoke(t, "p", made[0]!.token.tokenId)).status).toBe(200);
    await create(t, "p");
  });
});

describe.runIf(process.env.KXM_TEST_POSTGRES_URL)("project tokens across two PostgreSQL replicas", () => {
  it("a token made on one hub works on the other; revoked on one, it is refused on both and their streams end", async () => {
    const url = await createDatabase(process.env.KXM_TEST_POSTGRES_URL!, `tokens_${process.pid}_${Date.now()}`);
    const a = await hub({ config: { databaseUrl: url } });
    const b = await hub({ config: { databaseUrl: url }, clock: a.clock });
    const made = await create(a, "p", { scope: "read" });
    const owner = await create(b, "p");
    expect((await registerWith(b, bearer(owner.secret), "x")).status).toBe(201);
    expect((await b.rest("/v1/leases?project=p", { headers: bearer(made.secret) })).status).toBe(200);
    const watch = createClient(LeaseService, createConnectTransport({ baseUrl: a.baseUrl, httpVersion: "1.1", interceptors: [withHeaders(bearer(made.secret))] }));
    const ended = (async () => {
      try {
        for await (const _ of watch.watchLeases({ project: "p" }));
        return "ended";
      } catch (e) {
        return e instanceof ConnectError ? Code[e.code] : String(e);
      }
    })();
    await until(() => a.clock.sleepers >= 1, "an idle stream on hub a");
    expect((await revoke(b, "p", made.token.tokenId)).status).toBe(200);
    expect(await codeOf(await a.rest("/v1/leases?project=p", { headers: bearer(made.secret) }))).toBe("401 invalid_auth");
    expect(await codeOf(await b.rest("/v1/leases?project=p", { headers: bearer(made.secret) }))).toBe("401 invalid_auth");
    expect(await ended).toBe("Unauthenticated");
    // The other token goes on working on both.
    expect((await registerWith(a, bearer(owner.secret), "y")).status).toBe(201);
  });
});
