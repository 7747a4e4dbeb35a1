/**
 * The sync bench's load generator: closed-loop PushEvents callers over one h2c connection,
 * Connect binary: the lean client of bench/common/raw-stream.ts, which sends the pre-encoded
 * requests as they are (`--rpc-client lean`), or connect-node, which gets each request decoded
 * and encodes it again (`--rpc-client connect`). It runs either on the hub's own thread
 * (`--client inline`) or in a worker thread of the same process (`--client thread`,
 * bench/sync/worker.ts); the code is the same, only where `beforeMeasure` lands differs.
 */
import fs from "node:fs";
import { performance } from "node:perf_hooks";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import {
  PushEventsRequestSchema,
  PushEventsResponseSchema,
  SyncOutcome,
  SyncService,
  type PushEventsResponse,
} from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { monoMs, Samples } from "../common/stats.js";
import { makeTransport } from "../common/transport.js";
import { H2Conn } from "../common/raw-stream.js";

export type Outcomes = Record<string, number>;
export const tally = (o: Outcomes, key: string) => (o[key] = (o[key] ?? 0) + 1);
export const outcomeNames: Record<number, string> = {
  [SyncOutcome.UNSPECIFIED]: "unspecified",
  [SyncOutcome.ACCEPTED]: "accepted",
  [SyncOutcome.DUPLICATE]: "duplicate",
  [SyncOutcome.CONFLICT]: "conflict",
  [SyncOutcome.REJECTED]: "rejected",
};

/** Encoded requests packed into one ArrayBuffer (so a worker gets them in one transfer). */
export interface PackedWire {
  buf: ArrayBuffer;
  /** ends[i] = end offset of request i; request i starts at ends[i - 1] (or 0). */
  ends: Float64Array;
}

export function packWire(list: Uint8Array[]): PackedWire {
  const ends = new Float64Array(list.length);
  let n = 0;
  list.forEach((w, i) => (ends[i] = n += w.length));
  const bytes = new Uint8Array(n);
  list.forEach((w, i) => bytes.set(w, i ? ends[i - 1]! : 0));
  return { buf: bytes.buffer, ends };
}

export function unpackWire(p: PackedWire): Uint8Array[] {
  return Array.from(p.ends, (end, i) => new Uint8Array(p.buf, i ? p.ends[i - 1]! : 0, end - (i ? p.ends[i - 1]! : 0)));
}

/**
 * CPU time (user + system, ms) of the calling thread, from /proc/thread-self/stat (Linux; clock
 * ticks, usually 10 ms), or undefined where that file does not exist. Node 20 has no
 * process.threadCpuUsage().
 */
export function threadCpuMs(): number | undefined {
  try {
    const stat = fs.readFileSync("/proc/thread-self/stat", "latin1");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // After "pid (comm) ": state is field 3, utime 14 and stime 15 (1-based) -> 11 and 12 here.
    return ((Number(f[11]) + Number(f[12])) * 1_000) / ticksPerSecond;
  } catch {
    return undefined;
  }
}
/** USER_HZ: 100 on every Linux this bench has met (getconf CLK_TCK); not exposed to Node. */
const ticksPerSecond = 100;

export interface LoadScenario {
  url: string;
  token: string;
  project: string;
  conc: number;
  rpcClient: "lean" | "connect";
  /** Measure only the first `measureCount` requests of the measured list (the profiled pass). */
  measureCount?: number;
}

export interface LoadResult {
  /** Latency of each measured call, ms, sorted. */
  lat: Float64Array;
  events: number;
  outcomes: Outcomes;
  /** The last answer, encoded (the cost split measures its encode/decode). */
  last?: Uint8Array;
  /** First measured call to last answer, ms (process.hrtime). */
  wallMs: number;
  /** Event-loop utilization of the load's thread over the measured drive, 0..1. */
  elu: number;
  /** CPU time of the load's thread over the measured drive, ms (undefined off Linux). */
  cpuMs?: number;
}

/**
 * Push `warm` with `conc` callers, await `beforeMeasure`, then push `measure` (or its first
 * `measureCount` requests) and return the figures.
 */
export async function runLoad(
  s: LoadScenario,
  warm: Uint8Array[],
  measure: Uint8Array[],
  beforeMeasure: () => Promise<void>,
): Promise<LoadResult> {
  const headers = { authorization: `Bearer ${s.token}` };
  let push: (bytes: Uint8Array) => Promise<PushEventsResponse>;
  let close: () => void;
  if (s.rpcClient === "lean") {
    const conn = await H2Conn.connect(s.url);
    push = (bytes) => conn.unary(SyncService.method.pushEvents, bytes, headers);
    close = () => conn.close();
  } else {
    const t = makeTransport(s.url, "2", 1);
    const client = createClient(SyncService, t.transport);
    // Decoded from its bytes just before the call: in the wall time, outside the latency timer.
    push = (bytes) => {
      const req = fromBinary(PushEventsRequestSchema, bytes);
      return client.pushEvents(req, { headers });
    };
    close = t.close;
  }
  const outcomes: Outcomes = {};
  let last: PushEventsResponse | undefined;
  let events = 0;
  const drive = async (list: Uint8Array[], lat?: Samples) => {
    let next = 0;
    const caller = async () => {
      for (let i = next++; i < list.length; i = next++) {
        const t0 = monoMs();
        const res = await push(list[i]!);
        const ms = monoMs() - t0;
        if (!lat) continue;
        lat.push(ms);
        events += res.results.length; // one result per pushed event
        for (const r of res.results) tally(outcomes, r.code ? `${outcomeNames[r.outcome]}:${r.code}` : outcomeNames[r.outcome]!);
        last = res;
      }
    };
    await Promise.all(Array.from({ length: Math.min(s.conc, list.length) }, caller));
  };
  try {
    await drive(warm);
    await beforeMeasure();
    const list = s.measureCount === undefined ? measure : measure.slice(0, s.measureCount);
    const lat = new Samples();
    const cpu0 = threadCpuMs();
    const elu0 = performance.eventLoopUtilization();
    const t0 = monoMs();
    await drive(list, lat);
    const wallMs = monoMs() - t0;
    const elu = performance.eventLoopUtilization(elu0).utilization;
    const cpu1 = threadCpuMs();
    return {
      lat: lat.sorted(),
      events,
      outcomes,
      last: last && toBinary(PushEventsResponseSchema, last),
      wallMs,
      elu,
      cpuMs: cpu0 === undefined || cpu1 === undefined ? undefined : cpu1 - cpu0,
    };
  } finally {
    close();
  }
}
