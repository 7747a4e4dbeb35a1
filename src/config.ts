import { parseArgs } from "node:util";
import path from "node:path";
import { projectNameProblem } from "./validate.js";

/** Hub configuration: the reference hub's environment variables, plus matching CLI flags. */
export interface HubConfig {
  host: string;
  /** 0..65535; 0 picks an ephemeral port. */
  port: number;
  /** Admin token; undefined when not configured. */
  authToken: string | undefined;
  /** Per-project bearer tokens. */
  projectTokens: Record<string, string>;
  /** SQLite file path, or ":memory:". */
  dataPath: string;
  /** JSON-lines log file; undefined logs to stdout only. */
  logPath: string | undefined;
  staleAfterMs: number;
  messageTtlMs: number;
  messageRetentionMs: number;
  cleanupIntervalMs: number;
  shutdownGraceMs: number;
  /** false disables rate limiting. */
  rateLimit: { windowMs: number; maxRequests: number } | false;
  /** Allowed browser origins; ["*"] allows any, [] sends no CORS headers. */
  corsOrigins: string[];
  /** SQLite `synchronous` pragma; FULL makes every answered decision survive power loss. */
  sqliteSynchronous: "full" | "normal";
  /** Largest request body in bytes. */
  maxBodyBytes: number;
  /** Idle time after which a stream sends a keep-alive frame. */
  streamKeepAliveMs: number;
  /** Events a stream may fall behind (or buffer) before it is cut off with a resume cursor. */
  streamMaxLag: number;
}

/** Invalid configuration: the hub refuses to start. */
export class ConfigError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ConfigError";
  }
}

export const defaultConfig: HubConfig = {
  host: "127.0.0.1",
  port: 7331,
  authToken: undefined,
  projectTokens: {},
  dataPath: path.join(".kxm", "state", "kxm.db"),
  logPath: path.join(".kxm", "logs", "kxm-hub.jsonl"),
  staleAfterMs: 30_000,
  messageTtlMs: 86_400_000,
  messageRetentionMs: 604_800_000,
  cleanupIntervalMs: 10_000,
  shutdownGraceMs: 5_000,
  rateLimit: { windowMs: 60_000, maxRequests: 600 },
  corsOrigins: [],
  sqliteSynchronous: "full",
  maxBodyBytes: 262_144,
  streamKeepAliveMs: 15_000,
  streamMaxLag: 1_024,
};

/** Exactly `localhost`, `::1`, or an IPv4 literal starting `127.`. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function int(name: string, raw: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError("invalid_config", `${name} must be an integer`);
  const n = Number(raw.trim());
  if (n < min || n > max) throw new ConfigError("invalid_config", `${name} must be between ${min} and ${max}`);
  return n;
}

function projectTokens(raw: string): Record<string, string> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError("invalid_config", "KXM_PROJECT_TOKENS must be a JSON object");
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError("invalid_config", "KXM_PROJECT_TOKENS must be a JSON object");
  }
  const entries = Object.entries(parsed).map(([project, token]): [string, string] => {
    if (project.trim() === "" || typeof token !== "string" || token.trim() === "") {
      throw new ConfigError("invalid_config", "KXM_PROJECT_TOKENS needs non-empty project names and tokens");
    }
    return [project, token.trim()];
  });
  // fromEntries defines own properties: a project named `__proto__` keeps its token.
  return Object.fromEntries(entries);
}

/**
 * Every project named in the token table must be a name the hub accepts, exactly as written.
 * @NOTE README §5.1: names are no longer trimmed, so " p " cannot quietly become "p" (and two
 * keys can never collapse into one project); the rule is the one requests get (validate.ts).
 */
function checkProjectTokenNames(tokens: Record<string, string>): void {
  for (const project of Object.keys(tokens)) {
    const problem = projectNameProblem(project);
    if (problem !== undefined) {
      throw new ConfigError("invalid_config", `KXM_PROJECT_TOKENS project name ${JSON.stringify(project)} ${problem}`);
    }
  }
}

/** CLI flag -> environment variable; a flag wins over the variable. */
const flags = {
  host: "KXM_HOST",
  port: "KXM_PORT",
  "auth-token": "KXM_AUTH_TOKEN",
  "project-tokens": "KXM_PROJECT_TOKENS",
  "data-path": "KXM_DATA_PATH",
  "log-path": "KXM_LOG_PATH",
  "stale-after-ms": "KXM_STALE_AFTER_MS",
  "message-ttl-ms": "KXM_MESSAGE_TTL_MS",
  "message-retention-ms": "KXM_MESSAGE_RETENTION_MS",
  "rate-limit-max": "KXM_RATE_LIMIT_MAX",
  "rate-limit-window-ms": "KXM_RATE_LIMIT_WINDOW_MS",
  "cors-origins": "KXM_CORS_ORIGINS",
  "sqlite-synchronous": "KXM_SQLITE_SYNCHRONOUS",
  "stream-keepalive-ms": "KXM_STREAM_KEEPALIVE_MS",
  "stream-max-lag": "KXM_STREAM_MAX_LAG",
} as const;

