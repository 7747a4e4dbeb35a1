import net from "node:net";
import { ConfigError, configHelp, isLoopback, loadConfig, redactedDatabaseUrl, type HubConfig } from "../config.js";
import { createHub, type Hub } from "../hub.js";
import { prepareLogFile } from "../ops/log-destination.js";

export const serveHelp = `Usage: kxm-hub serve [flags]   (plain \`kxm-hub [flags]\` is the same)

Starts the hub. Each flag overrides its environment variable; an empty variable counts as unset.
A refusal prints \`kxm-hub: <code>: <message>\` on stderr and exits 1 without creating anything.

${configHelp}
  --help, -h
      this text`;

/** What a failed listen means to the operator. */
function listenRefusal(e: unknown, config: HubConfig): ConfigError {
  const code = (e as { code?: string }).code;
  const where = `${config.host}:${config.port}`;
  if (code === "EADDRINUSE") return new ConfigError("address_in_use", `${where} is already in use (KXM_HOST, KXM_PORT)`);
  return new ConfigError("invalid_config", `cannot listen on ${where} (KXM_HOST, KXM_PORT): ${code ?? (e as Error).message}`);
}

/**
 * Binds the configured address and lets it go again, so that a taken port is refused before the
 * store is created or opened. (A port taken between this probe and the hub's own listen is still
 * refused as address_in_use; the fresh store then stays on disk.)
 */
function probeAddress(config: HubConfig): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once("error", (e) => reject(listenRefusal(e, config)));
    probe.listen({ port: config.port, host: config.host, exclusive: true }, () => probe.close(() => resolve()));
  });
}

/**
 * `kxm-hub serve`: configuration -> the address (probed, nothing created) -> the log file
 * (opened once, undone on a later refusal) -> createHub (the store: lock, schema) -> listen ->
 * the start-up line, printed only once the hub serves. SIGINT/SIGTERM shut down gracefully.
 * Throws ConfigError or StoreOpenError; a refused start leaves nothing on disk.
 */
export async function serveCommand(argv: string[]): Promise<void> {
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(`${serveHelp}\n`);
    return;
  }
  const config = loadConfig(argv, process.env);
  await probeAddress(config);
  const undoLog = prepareLogFile(config.logPath);
  let hub: Hub;
  try {
    hub = await createHub(config); // the store refuses here: it removes what it created itself
  } catch (e) {
    undoLog();
    throw e;
  }
  let url: string;
  try {
    ({ url } = await hub.listen());
  } catch (e) {
    await hub.close();
    undoLog();
    throw listenRefusal(e, config);
  }
  // The handlers stay installed and a second signal is ignored: Ctrl-C under `npm start` reaches
  // the hub twice (the terminal signals the whole process group, and npm forwards its own copy),
  // and the default action of that second SIGINT would cut the graceful stop short. The stop is
  // bounded anyway (shutdownGraceMs); SIGKILL remains for an operator who will not wait.
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    hub.observer.log("hub_stopping", { signal });
    hub.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  // Installed before the start-up line: a supervisor may signal as soon as it reads it, and a
  // signal with no handler yet would kill the hub outright (its buffered log lines lost with it).
  // A signal's handler runs on a later tick, so hub_started is still logged before hub_stopping.
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
  if (!config.authToken) process.stderr.write("warning: no KXM_AUTH_TOKEN; loopback callers are trusted as admin\n");
  // Tokens and agent keys beyond this host would cross the network readable by anyone on the path.
  const plaintextBeyondLoopback = !config.tlsCert && !isLoopback(config.host);
  if (plaintextBeyondLoopback) {
    process.stderr.write(`warning: ${config.host} is beyond loopback and the port speaks plaintext; tokens cross the network readable (set KXM_TLS_CERT and KXM_TLS_KEY)\n`);
  }
  // A database URL is shown without its password.
  const storage = config.databaseUrl ? redactedDatabaseUrl(config.databaseUrl) : config.dataPath;
  const tls = !config.tlsCert ? "off" : config.tlsClientCa ? "mutual" : "on";
  // The URL says https; `tls=` is added only when on, so the plaintext line stays as it was.
  const tlsPart = tls === "off" ? "" : `; tls=${tls}`;
  process.stdout.write(`kxm hub listening at ${url}; storage=${storage}; auth=${config.authToken ? "token" : "none"}${tlsPart}\n`);
  hub.observer.log("hub_started", { url, storage, tls });
  if (plaintextBeyondLoopback) hub.observer.log("plaintext_beyond_loopback", { host: config.host, fix: "KXM_TLS_CERT and KXM_TLS_KEY" });
}
