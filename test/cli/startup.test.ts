import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { schemaVersion } from "../../src/store/sqlite/schema.js";
import { expectRefusal, repo, runCli, serveCli } from "../fixtures/cli.js";

/**
 * The command line's start-up (docs/configuration.md, docs/operations.md): every refusal is one line
 * `kxm-hub: <code>: <message>` on stderr, exit 1, no stack trace, no start-up line, and nothing
 * left on disk; configuration that composes; logs on stdout; help that documents every flag.
 * Each case runs in its own temp directory as the working directory, so a default path that
 * slipped through would show up there too.
 */

/** A fresh temp directory, removed when its test ends (tests below run concurrently). */
function tempDir(onTestFinished: (fn: () => void) => void): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), "kxm-start-"));
  onTestFinished(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

/** Every path under `root`, relative, sorted. */
const tree = (root: string) => fs.readdirSync(root, { recursive: true, encoding: "utf8" }).sort();

interface RefusalCase {
  code: string;
  /** Prepares the directory; returns the environment of the start. */
  given(dir: string): Promise<{ env: Record<string, string>; args?: string[]; after?: () => void }>;
  message?: string;
}

const paths = (dir: string) => ({
  KXM_PORT: "0",
  KXM_DATA_PATH: path.join(dir, "state", "kxm.db"),
  KXM_LOG_PATH: path.join(dir, "logs", "hub.jsonl"),
});

const refusals: Record<string, RefusalCase> = {
  "a port in use, before the store is created": {
    code: "address_in_use",
    given: async (dir) => {
      const taken = net.createServer();
      await new Promise<void>((r) => taken.listen(0, "127.0.0.1", r));
      const { port } = taken.address() as net.AddressInfo;
      return { env: { ...paths(dir), KXM_PORT: String(port) }, after: () => taken.close() };
    },
  },
  "a data path under a plain file": {
    code: "runtime_path_invalid",
    given: async (dir) => {
      fs.writeFileSync(path.join(dir, "plain"), "");
      return { env: { ...paths(dir), KXM_DATA_PATH: path.join(dir, "plain", "state", "kxm.db") } };
    },
  },
  "a data path that is not a database": {
    code: "runtime_store_invalid",
    given: async (dir) => {
      fs.writeFileSync(path.join(dir, "junk.db"), Buffer.alloc(8192, 0x5a));
      return { env: { ...paths(dir), KXM_DATA_PATH: path.join(dir, "junk.db") } };
    },
  },
  "a store of a newer release": {
    code: "runtime_schema_newer",
    given: async (dir) => {
      const db = new Database(path.join(dir, "newer.db"));
      db.pragma(`user_version = ${schemaVersion + 1}`);
      db.close();
      return { env: { ...paths(dir), KXM_DATA_PATH: path.join(dir, "newer.db") } };
    },
  },
  "a SQLite driver built for another Node (its native module does not load), before any file is made": {
    code: "runtime_driver_unavailable",
    message: "NODE_MODULE_VERSION 115",
    given: async (dir) => {
      // What Node throws when better-sqlite3 was built for Node 20 and runs on a newer one.
      const hook = `process.dlopen = () => { const e = new Error("The module 'better_sqlite3.node' was compiled against a different Node.js version using NODE_MODULE_VERSION 115."); e.code = "ERR_DLOPEN_FAILED"; throw e; };`;
      return { env: { ...paths(dir), NODE_OPTIONS: `--import=data:text/javascript,${encodeURIComponent(hook)}` } };
    },
  },
  "a log path that is a directory": {
    code: "log_path_invalid",
    given: async (dir) => {
      fs.mkdirSync(path.join(dir, "logdir"));
      return { env: { ...paths(dir), KXM_LOG_PATH: path.join(dir, "logdir") } };
    },
  },
  "a log path under a plain file": {
    code: "log_path_invalid",
    given: async (dir) => {
      fs.writeFileSync(path.join(dir, "plain"), "");
      return { env: { ...paths(dir), KXM_LOG_PATH: path.join(dir, "plain", "logs", "hub.jsonl") } };
    },
  },
  "a log path the system cannot create": {
    code: "log_path_invalid",
    given: async (dir) => ({ env: { ...paths(dir), KXM_LOG_PATH: "/proc/kxm-hub/hub.jsonl" } }),
  },
  "a value out of range": {
    code: "invalid_config",
    message: "KXM_STALE_AFTER_MS",
    given: async (dir) => ({ env: { ...paths(dir), KXM_STALE_AFTER_MS: "50" } }),
  },
  "a keep-alive the user set at or above the stale-after time, naming both": {
    code: "invalid_config",
    message: "KXM_STREAM_KEEPALIVE_MS (2000) must be below KXM_STALE_AFTER_MS (1000)",
    given: async (dir) => ({ env: { ...paths(dir), KXM_STALE_AFTER_MS: "1000", KXM_STREAM_KEEPALIVE_MS: "2000" } }),
  },
  "an unknown flag": {
    code: "invalid_config",
    message: "--nope",
    given: async (dir) => ({ env: paths(dir), args: ["serve", "--nope", "1"] }),
  },
  "an unknown command": {
    code: "invalid_config",
    message: "unknown command",
    given: async (dir) => ({ env: paths(dir), args: ["servr"] }),
  },
};

describe.concurrent("start-up refusals", () => {
  for (const [name, c] of Object.entries(refusals)) {
    it(`${name}: ${c.code}, exit 1, no stack trace, nothing created`, async ({ onTestFinished }) => {
      const dir = tempDir(onTestFinished);
      const { env, args = [], after } = await c.given(dir);
      const before = tree(dir);
      const r = await runCli(args, { env, cwd: dir });
      after?.();
      expectRefusal(r, c.code);
      if (c.message) expect(r.stderr).toContain(c.message);
      expect(tree(dir)).toEqual(before);
    });
  }
});

describe("configuration that composes", () => {
  it("KXM_STALE_AFTER_MS=1000 alone starts: the keep-alive follows it", async ({ onTestFinished }) => {
    const dir = tempDir(onTestFinished);
    const hub = await serveCli([], { env: { ...paths(dir), KXM_STALE_AFTER_MS: "1000" }, cwd: dir });
    try {
      expect(await (await fetch(`${hub.url}/ready`)).json()).toEqual({ ok: true, storage: "sqlite" });
    } finally {
      expect(await hub.stop()).toBe(0);
    }
  });

  it("KXM_LOG_PATH=- writes the log as JSON lines to stdout and creates no file", async ({ onTestFinished }) => {
    const dir = tempDir(onTestFinished);
    const hub = await serveCli(["serve"], { env: { ...paths(dir), KXM_LOG_PATH: "-" }, cwd: dir });
    expect((await fetch(`${hub.url}/ready`)).status).toBe(200);
    expect(await hub.stop()).toBe(0);
    const lines = hub.output().stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^kxm hub listening at /); // the one line that is not JSON
    const events = lines.slice(1).map((l) => (JSON.parse(l) as { event: string }).event);
    expect(events).toEqual(expect.arrayContaining(["hub_started", "hub_stopping"]));
    expect(tree(dir)).toEqual(["state", "state/kxm.db", "state/kxm.db.lock"]);
  });
});

