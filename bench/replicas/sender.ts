/**
 * bench:replicas' message sender, on a worker thread (through bench/common/ts-worker.mjs) so that
 * its garbage is collected on a heap of its own: the thread that takes the frames' arrival times
 * then pauses only for its own small heap. Each content carries its send's time (`monoMs`, the
 * process's monotonic clock, the same on every thread): `<prefix><run>-<k>@<ms>`.
 *
 * workerData: SenderOptions. It posts `{ sent, failed }` after the warm-up's sends are answered,
 * waits for "measure", posts the same for the measured sends, and ends.
 */
import { parentPort, workerData } from "node:worker_threads";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { H2Conn } from "../common/raw-stream.js";
import { monoMs } from "../common/stats.js";

export interface SenderOptions {
  url: string;
  headers: Record<string, string>;
  target: string;
  run: number;
  rate: number;
  seconds: number;
  /** Unmeasured sends at 300/s first, for this long (0: none). */
  warmupMs: number;
}

export interface SenderReport {
  sent: number;
  failed: number;
}

const o = workerData as SenderOptions;
const conn = await H2Conn.connect(o.url);

/** `total` sends paced at `perSecond`; resolves once every one is answered. No answer is kept. */
async function pace(total: number, perSecond: number, prefix: string): Promise<SenderReport> {
  let outstanding = 0;
  let failed = 0;
  let settled: (() => void) | undefined;
  const answered = () => {
    if (--outstanding === 0) settled?.();
  };
  const from = monoMs();
  for (let k = 0; k < total; k++) {
    const wait = from + (k * 1_000) / perSecond - monoMs();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    outstanding++;
    const content = `${prefix}${o.run}-${k}@${monoMs()}`;
    conn.unary(PeerService.method.sendMessage, { target: o.target, content }, o.headers).then(answered, () => {
      failed++;
      answered();
    });
  }
  if (outstanding > 0) await new Promise<void>((r) => (settled = r));
  return { sent: total, failed };
}

const port = parentPort!;
port.postMessage(o.warmupMs > 0 ? await pace(Math.round((300 * o.warmupMs) / 1_000), 300, "w") : { sent: 0, failed: 0 });
await new Promise((r) => port.once("message", r));
port.postMessage(await pace(Math.round(o.rate * o.seconds), o.rate, "m"));
conn.close();
