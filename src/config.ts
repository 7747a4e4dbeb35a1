import { parseArgs } from "node:util";
import os from "node:os";
import path from "node:path";
import { messageTtlRangeMs } from "./domain.js";
import { projectNameProblem } from "./validate.js";

export const logLevels = ["debug", "info", "warn", "error"] as const;
export type LogLevel = (typeof logLevels)[number];

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
  /**
   * A PostgreSQL URL (`postgres://user:password@host:port/database`): the hub stores everything
   * there instead of the SQLite file, so several hub processes can share it. Undefined: SQLite.
   */
  databaseUrl: string | undefined;
  /** Connections the hub opens to PostgreSQL. */
  databasePoolSize: number;
  /**
   * JSON-lines log file; undefined (`KXM_LOG_PATH=-`) logs to stdout. loadConfig derives it from
   * the data path unless it is set (defaultLogPathOf).
   */
  logPath: string | undefined;
  /** Lowest level written: `debug` adds a `request_completed` line per call. */
  logLevel: LogLevel;
  staleAfterMs: number;
  messageTtlMs: number;
  messageRetentionMs: number;
  /** Offline agents that nothing open names are forgotten after this long. */
  agentRetentionMs: number;
  /** MCP sessions open at once (`/mcp`). */
  mcpMaxSessions: number;
  /** An MCP session unused this long is closed. */
  mcpSessionIdleMs: number;
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
  /**
   * Idle time after which a stream sends a keep-alive frame; below staleAfterMs (an open stream
   * keeps its agent online). loadConfig derives it from staleAfterMs unless it is set.
   */
  streamKeepAliveMs: number;
  /** Events a stream may fall behind (or buffer) before it is cut off with a resume cursor. */
  streamMaxLag: number;
  /** Worker threads that check and hash pushed sync events; 0 does it on the hub's thread. */
  syncThreads: number;
  /**
   * PEM certificate (the leaf first, then any intermediates) the port serves TLS with; undefined
   * serves plaintext. Needs tlsKey.
   */
  tlsCert: string | undefined;
  /** PEM private key of tlsCert (not encrypted). */
  tlsKey: string | undefined;
  /**
   * PEM bundle of the CAs that sign client certificates: when set, every connection must present
   * one (mutual TLS). It admits a host to the port; the bearer token still names the project.
   */
  tlsClientCa: string | undefined;
  /**
   * How often the TLS files are polled for a change (a new certificate is served to new
   * connections without a restart). Not a flag: tests shorten it.
   */
  tlsReloadIntervalMs: number;
  /**
   * Which path serves plain Connect unary calls and server streams: "fast" (src/wire/unary.ts and
   * stream.ts, held to connect's answers byte for byte) or "connect" (connect's own handlers for
   * every call; the test command runs the protocol suites this way too).
   */
  wire: "fast" | "connect";
}

/**
 * The hub refuses to start with what it was given: `invalid_config` (a value, flag or command it
 * does not accept), `address_in_use` (the host and port are taken), `log_path_invalid` (the log
 * file cannot be opened for appending). The store's own refusals are StoreOpenError's.
 */
export class ConfigError extends Error {
  constructor(
    readonly code: "invalid_config" | "address_in_use" | "log_path_invalid",
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
  databaseUrl: undefined,
  databasePoolSize: 10,
  // The log of a hub with no SQLite file of its own (defaultLogPathOf).
  logPath: path.join(".kxm", "logs", "kxm-hub.jsonl"),
  logLevel: "info",
  staleAfterMs: 30_000,
  messageTtlMs: 86_400_000,
  messageRetentionMs: 604_800_000,
  agentRetentionMs: 2_592_000_000,
  mcpMaxSessions: 1_000,
  mcpSessionIdleMs: 1_800_000,
  cleanupIntervalMs: 10_000,
  shutdownGraceMs: 5_000,
  rateLimit: { windowMs: 60_000, maxRequests: 600 },
  corsOrigins: [],
  sqliteSynchronous: "full",
  maxBodyBytes: 262_144,
  streamKeepAliveMs: 15_000,
  streamMaxLag: 1_024,
  syncThreads: defaultSyncThreads(),
  tlsCert: undefined,
  tlsKey: undefined,
  tlsClientCa: undefined,
  tlsReloadIntervalMs: 1_000,
  wire: "fast",
};

/** One thread per core beyond the hub's own, at most 4 (a push of 100 events keeps one busy for ~2 ms). */
function defaultSyncThreads(): number {
  return Math.max(0, Math.min(4, os.availableParallelism() - 1));
}

/** A PostgreSQL URL, or invalid_config (the message never repeats it: it may hold a password). */
export function postgresUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError("invalid_config", "KXM_DATABASE_URL must be a URL: postgres://user:password@host:port/database");
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new ConfigError("invalid_config", "KXM_DATABASE_URL must start with postgres:// or postgresql://");
  }
  return raw;
}

