// Following the hub's streams: each one resumes from its last cursor after a dropped connection
// or a hub restart, starts over from a snapshot when its cursor is gone (cursor_expired), and
// gives up only when the hub refuses the credentials.
import { ConnectError } from "@connectrpc/connect";
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ErrorInfoSchema } from "../../gen/ts/google/rpc/error_details_pb.js";

/** Where one stream stands. */
export type LinkState = "connecting" | "live" | "reconnecting";

/** The hub's error reason (ErrorInfo.reason, e.g. INVALID_AUTH), if it sent one. */
export function reasonOf(e: unknown): string | undefined {
  return e instanceof ConnectError ? e.findDetails(ErrorInfoSchema)[0]?.reason : undefined;
}

/** Refusals no retry will change: the page signs out and says why. */
const fatal = new Set(["INVALID_AUTH", "ADMIN_AUTH_NOT_CONFIGURED", "PROTOCOL_ERROR"]);

export interface FollowOptions<F> {
  /** Opens the stream, from where the frames seen so far left it (the caller keeps the cursors). */
  open: (signal: AbortSignal) => AsyncIterable<F>;
  onFrame: (frame: F) => void;
  /** The hub no longer has the changes after a cursor (cursor_expired): start from snapshots. */
  onExpired?: () => void;
  onState: (state: LinkState) => void;
  /** The hub refused the call for good (its ConnectError). */
  onRefused: (e: ConnectError) => void;
  /**
   * Real time without any frame after which the connection is taken for dead (a keep-alive
   * comes every 15 s by default) and opened again.
   */
  silenceMs: number;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

/** Follows one stream until `signal` aborts or the hub refuses it. */
export async function follow<F>(o: FollowOptions<F>, signal: AbortSignal): Promise<void> {
  let failures = 0;
  o.onState("connecting");
  while (!signal.aborted) {
    const call = new AbortController();
    const stop = () => call.abort();
    signal.addEventListener("abort", stop, { once: true });
    let silence: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(silence);
      silence = setTimeout(() => call.abort(), o.silenceMs);
    };
    try {
      arm();
      for await (const frame of o.open(call.signal)) {
        arm();
        failures = 0;
        o.onFrame(frame);
        o.onState("live");
      }
    } catch (e) {
      if (signal.aborted) break;
      const reason = reasonOf(e);
      if (reason === "CURSOR_EXPIRED") o.onExpired?.();
      if (reason !== undefined && fatal.has(reason)) {
        o.onRefused(ConnectError.from(e));
        break;
      }
    } finally {
      clearTimeout(silence);
      signal.removeEventListener("abort", stop);
    }
    if (signal.aborted) break;
    o.onState("reconnecting");
    await sleep(Math.min(5_000, 250 * 2 ** failures++), signal);
  }
}

/**
 * The hub's clock as the page knows it: the last time a frame stated, advanced by the page's
 * own monotonic time since. Until a frame states one, the browser's clock stands in.
 */
export class HubClock {
  private baseMs = Date.now();
  private localMs = performance.now();

  observe(at: Timestamp | undefined): void {
    if (!at) return;
    this.baseMs = timestampMs(at);
    this.localMs = performance.now();
  }

  now(): number {
    return this.baseMs + (performance.now() - this.localMs);
  }
}

export const msOf = (t: Timestamp | undefined): number | undefined => (t ? timestampMs(t) : undefined);
