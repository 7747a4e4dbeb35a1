/**
 * The load side of bench/streams: registers agents, opens Subscribe streams with the lean client
 * (bench/common/raw-stream.ts), sends messages, measures. It runs in a child process (default)
 * or a worker thread and talks to the hub only over the network; the hub's side is asked for
 * memory samples and told scenario boundaries through `Ctl`. Returns plain figures.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { create, toBinary } from "@bufbuild/protobuf";
import { PeerService, SubscribeRequestSchema, type SubscribeResponse } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { H2Conn, H2Pool, type RawStream } from "../common/raw-stream.js";
import { monoMs, Samples, summarize, type Summary } from "../common/stats.js";

export interface StreamsOptions {
  baseUrl: string;
  project: string;
  /** T2: Subscribe streams opened at once (0 = skip). */
  streams: number;
  /** T3: idle Subscribe streams held (0 = skip). */
  idleStreams: number;
  /** Streams per h2c session. */
  perSession: number;
  /** T3 sends: messages per second, for `seconds`. */
  rate: number;
  seconds: number;
  senders: number;
  /** Filler characters per message content. */
  padding: number;
  /** Paced: skip (and count) a slot while this many sends are unanswered. */
  maxOutstanding: number;
  /** RegisterAgent calls in flight at once. */
  registerConc: number;
  /** Give up waiting for streams to open after this long. */
  timeoutMs: number;
  /** After the last answer, wait this long for missing frames. */
  drainMs: number;
  /** After the idle streams are open, wait this long before the "after" memory sample. */
  settleMs: number;
}

/** What the hub side reports when asked for a sample (after a forced GC). */
export interface MemSample {
  rss: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
}

/** The load side's line to the hub side. */
export interface Ctl {
  /** Scenario boundaries: the hub side measures its own event-loop utilization and CPU between them. */
  mark(phase: "begin" | "end", label: string): void;
  /** Forces a GC in the hub's process and returns its memory. */
  sample(label: string): Promise<MemSample>;
  progress(line: string): void;
}

export interface Usage {
  /** Event-loop utilization of the load thread, 0..1. */
  busy: number;
  /** CPU of the load process (child) or of the whole process (thread: hub included), in cores. */
  cores: number;
}

export interface OpenResult {
  streams: number;
  sessions: number[];
  /** Connecting the h2c sessions, before the burst (not in the figures below). */
  connectMs: number;
  /** Issuing every request (client-side loop), from the burst's start. */
  issueMs: number;
  /** From the burst's start until the last stream had its response headers / its ready frame. */
  allHeadersMs: number;
  allReadyMs: number;
  /** Per stream, from its own request being issued. */
  headers: Summary;
  ready: Summary;
  failed: number;
  firstError?: string;
  /** Streams still without a ready frame at the timeout. */
  missing: number;
  load: Usage;
}

export interface SecondBucket {
  sent: number;
  received: number;
  p99: number;
  max: number;
  keepAlives: number;
}

export interface IdleResult {
  open: OpenResult;
  hubBefore: MemSample;
  hubAfter: MemSample;
  hubAfterSends: MemSample;
  clientBefore: MemSample;
  clientAfter: MemSample;
  /** Frames the idle streams got other than ready and the bench's messages, while held. */
  keepAlives: number;
  keepAlivesDuringSends: number;
  presenceFrames: number;
  otherFrames: number;
  streamErrors: number;
  firstStreamError?: string;
  sends?: SendResult;
}

export interface SendResult {
  rate: number;
  seconds: number;
  issued: number;
  accepted: number;
  failed: number;
  skipped: number;
  firstError?: string;
  maxOutstanding: number;
  pacerLagMaxMs: number;
  /** First send to last answer, ms. */
  sendWindowMs: number;
  rtt: Summary;
  /** Send issued -> message frame decoded by the recipient's stream. */
  latency: Summary;
  received: number;
  lost: number;
  duplicates: number;
  unexpected: number;
  drainMs: number;
  perSecond: SecondBucket[];
  load: Usage;
}

export interface StreamsResult {
  registered: number;
  registerMs: number;
  burst?: OpenResult;
  idle?: IdleResult;
}

const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));

interface Agent {
  id: string;
  headers: Record<string, string>;
}

/** The load process's own memory (after a GC when one is exposed). */
function selfSample(gc: (() => void) | undefined): MemSample {
  gc?.();
  gc?.();
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers };
}

function usageSince(elu0: ReturnType<typeof performance.eventLoopUtilization>, cpu0: NodeJS.CpuUsage, t0: number): Usage {
  const cpu = process.cpuUsage(cpu0);
  return {
    busy: performance.eventLoopUtilization(elu0).utilization,
    cores: (cpu.user + cpu.system) / 1_000 / (monoMs() - t0),
  };
}