/** The database URL as it may be shown (start-up line, logs): without its password. */
export function redactedDatabaseUrl(raw: string): string {
  const url = new URL(raw);
  url.password = "";
  // The driver also takes secrets from the query (pg-connection-string): none is shown.
  for (const key of [...url.searchParams.keys()]) {
    if (/pass|secret|key|token/i.test(key)) url.searchParams.set(key, "redacted");
  }
  return url.toString();
}

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
 * @NOTE decision D44: names are no longer trimmed, so " p " cannot quietly become "p" (and two
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

/**
 * The log file when KXM_LOG_PATH is not set: beside the SQLite file and named after it
 * (`<data path>.log.jsonl`, as its lock is `<data path>.lock`), so two hubs on different data
 * paths never write to one log. A hub with no file of its own (`:memory:`, PostgreSQL) logs to
 * .kxm/logs/kxm-hub.jsonl.
 */
export const defaultLogPathOf = (c: Pick<HubConfig, "dataPath" | "databaseUrl">): string =>
  c.databaseUrl !== undefined || c.dataPath === ":memory:" ? defaultConfig.logPath! : `${c.dataPath}.log.jsonl`;

/** The stream keep-alive when KXM_STREAM_KEEPALIVE_MS is not set: 15 s, or half of stale-after. */
export const defaultKeepAliveMs = (staleAfterMs: number) =>
  Math.min(defaultConfig.streamKeepAliveMs, Math.floor(staleAfterMs / 2));

export interface FlagDoc {
  /** The environment variable the flag overrides, if any. */
  env?: string;
  /** Placeholder of the value in the help text. */
  value: string;
  meaning: string;
  default: string;
}

/** CLI flag -> environment variable, meaning and default (the help text and docs/configuration.md). */
const flags = {
  host: {
    env: "KXM_HOST",
    value: "addr",
    meaning: "bind address; a non-loopback address needs KXM_AUTH_TOKEN",
    default: defaultConfig.host,
  },
  port: { env: "KXM_PORT", value: "n", meaning: "port, 0..65535 (0 = ephemeral)", default: String(defaultConfig.port) },
  "auth-token": { env: "KXM_AUTH_TOKEN", value: "token", meaning: "admin token", default: "none (loopback callers trusted as admin)" },
  "project-tokens": {
    env: "KXM_PROJECT_TOKENS",
    value: "json",
    meaning: "JSON object {project: token}",
    default: "none",
  },
  "data-path": { env: "KXM_DATA_PATH", value: "file", meaning: "SQLite file, or :memory:", default: defaultConfig.dataPath },
  "database-url": {
    env: "KXM_DATABASE_URL",
    value: "url",
    meaning: "postgres://user:password@host:port/database: store everything in PostgreSQL instead of the SQLite file, so several hubs can share it",
    default: "none (SQLite)",
  },
  "database-pool-size": {
    env: "KXM_DATABASE_POOL_SIZE",
    value: "n",
    meaning: "pooled connections to PostgreSQL, 2..1000 (plus one that listens for the other replicas' inbox events)",
    default: String(defaultConfig.databasePoolSize),
  },
  "log-path": {
    env: "KXM_LOG_PATH",
    value: "file",
    meaning: "JSON-lines log file; - writes the log to stdout",
    default: `<data path>.log.jsonl, ${defaultLogPathOf(defaultConfig)} with the default data path; ${defaultConfig.logPath} with :memory: or a database URL`,
  },
  "log-level": {
    env: "KXM_LOG_LEVEL",
    value: "level",
    meaning: "lowest level logged: debug (adds request_completed per call), info, warn, error",
    default: defaultConfig.logLevel,
  },
  "stale-after-ms": {
    env: "KXM_STALE_AFTER_MS",
    value: "ms",
    meaning: "presence lease of an agent or runtime, >= 100",
    default: String(defaultConfig.staleAfterMs),
  },
  "message-ttl-ms": {
    env: "KXM_MESSAGE_TTL_MS",
    value: "ms",
    meaning: "default message TTL, >= 1000",
    default: String(defaultConfig.messageTtlMs),
  },
  "message-retention-ms": {
    env: "KXM_MESSAGE_RETENTION_MS",
    value: "ms",
    meaning: "retention of ended messages, >= 1000",
    default: String(defaultConfig.messageRetentionMs),
  },
  "agent-retention-ms": {
    env: "KXM_AGENT_RETENTION_MS",
    value: "ms",
    meaning: "offline agents with no open message and no live lease are forgotten after this long, >= 60000",
    default: String(defaultConfig.agentRetentionMs),
  },
  "mcp-max-sessions": {
    env: "KXM_MCP_MAX_SESSIONS",
    value: "n",
    meaning: "MCP sessions open at once, 1..100000",
    default: String(defaultConfig.mcpMaxSessions),
  },
  "mcp-session-idle-ms": {
    env: "KXM_MCP_SESSION_IDLE_MS",
    value: "ms",
    meaning: "an MCP session unused this long is closed, >= 10000",
    default: String(defaultConfig.mcpSessionIdleMs),
  },
  "rate-limit-max": {
    env: "KXM_RATE_LIMIT_MAX",
    value: "n",
    meaning: "requests per window and identity",
    default: String((defaultConfig.rateLimit as { maxRequests: number }).maxRequests),
  },
  "rate-limit-window-ms": {
    env: "KXM_RATE_LIMIT_WINDOW_MS",
    value: "ms",
    meaning: "rate window, >= 100",
    default: String((defaultConfig.rateLimit as { windowMs: number }).windowMs),
  },
  "cors-origins": {
    env: "KXM_CORS_ORIGINS",
    value: "list",
    meaning: "comma-separated browser origins, or *",
    default: "none (no CORS headers)",
  },
  "sqlite-synchronous": {
    env: "KXM_SQLITE_SYNCHRONOUS",
    value: "mode",
    meaning: "full or normal (docs/leases.md, Durability)",
    default: defaultConfig.sqliteSynchronous,
  },
  "stream-keepalive-ms": {
    env: "KXM_STREAM_KEEPALIVE_MS",
    value: "ms",
    meaning: "idle time before a stream sends a keep-alive frame, >= 100 and below the stale-after time",
    default: `min(${defaultConfig.streamKeepAliveMs}, stale-after / 2), ${defaultConfig.streamKeepAliveMs} with the default stale-after`,
  },
  "stream-max-lag": {
    env: "KXM_STREAM_MAX_LAG",
    value: "n",
    meaning: "events a stream may fall behind before it is cut off (resumable)",
    default: String(defaultConfig.streamMaxLag),
  },
  "sync-threads": {
    env: "KXM_SYNC_THREADS",
    value: "n",
    meaning: "worker threads that check and hash pushed sync events, 0..16 (0: the hub's own thread)",
    default: `cores - 1, at most 4 (${defaultConfig.syncThreads} here)`,
  },
  "tls-cert": {
    env: "KXM_TLS_CERT",
    value: "file",
    meaning: "PEM certificate chain: the port speaks TLS (https://, HTTP/2 by ALPN) and no plaintext; needs KXM_TLS_KEY; reloaded when the file changes",
    default: "none (plaintext)",
  },
  "tls-key": {
    env: "KXM_TLS_KEY",
    value: "file",
    meaning: "PEM private key of KXM_TLS_CERT",
    default: "none",
  },
  "tls-client-ca": {
    env: "KXM_TLS_CLIENT_CA",
    value: "file",
    meaning: "PEM CA bundle: every client must present a certificate it signed (mutual TLS); the bearer token still names the project",
    default: "none (no client certificates)",
  },
  wire: {
    env: "KXM_WIRE",
    value: "fast|connect",
    meaning: "connect: serve every RPC through connect's own handlers, without the in-process fast path for plain Connect calls (the answers are the same bytes; for checking that)",
    default: defaultConfig.wire,
  },
} as const satisfies Record<string, FlagDoc>;

/** Help lines for a flag table: `--flag <value>  ENV`, then its meaning and default. */
export function flagHelp(table: Record<string, FlagDoc>): string {
  return Object.entries(table)
    .map(([flag, d]) => {
      const head = `  --${`${flag} <${d.value}>`.padEnd(30)} ${d.env ?? ""}`.trimEnd();
      return `${head}\n      ${d.meaning} (default: ${d.default})`;
    })
    .join("\n");
}

/** The serve command's flags, each with its environment variable, meaning and default. */
export const configHelp = flagHelp(flags);

/** True for the problems util.parseArgs reports about the arguments (unknown flag, missing value). */
export const isArgumentError = (e: unknown) => /^ERR_PARSE_ARGS_/.test((e as { code?: string }).code ?? "");
/** A parseArgs error's message as the one line a refusal is (node:util writes some on several). */
export const argumentMessage = (e: unknown) => (e as Error).message.replace(/\s*\n\s*/g, " ");

/** Reads the configuration from CLI arguments and the environment; throws ConfigError. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): HubConfig {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: Object.fromEntries(Object.keys(flags).map((f) => [f, { type: "string" as const }])),
      strict: true,
    }));
  } catch (e) {
    if (isArgumentError(e)) throw new ConfigError("invalid_config", argumentMessage(e));
    throw e;
  }
  const get = (flag: keyof typeof flags): string | undefined => {
    const v = (values as Record<string, string | undefined>)[flag] ?? env[flags[flag].env];
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
  const databaseUrl = get("database-url");
  if (databaseUrl) c.databaseUrl = postgresUrl(databaseUrl.trim());
  const poolSize = get("database-pool-size");
  if (poolSize) c.databasePoolSize = int("KXM_DATABASE_POOL_SIZE", poolSize, 2, 1000);
  const logPath = get("log-path");
  // `-` is the container convention for standard output.
  c.logPath = !logPath ? defaultLogPathOf(c) : logPath.trim() === "-" ? undefined : logPath.trim();
  const level = get("log-level");
  if (level) {
    const l = level.trim().toLowerCase();
    if (!logLevels.includes(l as LogLevel)) throw new ConfigError("invalid_config", `KXM_LOG_LEVEL must be one of ${logLevels.join(", ")}`);
    c.logLevel = l as LogLevel;
  }
  const stale = get("stale-after-ms");
  if (stale) c.staleAfterMs = int("KXM_STALE_AFTER_MS", stale, 100);
  const ttl = get("message-ttl-ms");
  if (ttl) c.messageTtlMs = int("KXM_MESSAGE_TTL_MS", ttl, 1_000);
  const retention = get("message-retention-ms");
  if (retention) c.messageRetentionMs = int("KXM_MESSAGE_RETENTION_MS", retention, 1_000);
  const mcpSessions = get("mcp-max-sessions");
  if (mcpSessions) c.mcpMaxSessions = int("KXM_MCP_MAX_SESSIONS", mcpSessions, 1);
  const mcpIdle = get("mcp-session-idle-ms");
  if (mcpIdle) c.mcpSessionIdleMs = int("KXM_MCP_SESSION_IDLE_MS", mcpIdle, 10_000);
  const agentRetention = get("agent-retention-ms");
  if (agentRetention) c.agentRetentionMs = int("KXM_AGENT_RETENTION_MS", agentRetention, 60_000);
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
  if (keepAlive) {
    c.streamKeepAliveMs = int("KXM_STREAM_KEEPALIVE_MS", keepAlive, 100);
    if (c.streamKeepAliveMs >= c.staleAfterMs) {
      // Only a value the user set can conflict; the derived one is always below.
      throw new ConfigError(
        "invalid_config",
        `KXM_STREAM_KEEPALIVE_MS (${c.streamKeepAliveMs}) must be below KXM_STALE_AFTER_MS ` +
          `(${c.staleAfterMs}${stale ? "" : ", the default"}): an open stream keeps its agent online`,
      );
    }
  } else {
    c.streamKeepAliveMs = defaultKeepAliveMs(c.staleAfterMs);
  }
  const maxLag = get("stream-max-lag");
  if (maxLag) c.streamMaxLag = int("KXM_STREAM_MAX_LAG", maxLag, 1);
  const syncThreads = get("sync-threads");
  if (syncThreads) c.syncThreads = int("KXM_SYNC_THREADS", syncThreads, 0, 16);
  c.tlsCert = get("tls-cert")?.trim();
  c.tlsKey = get("tls-key")?.trim();
  c.tlsClientCa = get("tls-client-ca")?.trim();
  const wire = get("wire")?.trim().toLowerCase();
  if (wire !== undefined) {
    if (wire !== "fast" && wire !== "connect") throw new ConfigError("invalid_config", "KXM_WIRE must be fast or connect");
    c.wire = wire;
  }
  c.cleanupIntervalMs = Math.max(250, Math.floor(c.staleAfterMs / 3));
  return validateConfig(c);
}

/**
 * TLS needs both halves of the pair, and client certificates need TLS. The files themselves are
 * read and checked where the hub builds its TLS context (http/tls.ts).
 */
function checkTlsSettings(c: HubConfig): void {
  if (c.tlsCert !== undefined && c.tlsKey === undefined) {
    throw new ConfigError("invalid_config", `KXM_TLS_CERT (${c.tlsCert}) needs KXM_TLS_KEY, its private key`);
  }
  if (c.tlsKey !== undefined && c.tlsCert === undefined) {
    throw new ConfigError("invalid_config", `KXM_TLS_KEY (${c.tlsKey}) needs KXM_TLS_CERT, its certificate`);
  }
  if (c.tlsClientCa !== undefined && c.tlsCert === undefined) {
    throw new ConfigError("invalid_config", `KXM_TLS_CLIENT_CA (${c.tlsClientCa}) needs KXM_TLS_CERT and KXM_TLS_KEY: client certificates are asked for in a TLS handshake`);
  }
  if (!(c.tlsReloadIntervalMs >= 10)) throw new ConfigError("invalid_config", "tlsReloadIntervalMs must be >= 10");
}

/** The longest duration a Node timer takes as it is. */
const maxTimerMs = 2 ** 31 - 1;

/** The settings a timer is set from (directly, or a third of staleAfterMs for the sweep). */
const timerSettings = (c: HubConfig): [string, number][] => [
  ["staleAfterMs", c.staleAfterMs],
  ["streamKeepAliveMs", c.streamKeepAliveMs],
  ["mcpSessionIdleMs", c.mcpSessionIdleMs],
  ["shutdownGraceMs", c.shutdownGraceMs],
  ["tlsReloadIntervalMs", c.tlsReloadIntervalMs],
  ...(c.rateLimit ? [["rateLimit.windowMs", c.rateLimit.windowMs] as [string, number]] : []),
];

/** The construction-time checks of the reference hub; throws ConfigError. */
export function validateConfig(c: HubConfig): HubConfig {
  if (!isLoopback(c.host) && !c.authToken) {
    throw new ConfigError("invalid_config", "KXM_AUTH_TOKEN is required when binding beyond localhost");
  }
  if (c.staleAfterMs < 100) throw new ConfigError("invalid_config", "staleAfterMs must be >= 100");
  if (c.messageTtlMs < 1_000) throw new ConfigError("invalid_config", "messageTtlMs must be >= 1000");
  // @NOTE decision D80: upper bounds the reference leaves out. A timer's duration past 2^31-1 ms
  // is taken as 1 ms by Node (the sweep, every stream's keep-alive would then run back to back),
  // and the default TTL of a message is one a send could give itself.
  for (const [name, value] of timerSettings(c)) {
    if (value > maxTimerMs) throw new ConfigError("invalid_config", `${name} must be at most ${maxTimerMs} (about 24.8 days)`);
  }
  if (c.messageTtlMs > messageTtlRangeMs.max) throw new ConfigError("invalid_config", `messageTtlMs must be at most ${messageTtlRangeMs.max}, the longest TTL a message can have`);
  if (c.messageRetentionMs < 1_000) throw new ConfigError("invalid_config", "messageRetentionMs must be >= 1000");
  if (c.agentRetentionMs < 60_000) throw new ConfigError("invalid_config", "agentRetentionMs must be >= 60000");
  if (c.mcpMaxSessions < 1 || c.mcpMaxSessions > 100_000) throw new ConfigError("invalid_config", "mcpMaxSessions must be 1..100000");
  if (c.mcpSessionIdleMs < 10_000) throw new ConfigError("invalid_config", "mcpSessionIdleMs must be >= 10000");
  if (c.streamKeepAliveMs >= c.staleAfterMs) {
    // An open stream keeps its agent online through its keep-alives.
    throw new ConfigError(
      "invalid_config",
      `streamKeepAliveMs (${c.streamKeepAliveMs}) must be below staleAfterMs (${c.staleAfterMs})`,
    );
  }
  checkProjectTokenNames(c.projectTokens);
  // The admin token is taken for a project's own wherever it is presented, and a project's
  // clients hold their token: one that is both makes each of them the admin.
  const shared = Object.keys(c.projectTokens).find((project) => c.projectTokens[project] === c.authToken);
  if (shared !== undefined) {
    throw new ConfigError("invalid_config", `KXM_AUTH_TOKEN must differ from every project's token: the token of project ${JSON.stringify(shared)} is the admin token`);
  }
  checkTlsSettings(c);
  if (c.shutdownGraceMs < 0) throw new ConfigError("invalid_config", "shutdownGraceMs must be >= 0");
  if (c.rateLimit && (c.rateLimit.windowMs < 100 || c.rateLimit.maxRequests < 1)) {
    throw new ConfigError("invalid_config", "rate limit needs windowMs >= 100 and maxRequests >= 1");
  }
  return c;
}