export const configHelp = Object.entries(flags)
  .map(([flag, env]) => `  --${flag.padEnd(22)} ${env}`)
  .join("\n");

/** Reads the configuration from CLI arguments and the environment; throws ConfigError. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): HubConfig {
  const { values } = parseArgs({
    args: argv,
    options: Object.fromEntries(Object.keys(flags).map((f) => [f, { type: "string" as const }])),
    strict: true,
  });
  const get = (flag: keyof typeof flags): string | undefined => {
    const v = (values as Record<string, string | undefined>)[flag] ?? env[flags[flag]];
    return v === undefined || v.trim() === "" ? undefined : v;
  };
  const c: HubConfig = { ...defaultConfig };
  const host = get("host");
  if (host) c.host = host.trim();
  const port = get("port");
  if (port) c.port = int("KXM_PORT", port, 0, 65_535);
  c.authToken = get("auth-token")?.trim();
  const tokens = get("project-tokens");
  if (tokens) c.projectTokens = projectTokens(tokens);
  const dataPath = get("data-path");
  if (dataPath) c.dataPath = dataPath.trim();
  const logPath = get("log-path");
  if (logPath) c.logPath = logPath.trim();
  const stale = get("stale-after-ms");
  if (stale) c.staleAfterMs = int("KXM_STALE_AFTER_MS", stale, 100);
  const ttl = get("message-ttl-ms");
  if (ttl) c.messageTtlMs = int("KXM_MESSAGE_TTL_MS", ttl, 1_000);
  const retention = get("message-retention-ms");
  if (retention) c.messageRetentionMs = int("KXM_MESSAGE_RETENTION_MS", retention, 1_000);
  const max = get("rate-limit-max");
  const windowMs = get("rate-limit-window-ms");
  if (max || windowMs) {
    const base = defaultConfig.rateLimit as { windowMs: number; maxRequests: number };
    c.rateLimit = {
      maxRequests: max ? int("KXM_RATE_LIMIT_MAX", max, 1) : base.maxRequests,
      windowMs: windowMs ? int("KXM_RATE_LIMIT_WINDOW_MS", windowMs, 100) : base.windowMs,
    };
  }
  const cors = get("cors-origins");
  if (cors) c.corsOrigins = cors.split(",").map((o) => o.trim()).filter(Boolean);
  const sync = get("sqlite-synchronous");
  if (sync) {
    const s = sync.trim().toLowerCase();
    if (s !== "full" && s !== "normal") {
      throw new ConfigError("invalid_config", "KXM_SQLITE_SYNCHRONOUS must be full or normal");
    }
    c.sqliteSynchronous = s;
  }
  const keepAlive = get("stream-keepalive-ms");
  if (keepAlive) c.streamKeepAliveMs = int("KXM_STREAM_KEEPALIVE_MS", keepAlive, 100);
  const maxLag = get("stream-max-lag");
  if (maxLag) c.streamMaxLag = int("KXM_STREAM_MAX_LAG", maxLag, 1);
  c.cleanupIntervalMs = Math.max(250, Math.floor(c.staleAfterMs / 3));
  return validateConfig(c);
}

/** The construction-time checks of the reference hub; throws ConfigError. */
export function validateConfig(c: HubConfig): HubConfig {
  if (!isLoopback(c.host) && !c.authToken) {
    throw new ConfigError("invalid_config", "KXM_AUTH_TOKEN is required when binding beyond localhost");
  }
  if (c.staleAfterMs < 100) throw new ConfigError("invalid_config", "staleAfterMs must be >= 100");
  if (c.messageTtlMs < 1_000) throw new ConfigError("invalid_config", "messageTtlMs must be >= 1000");
  if (c.messageRetentionMs < 1_000) throw new ConfigError("invalid_config", "messageRetentionMs must be >= 1000");
  if (c.streamKeepAliveMs >= c.staleAfterMs) {
    // An open stream keeps its agent online through its keep-alives.
    throw new ConfigError("invalid_config", "KXM_STREAM_KEEPALIVE_MS must be below KXM_STALE_AFTER_MS");
  }
  checkProjectTokenNames(c.projectTokens);
  if (c.shutdownGraceMs < 0) throw new ConfigError("invalid_config", "shutdownGraceMs must be >= 0");
  if (c.rateLimit && (c.rateLimit.windowMs < 100 || c.rateLimit.maxRequests < 1)) {
    throw new ConfigError("invalid_config", "rate limit needs windowMs >= 100 and maxRequests >= 1");
  }
  return c;
}
