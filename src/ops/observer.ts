import pino from "pino";
import type { CallReport, FaceObserver } from "../observe.js";
import { isoOfMs } from "../clock.js";
import { openLogFile } from "./log-destination.js";
import type { Metrics } from "./metrics.js";

/**
 * Characters of log lines gathered before one write: a write per line cost a visible share of a
 * busy hub, and one per 8 KiB still about 2% of its thread under refused acquires (each write is
 * handed to libuv's thread pool; bench/steps.md, fourteenth step).
 */
const logBufferBytes = 64 * 1024;
/** Longest a log line waits in that buffer. */
const logFlushMs = 100;

export interface HubLogger {
  logger: pino.Logger;
  /**
   * Stops the flush timer and writes what is gathered; resolves once it is written (hub close).
   * A disk whose writes fail is not waited for: what it has not taken is dropped.
   */
  close(): Promise<void>;
}

/**
 * JSON-lines logger: one object per event, `event` holding the reference hub's event name.
 * `level` is the lowest level written ("debug" adds a `request_completed` line per call).
 * Lines are gathered up to 64 KiB and written at least every 100 ms, off the event loop; a hub
 * killed with SIGKILL loses at most those last lines; a closed one, or one that exits or dies of an
 * error, none of them (to stdout through a pipe that is full, a write under way when the process
 * ends may still be cut short; at an exit without close, a write under way off the thread may
 * land after the lines the exit writes).
 */
export function createLogger(logPath: string | undefined, level: pino.LevelWithSilent = "info"): HubLogger {
  const options: pino.LoggerOptions = { base: undefined, level, timestamp: isoTimeOfLine, messageKey: "msg" };
  // Opened synchronously: an unusable path refuses the start (log_path_invalid) before listening.
  // It writes when the gatherer asks (flush), or on its own once it holds 1 MiB (a stalled disk).
  const dest = pino.destination({
    dest: logPath ? openLogFile(logPath) : 1,
    sync: false,
    contentMode: "buffer",
    minLength: destinationHoldBytes - 1,
    maxWrite: destinationHoldBytes,
    // A disk that takes nothing (full, failing): what waits for it is bounded, the rest dropped.
    maxLength: destinationMaxBytes,
  });
  // A write that failed (ENOSPC, EIO) is no crash: the hub goes on answering, and the log
  // goes on at the next write that succeeds (the destination keeps the failed part and tries
  // it again first). Until one does, no write is made synchronously: the destination's
  // flushSync sleeps and tries again for good on such an error, which at shutdown or exit
  // would hang the hub with its store locked.
  let failing = false;
  let told = false;
  dest.on("error", (e: NodeJS.ErrnoException) => {
    failing = true;
    if (told) return;
    told = true;
    process.stderr.write(`kxm-hub: log_write_failed: cannot write the log${logPath ? ` file ${logPath}` : ""}: ${e.code ?? e.message}; lines are dropped until a write succeeds\n`);
  });
  dest.on("write", () => {
    failing = false;
    told = false;
  });
  // In "buffer" mode the destination writes the Buffers it is given (its types name only strings).
  const lines = new LineGatherer(dest as unknown as BufferDestination);
  // pino flushes the destination itself when the process exits (flushSync: a crash, an exit
  // without close) or is about to (flush): the lines gathered here go first.
  const flush = dest.flush.bind(dest);
  const flushSync = dest.flushSync.bind(dest);
  dest.flush = (cb) => {
    lines.hand();
    flush(cb);
  };
  dest.flushSync = () => {
    lines.hand();
    if (!failing) flushSync();
  };
  const timer = setInterval(() => lines.flush(), logFlushMs);
  timer.unref();
  return {
    logger: pino(options, lines),
    async close() {
      clearInterval(timer);
      lines.hand();
      // A write under way (off the thread) lands first: the destination's flushSync does not
      // wait for it, and what it wrote meanwhile would come before the lines of that write.
      // flush's callback comes once no write is under way, or once one has failed.
      if (!failing) await new Promise<void>((resolve) => dest.flush(() => resolve()));
      dest.flushSync();
    },
  };
}

interface BufferDestination {
  write(b: Buffer): boolean;
  flush(cb?: (err?: Error) => void): void;
  flushSync(): void;
}

/** What the destination may hold before it writes on its own, far past one hand-over (LineGatherer). */
const destinationHoldBytes = 1024 * 1024;
/** What the destination may hold while its writes fail: past it, lines are dropped. */
const destinationMaxBytes = 16 * 1024 * 1024;

/**
 * pino's destination gathers text lines up to `minLength` itself, but measures all it holds again
 * for each line it adds and encodes what it wrote once more after each write, a visible share of
 * a busy hub's thread (bench/steps.md). This gathers the lines
 * in a list, counting their length, and hands the destination about 64 KiB at a time, encoded
 * once, which it writes at once, off the event loop (or after the write in flight, at the next
 * hand-over or tick).
 */
class LineGatherer {
  private lines: string[] = [];
  private length = 0;

  constructor(private readonly dest: BufferDestination) {}

  write(line: string): boolean {
    this.lines.push(line);
    this.length += line.length;
    if (this.length >= logBufferBytes) this.flush();
    return true;
  }

  /** Hands what is gathered to the destination and asks it to write (pino's `logger.flush(cb)` too). */
  flush(cb?: (err?: Error) => void): void {
    this.hand();
    try {
      this.dest.flush(cb); // with a write in flight, it writes the rest at the next hand-over or tick
    } catch (e) {
      // ended (pino ends it before the process exits): nothing more is written
      cb?.(e as Error);
    }
  }

  /** Hands what is gathered to the destination and has it written now (pino's `logger.fatal`). */
  flushSync(): void {
    this.hand();
    this.dest.flushSync();
  }

  /** Hands what is gathered to the destination, to be written by its next flush. */
  hand(): void {
    if (this.length === 0) return;
    const text = this.lines.length === 1 ? this.lines[0]! : this.lines.join("");
    this.lines = [];
    this.length = 0;
    try {
      this.dest.write(Buffer.from(text));
    } catch {
      // ended (pino ends it before the process exits): these lines come too late to be written
    }
  }
}

/**
 * pino's `isoTime` (`,"time":"<ISO 8601>"`), made once per millisecond: a busy hub writes several
 * lines in each.
 */
let lastTimeMs = Number.NaN;
let lastTime = "";
function isoTimeOfLine(): string {
  const ms = Date.now();
  if (ms !== lastTimeMs) {
    lastTimeMs = ms;
    lastTime = `,"time":"${isoOfMs(ms)}"`;
  }
  return lastTime;
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
  const count: FaceObserver["count"] = (counter, by) => {
    metrics.count(counter, by);
    tap?.count?.(counter, by);
  };
  return {
    log(event, fields) {
      logger?.info({ event, ...fields });
      tap?.log?.(event, fields);
    },
    count,
    call(report) {
      metrics.call(report);
      // Every error is counted here, once, as it is logged (request_error): the calls connect
      // refused before any rule ran, too.
      if (report.code !== "ok") count("errors");
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
