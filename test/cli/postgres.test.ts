import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import net from "node:net";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { expectRefusal, runCli, serveCli } from "../fixtures/cli.js";
import { postgresBinDir, startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/** `kxm-hub serve` on PostgreSQL (KXM_DATABASE_URL): the URL's password is never shown. */

let server: TestPostgres;
const password = "s3cret-pass";
beforeAll(async () => {
  server = await startPostgres();
  const c = new pg.Client({ connectionString: server.url });
  await c.connect();
  await c.query(`CREATE ROLE hub LOGIN PASSWORD '${password}'`);
  await c.query("CREATE DATABASE kxm OWNER hub");
  await c.end();
});
afterAll(() => server?.stop());

describe("kxm-hub on PostgreSQL", () => {
  it("serves with KXM_DATABASE_URL, shows it without its password, and reports postgres storage", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-cli-pg-"));
    const log = path.join(dir, "hub.jsonl");
    const url = `postgres://hub:${password}@127.0.0.1:${server.port}/kxm`;
    const hub = await serveCli(["--port", "0"], { env: { KXM_DATABASE_URL: url, KXM_LOG_PATH: log } });
    try {
      expect(hub.output().stdout).toContain(`storage=postgres://hub@127.0.0.1:${server.port}/kxm; auth=none`);
      expect(await (await fetch(`${hub.url}/ready`)).json()).toEqual({ ok: true, storage: "postgres" });
      const reg = await fetch(`${hub.url}/v1/agents/register`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "alpha", project: "p" }),
      });
      expect(reg.status).toBe(201);
    } finally {
      expect(await hub.stop()).toBe(0);
    }
    const written = fs.readFileSync(log, "utf8") + hub.output().stdout + hub.output().stderr;
    expect(written).toContain('"event":"hub_started"');
    expect(written).not.toContain(password);
  });

  it("refuses to start when the database cannot be reached, without showing the password", async () => {
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    const r = await runCli(["--port", "0", "--log-path", "-"], { env: { KXM_DATABASE_URL: `postgres://hub:${password}@127.0.0.1:${port}/kxm` } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^kxm-hub: runtime_store_unreachable: cannot reach the PostgreSQL database/);
    expect(r.stderr + r.stdout).not.toContain(password);
  });

  it("a database restored with pg_restore, then raise-fence: no fencing token is handed out twice, no key comes back, no inbox number is used twice", async () => {
    const url = await server.createDatabase();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-cli-pgdump-"));
    const dump = path.join(dir, "kxm.dump");
    const tool = (name: string, args: string[]) => {
      const r = spawnSync(path.join(postgresBinDir()!, name), args, { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
    };
    const post = (base: string, p: string, headers: Record<string, string>, body: unknown) =>
      fetch(`${base}${p}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    const serve = () => serveCli(["--port", "0", "--log-path", "-"], { env: { KXM_DATABASE_URL: url } });
    const tokenOf = async (res: Response) => {
      expect(res.status).toBe(200);
      return ((await res.json()) as { lease: { fencingToken: number } }).lease.fencingToken;
    };
    try {
      let hub = await serve();
      const reg = (await (await post(hub.url, "/v1/agents/register", {}, { name: "alpha", project: "p" })).json()) as {
        agent: { id: string };
        agentKey: string;
      };
      let headers = { "x-kxm-agent-id": reg.agent.id, "x-kxm-agent-key": reg.agentKey };
      const beta = (await (await post(hub.url, "/v1/agents/register", {}, { name: "beta", project: "p" })).json()) as { agent: { id: string }; agentKey: string };
      const betaHeaders = { "x-kxm-agent-id": beta.agent.id, "x-kxm-agent-key": beta.agentKey };
      expect(await tokenOf(await post(hub.url, "/v1/leases/deploy/acquire", headers, { ttlMs: 60_000 }))).toBe(1);
      expect((await post(hub.url, "/v1/messages", headers, { target: beta.agent.id, content: "m1" })).status).toBe(202);
      tool("pg_dump", ["-Fc", "-d", url, "-f", dump]);
      // After the backup: token 1 released, token 2 handed out; three more messages, read by beta
      // to cursor 4; alpha evicted (its key refused from then on).
      await post(hub.url, "/v1/leases/deploy/release", headers, { fencingToken: 1 });
      expect(await tokenOf(await post(hub.url, "/v1/leases/deploy/acquire", headers, { ttlMs: 60_000 }))).toBe(2);
      for (const c of ["m2", "m3", "m4"]) expect((await post(hub.url, "/v1/messages", headers, { target: beta.agent.id, content: c })).status).toBe(202);
      const read = (await (await fetch(`${hub.url}/v1/inbox?afterCursor=0&limit=100`, { headers: betaHeaders })).json()) as { nextCursor: string | number };
      expect(Number(read.nextCursor)).toBe(4);
      expect((await fetch(`${hub.url}/v1/ops/projects/p/agents/${reg.agent.id}`, { method: "DELETE" })).status).toBe(200);
      expect(await hub.stop()).toBe(0);

      // backup and restore copy SQLite files; on PostgreSQL they say what to do instead.
      expectRefusal(await runCli(["backup", "--out", path.join(dir, "x.db")], { env: { KXM_DATABASE_URL: url } }), "invalid_config");

      tool("pg_restore", ["--clean", "--if-exists", "-d", url, dump]);
      const raised = await runCli(["raise-fence", "--database-url", url, "--bump-fence", "1000"]);
      expect(raised.code, raised.stderr).toBe(0);
      expect(raised.stdout).toContain("raised the fence");
      expect(raised.stdout).toContain("1 leases released");

      hub = await serve();
      try {
        // Every key of the dump is rotated away: alpha's, evicted after the dump, works no more.
        expect((await post(hub.url, "/v1/leases/deploy/acquire", headers, { ttlMs: 60_000 })).status).toBe(401);
        const resumed = (await (await post(hub.url, "/v1/agents/register", {}, { name: "alpha", project: "p" })).json()) as { agent: { id: string }; agentKey: string; resumed: boolean };
        expect([resumed.agent.id, resumed.resumed]).toEqual([reg.agent.id, true]);
        headers = { "x-kxm-agent-id": resumed.agent.id, "x-kxm-agent-key": resumed.agentKey };
        // New messages are numbered above every number handed out: beta's cursor 4 does not pass them.
        const betaAgain = (await (await post(hub.url, "/v1/agents/register", {}, { name: "beta", project: "p" })).json()) as { agentKey: string };
        const betaNow = { ...betaHeaders, "x-kxm-agent-key": betaAgain.agentKey };
        for (const c of ["n1", "n2", "n3"]) expect((await post(hub.url, "/v1/messages", headers, { target: beta.agent.id, content: c })).status).toBe(202);
        const after = (await (await fetch(`${hub.url}/v1/inbox?afterCursor=4&limit=100`, { headers: betaNow })).json()) as { events: { message?: { content?: string } }[] };
        expect(after.events.map((e) => e.message?.content)).toEqual(["n1", "n2", "n3"]);
        // The restored lease (token 1) is released; the next grant is above every token handed out.
        const again = await post(hub.url, "/v1/leases/deploy/acquire", headers, { ttlMs: 60_000 });
        expect(await tokenOf(again)).toBe(1_002);
        const fresh = await post(hub.url, "/v1/leases/never-leased/acquire", headers, { ttlMs: 60_000 });
        expect(await tokenOf(fresh)).toBe(1_001);
      } finally {
        expect(await hub.stop()).toBe(0);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