describe.concurrent("help", () => {
  const serveFlags = [
    ["host", "KXM_HOST"], ["port", "KXM_PORT"], ["auth-token", "KXM_AUTH_TOKEN"],
    ["project-tokens", "KXM_PROJECT_TOKENS"], ["data-path", "KXM_DATA_PATH"], ["database-url", "KXM_DATABASE_URL"],
    ["database-pool-size", "KXM_DATABASE_POOL_SIZE"], ["log-path", "KXM_LOG_PATH"], ["log-level", "KXM_LOG_LEVEL"],
    ["stale-after-ms", "KXM_STALE_AFTER_MS"], ["message-ttl-ms", "KXM_MESSAGE_TTL_MS"],
    ["message-retention-ms", "KXM_MESSAGE_RETENTION_MS"], ["agent-retention-ms", "KXM_AGENT_RETENTION_MS"],
    ["mcp-max-sessions", "KXM_MCP_MAX_SESSIONS"], ["mcp-session-idle-ms", "KXM_MCP_SESSION_IDLE_MS"],
    ["rate-limit-max", "KXM_RATE_LIMIT_MAX"],
    ["rate-limit-window-ms", "KXM_RATE_LIMIT_WINDOW_MS"], ["cors-origins", "KXM_CORS_ORIGINS"],
    ["sqlite-synchronous", "KXM_SQLITE_SYNCHRONOUS"], ["stream-keepalive-ms", "KXM_STREAM_KEEPALIVE_MS"],
    ["stream-max-lag", "KXM_STREAM_MAX_LAG"], ["sync-threads", "KXM_SYNC_THREADS"], ["tls-cert", "KXM_TLS_CERT"], ["tls-key", "KXM_TLS_KEY"], ["tls-client-ca", "KXM_TLS_CLIENT_CA"],
  ];
  const expected: Record<string, [string, string | undefined][]> = {
    serve: serveFlags.map(([f, e]) => [f!, e]),
    backup: [["data-path", "KXM_DATA_PATH"], ["out", undefined]],
    restore: [["from", undefined], ["data-path", "KXM_DATA_PATH"], ["bump-fence", undefined]],
  };

  /** `--flag <value>  ENV` lines, each followed by a line with its meaning and default. */
  function documented(help: string): Map<string, { env: string | undefined; doc: string }> {
    const lines = help.split("\n");
    const out = new Map<string, { env: string | undefined; doc: string }>();
    lines.forEach((line, i) => {
      const m = /^ {2}--([a-z-]+) <[a-z]+>\s*(KXM_[A-Z_]+)?$/.exec(line);
      if (m) out.set(m[1]!, { env: m[2], doc: lines[i + 1] ?? "" });
    });
    return out;
  }

  it.each(Object.keys(expected))("kxm-hub %s --help lists every flag with its meaning and default", async (command) => {
    const r = await runCli([command, "--help"]);
    expect(r.code).toBe(0);
    const flags = documented(r.stdout);
    expect([...flags.keys()]).toEqual(expected[command]!.map(([f]) => f));
    for (const [flag, env] of expected[command]!) {
      expect(flags.get(flag)!.env, flag).toBe(env);
      expect(flags.get(flag)!.doc, flag).toMatch(/^ {6}\S.* \(default: .+\)$/);
    }
    expect(r.stdout).toContain("--help, -h");
  });

  it("serve's defaults are the documented ones", async () => {
    const help = documented((await runCli(["serve", "--help"])).stdout);
    expect(help.get("port")!.doc).toContain("(default: 7331)");
    expect(help.get("log-path")!.doc).toContain("- writes the log to stdout");
    expect(help.get("stream-keepalive-ms")!.doc).toContain("(default: min(15000, stale-after / 2)");
    expect(help.get("data-path")!.doc).toContain(`(default: ${path.join(".kxm", "state", "kxm.db")})`);
  });

  it("npx kxm-hub runs the checkout's command", async () => {
    const child = spawn("npx", ["--no-install", "kxm-hub", "--help"], { cwd: repo, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    const code = await new Promise((resolve) => child.once("close", resolve));
    expect(code).toBe(0);
    expect(stdout).toMatch(/^Usage: kxm-hub \[serve\] \[flags\]/);
    expect(stdout).toContain("kxm-hub backup --out <file>");
  });
});