/** Registers `n` agents (names `<prefix>-<i>`) with `conc` RegisterAgent calls in flight. */
async function registerAgents(conn: H2Conn, project: string, prefix: string, n: number, conc: number, ctl: Ctl) {
  const agents: Agent[] = new Array(n);
  let next = 0;
  let failed = 0;
  let firstError: string | undefined;
  let done = 0;
  let lastReport = monoMs();
  await Promise.all(
    Array.from({ length: Math.min(conc, n) }, async () => {
      while (next < n) {
        const i = next++;
        try {
          const r = await conn.unary(PresenceService.method.registerAgent, { name: `${prefix}-${i}`, project, purpose: "streams benchmark" });
          agents[i] = { id: r.agent!.id, headers: { "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey } };
        } catch (e) {
          failed++;
          firstError ??= errText(e);
        }
        if (++done % 1_000 === 0 && monoMs() - lastReport > 2_000) {
          lastReport = monoMs();
          ctl.progress(`registered ${done}/${n}`);
        }
      }
    }),
  );
  if (failed) throw new Error(`${failed} of ${n} RegisterAgent calls failed: ${firstError}`);
  return agents;
}

/** Per-stream hooks for `openBurst`: frames after the ready frame, and failures after it. */
interface StreamHooks {
  onFrame?(i: number, frame: SubscribeResponse, at: number): void;
  onError?(i: number, e: unknown): void;
}

interface Burst {
  result: OpenResult;
  streams: RawStream[];
  pool: H2Pool;
}

/**
 * Opens one Subscribe stream per agent, all at once (the sessions are connected first), and
 * waits until every stream has its ready frame, has failed, or `timeoutMs` passed.
 */
async function openBurst(o: StreamsOptions, agents: Agent[], hooks: StreamHooks, timeoutMs: number): Promise<Burst> {
  const n = agents.length;
  const pool = new H2Pool(o.baseUrl, o.perSession);
  const c0 = monoMs();
  const conns: H2Conn[] = [];
  for (let i = 0; i < n; i++) conns.push(await pool.next());
  const connectMs = monoMs() - c0;

  const request = toBinary(SubscribeRequestSchema, create(SubscribeRequestSchema, {}));
  const issuedAt = new Float64Array(n);
  const headersAt = new Float64Array(n).fill(Number.NaN);
  const readyAt = new Float64Array(n).fill(Number.NaN);
  let settled = 0;
  let failed = 0;
  let firstError: string | undefined;
  let allSettled!: () => void;
  const done = new Promise<void>((res) => (allSettled = res));
  const settle = () => {
    if (++settled === n) allSettled();
  };

  const elu0 = performance.eventLoopUtilization();
  const cpu0 = process.cpuUsage();
  const t0 = monoMs();
  const streams: RawStream[] = new Array(n);
  for (let i = 0; i < n; i++) {
    issuedAt[i] = monoMs();
    streams[i] = conns[i]!.serverStream(PeerService.method.subscribe, request, agents[i]!.headers, {
      onHeaders: () => {
        headersAt[i] = monoMs();
      },
      onMessage: (frame) => {
        const at = monoMs();
        if (Number.isNaN(readyAt[i]!)) {
          readyAt[i] = at;
          if (frame.event.case !== "ready") {
            failed++;
            firstError ??= `first frame is ${frame.event.case}, not ready`;
          }
          settle();
          return;
        }
        hooks.onFrame?.(i, frame, at);
      },
      onEnd: (e) => {
        const err = e ?? new Error("stream ended");
        if (Number.isNaN(readyAt[i]!)) {
          readyAt[i] = Number.POSITIVE_INFINITY; // failed before ready
          failed++;
          firstError ??= errText(err);
          settle();
        } else {
          hooks.onError?.(i, err);
        }
      },
    });
  }
  const issueMs = monoMs() - t0;
  await Promise.race([done, sleep(timeoutMs, undefined, { ref: false })]);
  const load = usageSince(elu0, cpu0, t0);

  const ok = (at: Float64Array) => {
    const out = new Samples();
    let last = 0;
    for (let i = 0; i < n; i++) {
      const v = at[i]!;
      if (Number.isFinite(v)) {
        out.push(v - issuedAt[i]!);
        last = Math.max(last, v - t0);
      }
    }
    return { s: summarize(out.sorted()), last };
  };
  const h = ok(headersAt);
  const r = ok(readyAt);
  let missing = 0;
  for (let i = 0; i < n; i++) if (Number.isNaN(readyAt[i]!)) missing++;
  return {
    streams,
    pool,
    result: {
      streams: n,
      sessions: pool.counts(),
      connectMs,
      issueMs,
      allHeadersMs: h.last,
      allReadyMs: r.last,
      headers: h.s,
      ready: r.s,
      failed,
      firstError,
      missing,
      load,
    },
  };
}

function closeBurst(b: Burst) {
  for (const s of b.streams) s.cancel();
  b.pool.close();
}

export async function runStreams(o: StreamsOptions, ctl: Ctl, gc: (() => void) | undefined): Promise<StreamsResult> {
  const admin = await H2Conn.connect(o.baseUrl);
  const nAgents = Math.max(o.streams, o.idleStreams);
  const sendersNeeded = o.idleStreams > 0 && o.rate > 0 && o.seconds > 0 ? o.senders : 0;

  // Every agent first, so no registration (a presence change every open stream of the project
  // would get) happens while streams are open.
  ctl.progress(`registering ${nAgents} agents + ${sendersNeeded} senders, ${o.registerConc} in flight`);
  const r0 = monoMs();
  const agents = await registerAgents(admin, o.project, "agent", nAgents, o.registerConc, ctl);
  const senders = await registerAgents(admin, o.project, "sender", sendersNeeded, o.registerConc, ctl);
  const registerMs = monoMs() - r0;
  const out: StreamsResult = { registered: nAgents + sendersNeeded, registerMs };

  if (o.streams > 0) {
    ctl.progress(`T2: opening ${o.streams} Subscribe streams at once`);
    await sleep(500); // let the registration's last writes settle
    ctl.mark("begin", "t2-open");
    const b = await openBurst(o, agents.slice(0, o.streams), {}, o.timeoutMs);
    ctl.mark("end", "t2-open");
    out.burst = b.result;
    closeBurst(b);
    await sleep(1_000); // let the hub tear the streams down
  }

  if (o.idleStreams > 0) {
    const idle = agents.slice(0, o.idleStreams);
    const clientBefore = selfSample(gc);
    const hubBefore = await ctl.sample("before idle streams");

    // Frames after the ready frame. Message frames are matched to sends by the key at the
    // start of their content.
    let keepAlives = 0;
    let keepAlivesDuringSends = 0;
    let presenceFrames = 0;
    let otherFrames = 0;
    let streamErrors = 0;
    let firstStreamError: string | undefined;
    let sending = false;
    let onMessage: (i: number, frame: SubscribeResponse, at: number) => void = () => otherFrames++;
    let onKeepAlive: (at: number) => void = () => {};

    ctl.progress(`T3: opening ${o.idleStreams} idle Subscribe streams`);
    ctl.mark("begin", "t3-open");
    const b = await openBurst(
      o,
      idle,
      {
        onFrame: (i, frame, at) => {
          switch (frame.event.case) {
            case "keepAlive":
              keepAlives++;
              if (sending) keepAlivesDuringSends++;
              onKeepAlive(at);
              return;
            case "presence":
              presenceFrames++;
              return;
            case "message":
              onMessage(i, frame, at);
              return;
            default:
              otherFrames++;
          }
        },
        onError: (_i, e) => {
          streamErrors++;
          firstStreamError ??= errText(e);
        },
      },
      Math.max(o.timeoutMs, o.idleStreams * 5),
    );
    ctl.mark("end", "t3-open");
    ctl.progress(`T3: ${b.result.streams - b.result.failed - b.result.missing} open in ${b.result.allReadyMs.toFixed(0)} ms; settling ${o.settleMs} ms`);
    await sleep(o.settleMs);
    const hubAfter = await ctl.sample("after idle streams");
    const clientAfter = selfSample(gc);

    const idleResult: IdleResult = {
      open: b.result,
      hubBefore,
      hubAfter,
      hubAfterSends: hubAfter,
      clientBefore,
      clientAfter,
      keepAlives: 0,
      keepAlivesDuringSends: 0,
      presenceFrames: 0,
      otherFrames: 0,
      streamErrors: 0,
    };

    if (sendersNeeded > 0) {
      ctl.progress(`T3: sending ${o.rate}/s for ${o.seconds} s to random idle streams`);
      const total = Math.round(o.rate * o.seconds);
      const sendConn = await H2Conn.connect(o.baseUrl);
      const sentAt = new Float64Array(total).fill(Number.NaN);
      const target = new Int32Array(total).fill(-1);
      const answered = new Uint8Array(total); // 1 ok, 2 failed
      const seen = new Uint8Array(total);
      const latency = new Samples();
      const rtt = new Samples();
      let received = 0;
      let duplicates = 0;
      let unexpected = 0;
      let lastFrameAt = 0;
      let sendStart = 0;
      const buckets: { sent: number; lat: number[]; keepAlives: number }[] = [];
      const bucket = (at: number) => {
        const s = Math.max(0, Math.floor((at - sendStart) / 1_000));
        while (buckets.length <= s) buckets.push({ sent: 0, lat: [], keepAlives: 0 });
        return buckets[s]!;
      };
      onMessage = (i, frame, at) => {
        if (frame.event.case !== "message") return;
        lastFrameAt = at;
        const k = Number.parseInt(frame.event.value.content, 10);
        if (!(k >= 0 && k < total) || target[k] !== i) {
          unexpected++;
          return;
        }
        if (seen[k]) {
          duplicates++;
          return;
        }
        seen[k] = 1;
        received++;
        const l = at - sentAt[k]!;
        latency.push(l);
        bucket(sentAt[k]!).lat.push(l);
      };
      onKeepAlive = (at) => {
        if (sending) bucket(at).keepAlives++;
      };

      const pad = " " + "x".repeat(o.padding);
      let issued = 0;
      let accepted = 0;
      let failed = 0;
      let skipped = 0;
      let firstError: string | undefined;
      let outstanding = 0;
      let maxOutstanding = 0;
      let lastAnswerAt = 0;
      const send = (k: number) => {
        const r = Math.floor(Math.random() * idle.length);
        const s = senders[k % senders.length]!;
        target[k] = r;
        const t0 = monoMs();
        sentAt[k] = t0;
        bucket(t0).sent++;
        issued++;
        if (++outstanding > maxOutstanding) maxOutstanding = outstanding;
        return sendConn.unary(PeerService.method.sendMessage, { target: idle[r]!.id, content: `${k}${pad}` }, s.headers).then(
          () => {
            const t1 = monoMs();
            rtt.push(t1 - t0);
            answered[k] = 1;
            accepted++;
            lastAnswerAt = t1;
          },
          (e: unknown) => {
            answered[k] = 2;
            failed++;
            firstError ??= errText(e);
            lastAnswerAt = monoMs();
          },
        ).finally(() => outstanding--);
      };

      ctl.mark("begin", "t3-send");
      const elu0 = performance.eventLoopUtilization();
      const cpu0 = process.cpuUsage();
      sending = true;
      sendStart = monoMs();
      const pending: Promise<void>[] = [];
      let k = 0;
      let pacerLagMaxMs = 0;
      while (k < total) {
        const now = monoMs();
        const due = Math.min(total, Math.floor(((now - sendStart) * o.rate) / 1_000) + 1);
        for (; k < due; k++) {
          pacerLagMaxMs = Math.max(pacerLagMaxMs, now - (sendStart + (k * 1_000) / o.rate));
          if (outstanding >= o.maxOutstanding) skipped++;
          else pending.push(send(k));
        }
        if (k < total) await sleep(Math.max(1, Math.min(5, sendStart + (k * 1_000) / o.rate - monoMs())));
      }
      await Promise.all(pending);
      const sendWindowMs = lastAnswerAt - sendStart;
      const answeredAt = monoMs();
      while (received < accepted && monoMs() - Math.max(answeredAt, lastFrameAt) <= o.drainMs) await sleep(20);
      sending = false;
      const load = usageSince(elu0, cpu0, sendStart);
      ctl.mark("end", "t3-send");
      sendConn.close();

      let lost = 0;
      for (let i = 0; i < total; i++) {
        if (answered[i] === 1 && !seen[i]) lost++;
        if (answered[i] === 2 && seen[i]) unexpected++;
      }
      idleResult.sends = {
        rate: o.rate,
        seconds: o.seconds,
        issued,
        accepted,
        failed,
        skipped,
        firstError,
        maxOutstanding,
        pacerLagMaxMs,
        sendWindowMs,
        rtt: summarize(rtt.sorted()),
        latency: summarize(latency.sorted()),
        received,
        lost,
        duplicates,
        unexpected,
        drainMs: Math.max(0, lastFrameAt - answeredAt),
        perSecond: buckets.map((x) => {
          const s = summarize(Float64Array.from(x.lat).sort());
          return { sent: x.sent, received: x.lat.length, p99: s.p99, max: s.max, keepAlives: x.keepAlives };
        }),
        load,
      };
      idleResult.hubAfterSends = await ctl.sample("after sends");
    }

    Object.assign(idleResult, { keepAlives, keepAlivesDuringSends, presenceFrames, otherFrames, streamErrors, firstStreamError });
    out.idle = idleResult;
    ctl.progress(`T3: closing ${o.idleStreams} streams`);
    closeBurst(b);
  }
  admin.close();
  return out;
}
