import fs from "node:fs";
import path from "node:path";
import pino from "pino";
import type { Observer } from "../observe.js";
import type { Metrics } from "./metrics.js";

/** JSON-lines logger: one object per event, `event` holding the reference hub's event name. */
export function createLogger(logPath: string | undefined): pino.Logger {
  const options: pino.LoggerOptions = { base: undefined, timestamp: pino.stdTimeFunctions.isoTime, messageKey: "msg" };
  if (!logPath) return pino(options, pino.destination({ dest: 1, sync: false }));
  fs.mkdirSync(path.dirname(path.resolve(logPath)), { recursive: true, mode: 0o700 });
  return pino(options, pino.destination({ dest: logPath, sync: false, mkdir: true }));
}

/** The Observer domain code reports to: log lines and Prometheus counters. */
export function createObserver(logger: pino.Logger | undefined, metrics: Metrics, tap?: Observer): Observer {
  return {
    log(event, fields) {
      logger?.info({ event, ...fields });
      tap?.log(event, fields);
    },
    count(counter, by) {
      metrics.count(counter, by);
      tap?.count(counter, by);
    },
  };
}
