import pino from "pino";
import type { CallReport, FaceObserver } from "../observe.js";
import { openLogFile } from "./log-destination.js";
import type { Metrics } from "./metrics.js";

/** Bytes of log lines gathered before one write (a write per line cost a visible share of a busy hub). */
const logBufferBytes = 8 * 1024;
/** Longest a log line waits in that buffer. */
const logFlushMs = 100;

export interface HubLogger {
  logger: pino.Logger;
  /** Writes what is buffered and stops the flush timer (hub close). */
  close(): void;
}

/**
 * JSON-lines logger: one object per event, `event` holding the reference hub's event name.
 * `level` is the lowest level written ("debug" adds a `request_completed` line per call).
 * Lines are gathered up to 8 KiB and written at least every 100 ms, off the event loop; a hub
 * killed with SIGKILL loses at most those last lines, and a closed one none.
 */
export function createLogger(logPath: string | undefined, level: pino.LevelWithSilent = "info"): HubLogger {
  const options: pino.LoggerOptions = { base: undefined, level, timestamp: pino.stdTimeFunctions.isoTime, messageKey: "msg" };
  // Opened synchronously: an unusable path refuses the start (log_path_invalid) before listening.
  const dest = pino.destination({ dest: logPath ? openLogFile(logPath) : 1, sync: false, minLength: logBufferBytes });
  const timer = setInterval(() => {
    try {
      dest.flush();
    } catch {
      // a write is in flight: the next tick flushes
    }
  }, logFlushMs);
  timer.unref();
  return {
    logger: pino(options, dest),
    close() {
      clearInterval(timer);
      dest.flushSync();
    },
  };
}

/** Codes that say the hub failed, not the caller. */
const serverFaults = new Set(["internal", "unknown", "data_loss"]);

/**
 * The log line of a finished call: `request_completed` at debug for a success (one per call
 * would flood info under load), `request_error` at info for a refusal and at error when the
 * hub itself failed.
 */
export function callLogLine(r: CallReport): { level: "debug" | "info" | "error"; event: string; fields: Record<string, unknown> } {
  const level = callLogLevel(r);
  const fields: Record<string, unknown> = {
    requestId: r.requestId,
    face: r.face,
    method: r.service === "" ? "" : `${r.service}/${r.method}`,
    route: r.route,
    ...(r.path !== undefined && { path: r.path }),
    caller: r.caller,
    ...(r.statusCode !== undefined && { statusCode: r.statusCode }),
    code: r.reason ?? r.code,
    connectCode: r.code,
    durationMs: Math.round(r.durationMs * 1_000) / 1_000,
  };
  return { level, event: level === "debug" ? "request_completed" : "request_error", fields };
}

/** The level of a finished call's log line (callLogLine), known before its fields are gathered. */
const callLogLevel = (r: CallReport): "debug" | "info" | "error" => (r.code === "ok" ? "debug" : serverFaults.has(r.code) ? "error" : "info");

/**
 * The Observer domain code reports to: log lines and Prometheus metrics. `tap` (tests) sees
 * every log event, the call log lines included, and every counter, call and stream change.
 */
export function createObserver(logger: pino.Logger | undefined, metrics: Metrics, tap?: Partial<FaceObserver>): FaceObserver {
  return {
    log(event, fields) {
      logger?.info({ event, ...fields });
      tap?.log?.(event, fields);
    },
    count(counter, by) {
      metrics.count(counter, by);
      tap?.count?.(counter, by);
    },
    call(report) {
      metrics.call(report);
      // A success's line is at debug: its fields are gathered only when something reads them.
      if (tap?.log || logger?.isLevelEnabled(callLogLevel(report))) {
        const line = callLogLine(report);
        logger?.[line.level]({ event: line.event, ...line.fields });
        tap?.log?.(line.event, line.fields);
      }
      tap?.call?.(report);
    },
    stream(kind, delta) {
      metrics.stream(kind, delta);
      tap?.stream?.(kind, delta);
    },
  };
}
