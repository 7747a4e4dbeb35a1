import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import net from "node:net";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, serveCli } from "../fixtures/cli.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";

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
});
