import path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, isLoopback, loadConfig, redactedDatabaseUrl } from "../../src/config.js";

const refusal = (argv: string[], env: NodeJS.ProcessEnv) => {
  try {
    loadConfig(argv, env);
  } catch (e) {
    return e;
  }
  return undefined;
};

describe("configuration", () => {
  it("uses the reference defaults", () => {
    const c = loadConfig([], {});
    expect(c).toMatchObject({
      host: "127.0.0.1",
      port: 7331,
      staleAfterMs: 30_000,
      cleanupIntervalMs: 10_000,
      messageTtlMs: 86_400_000,
      messageRetentionMs: 604_800_000,
      rateLimit: { windowMs: 60_000, maxRequests: 600 },
      sqliteSynchronous: "full",
      maxBodyBytes: 262_144,
    });
  });

  it("reads the environment, and a flag wins over its variable", () => {
    const c = loadConfig(["--port", "9000"], {
      KXM_PORT: "8000",
      KXM_PROJECT_TOKENS: '{"p":" tok ","org/repo":"t2"}',
      KXM_RATE_LIMIT_MAX: "5",
      KXM_CORS_ORIGINS: "http://a.example, http://b.example",
      KXM_STALE_AFTER_MS: "3000",
      KXM_STREAM_KEEPALIVE_MS: "1000",
      KXM_SYNC_THREADS: "0",
      KXM_DATABASE_URL: "postgres://hub:s3cret@db.example:5432/kxm",
    });
    expect(c.databaseUrl).toBe("postgres://hub:s3cret@db.example:5432/kxm");
    expect(redactedDatabaseUrl(c.databaseUrl!)).toBe("postgres://hub@db.example:5432/kxm");
    expect(c.port).toBe(9000);
    expect(c.syncThreads).toBe(0);
    expect(c.projectTokens).toEqual({ p: "tok", "org/repo": "t2" });
    expect(c.rateLimit).toEqual({ windowMs: 60_000, maxRequests: 5 });
    expect(c.corsOrigins).toEqual(["http://a.example", "http://b.example"]);
    expect(c.cleanupIntervalMs).toBe(1_000);
  });

  it.each([
    [{ KXM_HOST: "0.0.0.0" }, "KXM_AUTH_TOKEN is required when binding beyond localhost"],
    [{ KXM_PORT: "65536" }, "KXM_PORT"],
    [{ KXM_PORT: "abc" }, "KXM_PORT"],
    [{ KXM_PROJECT_TOKENS: "[]" }, "KXM_PROJECT_TOKENS"],
    [{ KXM_PROJECT_TOKENS: '{"p":""}' }, "KXM_PROJECT_TOKENS"],
    // Decision D44: project names are taken exactly as written, never trimmed into another one.
    [{ KXM_PROJECT_TOKENS: '{" p ":"tok"}' }, 'KXM_PROJECT_TOKENS project name " p " must not start or end with whitespace'],
    [{ KXM_PROJECT_TOKENS: '{"p\\u0001":"tok"}' }, "must not contain control characters"],
    [{ KXM_PROJECT_TOKENS: '{"p\\u0085":"tok"}' }, "must not contain control characters"],
    [{ KXM_PROJECT_TOKENS: JSON.stringify({ ["x".repeat(129)]: "tok" }) }, "exceeds 128 characters"],
    [{ KXM_STALE_AFTER_MS: "99" }, "KXM_STALE_AFTER_MS"],
    [{ KXM_RATE_LIMIT_WINDOW_MS: "50" }, "KXM_RATE_LIMIT_WINDOW_MS"],
    [{ KXM_SQLITE_SYNCHRONOUS: "off" }, "KXM_SQLITE_SYNCHRONOUS"],
    [{ KXM_STREAM_KEEPALIVE_MS: "30000" }, "KXM_STREAM_KEEPALIVE_MS (30000) must be below KXM_STALE_AFTER_MS (30000, the default)"],
    [{ KXM_STALE_AFTER_MS: "1000", KXM_STREAM_KEEPALIVE_MS: "1000" }, "KXM_STREAM_KEEPALIVE_MS (1000) must be below KXM_STALE_AFTER_MS (1000)"],
    [{ KXM_STALE_AFTER_MS: "abc" }, "KXM_STALE_AFTER_MS must be an integer"],
    [{ KXM_SYNC_THREADS: "17" }, "KXM_SYNC_THREADS must be between 0 and 16"],
    [{ KXM_DATABASE_URL: "mysql://u:secret@h/db" }, "KXM_DATABASE_URL must start with postgres:// or postgresql://"],
    [{ KXM_DATABASE_URL: "not a url" }, "KXM_DATABASE_URL must be a URL"],
    [{ KXM_DATABASE_POOL_SIZE: "1" }, "KXM_DATABASE_POOL_SIZE must be between 2 and 1000"],
  ])("refuses %o", (env, message) => {
    const e = refusal([], env);
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).message).toContain(message);
  });

  it("derives the stream keep-alive from the stale-after time unless it is set", () => {
    expect(loadConfig([], {}).streamKeepAliveMs).toBe(15_000);
    expect(loadConfig([], { KXM_STALE_AFTER_MS: "1000" }).streamKeepAliveMs).toBe(500);
    expect(loadConfig([], { KXM_STALE_AFTER_MS: "100" }).streamKeepAliveMs).toBe(50);
    expect(loadConfig([], { KXM_STALE_AFTER_MS: "90000" }).streamKeepAliveMs).toBe(15_000);
    expect(loadConfig(["--stream-keepalive-ms", "900"], { KXM_STALE_AFTER_MS: "1000" }).streamKeepAliveMs).toBe(900);
  });

  it("takes KXM_LOG_PATH=- as standard output", () => {
    expect(loadConfig([], { KXM_LOG_PATH: "-" }).logPath).toBeUndefined();
    expect(loadConfig(["--log-path", "-"], {}).logPath).toBeUndefined();
    expect(loadConfig([], { KXM_LOG_PATH: "./-x" }).logPath).toBe("./-x");
  });

  it("logs beside the data file unless KXM_LOG_PATH is set, so hubs on different data paths never share a log", () => {
    expect(loadConfig([], {}).logPath).toBe(path.join(".kxm", "state", "kxm.db.log.jsonl"));
    const a = loadConfig(["--data-path", "one/kxm.db"], {}).logPath;
    const b = loadConfig([], { KXM_DATA_PATH: "two/kxm.db" }).logPath;
    expect([a, b]).toEqual(["one/kxm.db.log.jsonl", "two/kxm.db.log.jsonl"]);
    // KXM_LOG_PATH still wins, `-` included.
    expect(loadConfig(["--data-path", "one/kxm.db"], { KXM_LOG_PATH: "hub.jsonl" }).logPath).toBe("hub.jsonl");
    expect(loadConfig(["--data-path", "one/kxm.db", "--log-path", "-"], {}).logPath).toBeUndefined();
    // No file of its own: the checkout's shared log, as before.
    const shared = path.join(".kxm", "logs", "kxm-hub.jsonl");
    expect(loadConfig([], { KXM_DATA_PATH: ":memory:" }).logPath).toBe(shared);
    expect(loadConfig([], { KXM_DATABASE_URL: "postgres://hub:s3cret@db.example:5432/kxm" }).logPath).toBe(shared);
  });

  it("refuses an unknown flag as invalid_config", () => {
    const e = refusal(["--nope", "1"], {});
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).code).toBe("invalid_config");
  });

  it("refuses a duration no timer can be set for, and a default message TTL no send could give itself (D80)", () => {
    const refused = (argv: string[]) => {
      const e = refusal([...argv, "--data-path", ":memory:"], {});
      expect(e, argv.join(" ")).toBeInstanceOf(ConfigError);
      return (e as ConfigError).message;
    };
    // Node takes a timer past 2^31-1 ms as 1 ms: the sweep (a third of it) and every keep-alive would run back to back.
    expect(refused(["--stale-after-ms", "7000000000"])).toContain("staleAfterMs must be at most 2147483647");
    expect(refused(["--stale-after-ms", String(2 ** 31), "--stream-keepalive-ms", "100"])).toContain("staleAfterMs");
    expect(refused(["--stream-keepalive-ms", "3000000000", "--stale-after-ms", "2147483647"])).toContain("below");
    expect(refused(["--mcp-session-idle-ms", "2147483648"])).toContain("mcpSessionIdleMs");
    expect(refused(["--rate-limit-window-ms", "2147483648"])).toContain("rateLimit.windowMs");
    expect(refused(["--message-ttl-ms", "604800001"])).toContain("messageTtlMs must be at most 604800000");
    const c = loadConfig(["--stale-after-ms", "2147483647", "--message-ttl-ms", "604800000", "--data-path", ":memory:"], {});
    expect([c.staleAfterMs, c.messageTtlMs, c.cleanupIntervalMs]).toEqual([2 ** 31 - 1, 604_800_000, Math.floor((2 ** 31 - 1) / 3)]);
  });

  it("shows a database URL without a secret its query gives the driver", () => {
    expect(redactedDatabaseUrl("postgres://kxm@db.example:5432/kxm?password=s3cret-pw&sslpassword=k3y&sslmode=require")).toBe(
      "postgres://kxm@db.example:5432/kxm?password=redacted&sslpassword=redacted&sslmode=require",
    );
  });

  it("keeps a token for a project named __proto__ as an own entry", () => {
    const c = loadConfig([], { KXM_PROJECT_TOKENS: '{"__proto__":"tok"}' });
    expect(Object.hasOwn(c.projectTokens, "__proto__")).toBe(true);
    expect(c.projectTokens["__proto__"]).toBe("tok");
  });

  it("refuses an admin token that is also a project's token, and names the project, not the token", () => {
    const e = refusal([], { KXM_AUTH_TOKEN: "same-secret", KXM_PROJECT_TOKENS: '{"p":"other","q":" same-secret "}' });
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).code).toBe("invalid_config");
    expect((e as ConfigError).message).toContain('"q"');
    expect((e as ConfigError).message).not.toContain("same-secret");
    expect(loadConfig([], { KXM_AUTH_TOKEN: "admin", KXM_PROJECT_TOKENS: '{"p":"other"}' }).authToken).toBe("admin");
  });

  it("binds beyond loopback only with an admin token", () => {
    expect(loadConfig([], { KXM_HOST: "0.0.0.0", KXM_AUTH_TOKEN: "admin" }).host).toBe("0.0.0.0");
  });

  it("knows loopback the way the reference does", () => {
    expect(["localhost", "::1", "127.0.0.1", "127.9.9.9"].every(isLoopback)).toBe(true);
    expect(["0.0.0.0", "10.0.0.1", "example.com", "128.0.0.1"].some(isLoopback)).toBe(false);
  });
});
