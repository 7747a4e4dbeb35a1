import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

function startCli(env: Record<string, string>) {
  const child = spawn(process.execPath, ["bin/kxm-hub.mjs"], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const listening = new Promise<string>((resolve, reject) => {
    child.stdout.on("data", () => {
      const m = /kxm hub listening at (\S+); storage=(.+); auth=(token|none)\n/.exec(stdout);
      if (m) resolve(m[1]!);
    });
    void exited.then((code) => reject(new Error(`exited ${code}: ${stderr}`)));
  });
  return { child, exited, listening, output: () => ({ stdout, stderr }) };
}

describe("the hub executable", () => {
  it("prints its start-up line, serves, and stops gracefully on SIGTERM", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-cli-"));
    const log = path.join(dir, "logs", "hub.jsonl");
    const hub = startCli({ KXM_PORT: "0", KXM_DATA_PATH: path.join(dir, "state", "kxm.db"), KXM_LOG_PATH: log });
    const url = await hub.listening;
    expect(hub.output().stdout).toContain(`storage=${path.join(dir, "state", "kxm.db")}; auth=none`);
    const res = await fetch(`${url}/ready`);
    expect(await res.json()).toEqual({ ok: true, storage: "sqlite" });
    hub.child.kill("SIGTERM");
    expect(await hub.exited).toBe(0);
    const events = fs
      .readFileSync(log, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { event: string });
    expect(events.map((e) => e.event)).toEqual(expect.arrayContaining(["hub_started", "hub_stopping"]));
    expect(fs.statSync(path.join(dir, "state")).mode & 0o777).toBe(0o700);
    fs.rmSync(dir, { recursive: true, force: true });
  }, 20_000);

  it("refuses to start beyond loopback without an admin token", async () => {
    const hub = startCli({ KXM_HOST: "0.0.0.0", KXM_PORT: "0", KXM_DATA_PATH: ":memory:" });
    hub.listening.catch(() => undefined);
    expect(await hub.exited).not.toBe(0);
    expect(hub.output().stderr).toContain("invalid_config: KXM_AUTH_TOKEN is required when binding beyond localhost");
  }, 20_000);
});
