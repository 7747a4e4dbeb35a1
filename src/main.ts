import { ConfigError, configHelp, loadConfig } from "./config.js";
import { createHub } from "./hub.js";
import { StoreOpenError } from "./store/store.js";

/** CLI: configuration -> createHub -> listen; SIGINT/SIGTERM shut down gracefully. */
async function main(): Promise<void> {
  if (process.argv.includes("--help")) {
    process.stdout.write(`kxm-hub [flags]\nEach flag overrides its environment variable:\n${configHelp}\n`);
    return;
  }
  const config = loadConfig(process.argv.slice(2), process.env);
  const hub = await createHub(config);
  const { url } = await hub.listen();
  if (!config.authToken) process.stderr.write("warning: no KXM_AUTH_TOKEN; loopback callers are trusted as admin\n");
  process.stdout.write(
    `kxm hub listening at ${url}; storage=${config.dataPath}; auth=${config.authToken ? "token" : "none"}\n`,
  );
  hub.observer.log("hub_started", { url, storage: config.dataPath });
  const stop = (signal: string) => {
    hub.observer.log("hub_stopping", { signal });
    hub.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
}

main().catch((e: unknown) => {
  if (e instanceof ConfigError || e instanceof StoreOpenError) {
    process.stderr.write(`kxm-hub: ${e.code}: ${e.message}\n`);
  } else {
    process.stderr.write(`kxm-hub: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  }
  process.exit(1);
});
