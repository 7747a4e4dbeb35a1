import path from "node:path";
import { defaultConfig, type HubConfig } from "../../src/config.js";

/**
 * A benchmark hub's configuration: loopback on a free port, its database in `dir`, rate limits
 * and the log file off, the given durability, a short shutdown; `extra` on top.
 */
export function benchHubConfig(dir: string, sync: HubConfig["sqliteSynchronous"], extra: Partial<HubConfig> = {}): HubConfig {
  return {
    ...defaultConfig,
    port: 0,
    host: "127.0.0.1",
    dataPath: path.join(dir, "kxm.db"),
    logPath: undefined,
    rateLimit: false,
    sqliteSynchronous: sync,
    shutdownGraceMs: 1_000,
    ...extra,
  };
}
