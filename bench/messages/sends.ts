/**
 * One messages scenario's sends: paced (open loop) or unpaced (closed loop), each content
 * `<sender> <k> <send time> <padding>` with its send's time on `monoMs` (the process's monotonic
 * clock, the same on every thread), so whoever takes the frames times them without sharing any
 * state with this side. Runs on a worker thread of the load generator (sender.ts) unless the
 * whole load runs on the hub's own thread (`--client inline`); the report is structured-clone
 * data either way.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { createClient } from "@connectrpc/connect";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { H2Conn } from "../common/raw-stream.js";
import { monoMs, Samples, summarize, type Summary } from "../common/stats.js";
import { makeTransport } from "../common/transport.js";

export interface SendSpec {
  baseUrl: string;
  client: "lean" | "connect";
  /** Each sender agent's headers; send k comes from sender k % senders.length. */
  senders: Record<string, string>[];
  /** Recipient agent ids; send k goes to targets[k % targets.length]. */
  targets: string[];
  mode: { rate: number; seconds: number } | { inFlight: number; seconds: number };
  /** Paced only: a slot that comes due while this many sends are unanswered is skipped. */
  maxOutstanding: number;
  padding: number;
}

/** What happened to send k: not sent (skipped, or never reached), accepted, failed. */
export const KeyState = { unsent: 0, accepted: 1, failed: 2 } as const;

export interface SendReport {
  /** One entry per key 0..keys.length-1, a KeyState. */
  keys: Uint8Array;
  issued: number;
  accepted: number;
  failed: number;
  firstError?: string;
  /** The first send's slot and the last answer, on monoMs. */
  startMs: number;
  lastAnswerMs: number;
  pacerLagMaxMs?: number;
  maxOutstanding: number;
  skipped: number;
  sendRtt: Summary;
  /** Event-loop utilization of the sending thread over the sends, 0..1. */
  busy: number;
}

const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** A SendMessage client on one h2c connection of its own: the lean one, or connect-node. */
async function sendClient(baseUrl: string, client: "lean" | "connect") {
  if (client === "connect") {
    const conn = makeTransport(baseUrl, "2", 1);
    const peer = createClient(PeerService, conn.transport);
    return {
      send: (target: string, content: string, headers: Record<string, string>) => peer.sendMessage({ target, content }, { headers }),
      close: () => conn.close(),
    };
  }
  const conn = await H2Conn.connect(baseUrl);
  return {
    send: (target: string, content: string, headers: Record<string, string>) =>
      conn.unary(PeerService.method.sendMessage, { target, content }, headers),
    close: () => conn.close(),
  };
}

/** Runs the sends `s` asks for; resolves once every issued send is answered. */
export async function sendScenario(s: SendSpec): Promise<SendReport> {
  const peer = await sendClient(s.baseUrl, s.client);
  const pad = "x".repeat(s.padding);
  const sendRtt = new Samples();
  let keys = new Uint8Array(Math.ceil(s.mode.seconds * ("rate" in s.mode ? s.mode.rate : 1_000)) + 1);
  let issued = 0;
  let accepted = 0;
  let failed = 0;
  let firstError: string | undefined;
  let outstanding = 0;
  let maxOutstanding = 0;
  let lastAnswerMs = 0;
  const send = (k: number): Promise<void> => {
    if (k >= keys.length) {
      const grown = new Uint8Array(keys.length * 2);
      grown.set(keys);
      keys = grown;
    }
    const t0 = monoMs();
    issued++;
    if (++outstanding > maxOutstanding) maxOutstanding = outstanding;
    const sender = k % s.senders.length;
    return peer.send(s.targets[k % s.targets.length]!, `${sender} ${k} ${t0.toFixed(3)} ${pad}`, s.senders[sender]!).then(
      () => {
        lastAnswerMs = monoMs();
        sendRtt.push(lastAnswerMs - t0);
        accepted++;
        keys[k] = KeyState.accepted;
        outstanding--;
      },
      (e: unknown) => {
        lastAnswerMs = monoMs();
        failed++;
        firstError ??= errText(e);
        keys[k] = KeyState.failed;
        outstanding--;
      },
    );
  };

  const elu0 = performance.eventLoopUtilization();
  const startMs = monoMs();
  let pacerLagMaxMs: number | undefined;
  let skipped = 0;
  let total: number;
  if ("rate" in s.mode) {
    // Open loop: every message has a slot at start + k / rate; sends do not wait for answers.
    const rate = s.mode.rate;
    total = Math.round(rate * s.mode.seconds);
    const pending: Promise<void>[] = [];
    let k = 0;
    pacerLagMaxMs = 0;
    while (k < total) {
      const now = monoMs();
      const due = Math.min(total, Math.floor(((now - startMs) * rate) / 1_000) + 1);
      for (; k < due; k++) {
        pacerLagMaxMs = Math.max(pacerLagMaxMs, now - (startMs + (k * 1_000) / rate));
        if (outstanding >= s.maxOutstanding) skipped++;
        else pending.push(send(k));
      }
      if (k < total) await sleep(Math.max(1, Math.min(5, startMs + (k * 1_000) / rate - monoMs())));
    }
    await Promise.all(pending);
  } else {
    // Closed loop: inFlight workers, each sends again as soon as its answer arrives.
    const stopAt = startMs + s.mode.seconds * 1_000;
    let k = 0;
    await Promise.all(
      Array.from({ length: s.mode.inFlight }, async () => {
        while (monoMs() < stopAt) await send(k++);
      }),
    );
    total = k;
  }
  const busy = performance.eventLoopUtilization(elu0).utilization;
  peer.close();
  return {
    keys: keys.slice(0, total),
    issued,
    accepted,
    failed,
    firstError,
    startMs,
    lastAnswerMs,
    pacerLagMaxMs,
    maxOutstanding,
    skipped,
    sendRtt: summarize(sendRtt.sorted()),
    busy,
  };
}
