/**
 * The load side of bench/messages: registers agents, opens streams, sends, measures. Runs in a
 * process of its own (the default), in a worker thread (`--client thread`) or on the hub's own
 * thread (`--client inline`); either way it talks to the hub only over the network (Connect
 * binary over h2c). The messages' sends come from a thread of their own (sends.ts, sender.ts)
 * except inline, each content carrying its send's time. Sends, Subscribe streams and the
 * fan-out's watchers use the lean client of bench/common/raw-stream.ts unless
 * `--send-client connect` / `--watch-client connect`; set-up calls use connect-node. Returns
 * plain figures.
 */
import fs from "node:fs";
import http2 from "node:http2";
import { setMaxListeners } from "node:events";
import { Worker } from "node:worker_threads";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { createClient, type CallOptions, type Client } from "@connectrpc/connect";
import { PeerService, type SubscribeResponse } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { create, toBinary } from "@bufbuild/protobuf";
import { PresenceService, WatchPresenceRequestSchema, type WatchPresenceResponse } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { H2Conn } from "../common/raw-stream.js";
import { monoMs, Samples, summarize, type Summary } from "../common/stats.js";
import { makeTransport } from "../common/transport.js";
import { KeyState, sendScenario, type SendReport, type SendSpec } from "./sends.js";

export interface MessagesOptions {
  senders: number;
  recipients: number;
  /** Paced scenarios: target messages per second over all senders, one scenario per rate, each for `seconds`. */
  rates: number[];
  seconds: number;
  /** Unpaced scenario: this many sends in flight at once, for `maxSeconds` (0 = skip it). */
  maxConc: number;
  maxSeconds: number;
  /**
   * Paced only: a slot that comes due while this many sends are unanswered is skipped (counted,
   * not sent), so a hub that cannot keep up ends with a bounded backlog, not minutes of queue.
   */
  maxOutstanding: number;
  /** Characters of filler added to each message's content. */
  padding: number;
  /** How long to wait for stragglers after the last send answered. */
  drainMs: number;
  /** Unmeasured warm-up (JIT, SQLite page cache) before the first scenario: this long at 300/s; 0 = none. */
  warmupMs: number;
  /**
   * Which client sends and subscribes. lean: bench/common/raw-stream.ts (SendMessage as a
   * Connect unary call, Subscribe as a server stream, both binary over node:http2); connect:
   * connect-node clients.
   */
  client: "lean" | "connect";
  /**
   * Send from a worker thread of the load generator (sender.ts), so the thread that takes the
   * frames' arrival times collects only its own garbage; false: from that same thread (what
   * `--client inline` keeps, the whole load on the hub's thread).
   */
  sendThread: boolean;
}

export interface FanoutOptions {
  watchers: number;
  conns: number;
  rounds: number;
  /** token: project-token callers (no agents behind them); agent: one registered agent per watcher. */
  watchAs: "token" | "agent";
  project: string;
  token: string;
  /** Give up on a round (or on the snapshots) after this long. */
  timeoutMs: number;
  /**
   * Which client holds the watcher streams. lean: bench/common/raw-stream.ts (node:http2 and
   * Connect framing by hand, `fromBinary` per frame); connect: connect-node, one
   * `Http2SessionManager` per connection.
   */
  client: "lean" | "connect";
}

export interface LoadOptions {
  baseUrl: string;
  messages?: MessagesOptions;
  fanout?: FanoutOptions;
}

export interface MessagesResult {
  label: string;
  senders: number;
  recipients: number;
  /** Paced: target rate; unpaced: undefined. */
  targetRate?: number;
  inFlight?: number;
  /** Sends issued / answered OK / failed. */
  issued: number;
  accepted: number;
  failed: number;
  firstError?: string;
  /** From the first send to the last answer, ms. */
  sendWindowMs: number;
  /** Largest delay of the pacer behind its schedule, ms (paced only). */
  pacerLagMaxMs?: number;
  /** Most sends outstanding at once. */
  maxOutstanding: number;
  /** Paced slots skipped because `maxOutstanding` sends were unanswered (paced only). */
  skipped: number;
  /** SendMessage round trip as the sender sees it. */
  sendRtt: Summary;
  /** Send issued -> message frame decoded by the recipient's Subscribe stream. */
  latency: Summary;
  receivedUnique: number;
  duplicates: number;
  /** Accepted sends never seen by a recipient after the drain. */
  lost: number;
  /** Message frames for a send the sender saw fail, or for a key never sent. */
  unexpected: number;
  /** Frames whose cursor did not increase on their stream. */
  outOfOrder: number;
  /** Subscribe streams that ended with an error during the run. */
  streamErrors: string[];
  /** From the last answered send until the last frame arrived (or the drain gave up), ms. */
  drainMs: number;
  /** Event-loop utilization of the thread that takes the frames, over the scenario, 0..1. */
  loadBusy: number;
  /** Event-loop utilization of the sending thread over its sends, 0..1 (the same thread as loadBusy's with sendThread false). */
  sendBusy: number;
}

export interface FanoutRound {
  rpcMs: number;
  /** Per watcher: RegisterAgent issued -> the agent frame decoded by that watcher. */
  perWatcher: Summary;
  missing: number;
  loadBusy: number;
}

export interface FanoutResult {
  client: "lean" | "connect";
  watchers: number;
  conns: number;
  streamsPerConn: number[];
  watchAs: "token" | "agent";
  /** SETTINGS_MAX_CONCURRENT_STREAMS the hub advertised to a fresh h2 client connection. */
  serverMaxConcurrentStreams: number | undefined;
  /** Open all streams -> every snapshot decoded, ms. */
  openMs: number;
  openLoadBusy: number;
  snapshots: number;
  openErrors: number;
  firstError?: string;
  registerAgentsMs?: number;
  rounds: FanoutRound[];
  /** Watcher streams that ended with an error during the rounds. */
  streamErrors: number;
}

/**
 * Scenario boundaries, so the hub's side can measure its own event-loop utilization and the
 * process CPU over exactly the measured part. Called on the load generator's thread.
 */
export type Mark = (phase: "begin" | "end", label: string) => void;

export interface LoadResult {
  /** The unmeasured warm-up, reported only in one line. */
  warmup?: MessagesResult;
  messages: MessagesResult[];
  fanout?: FanoutResult;
}

const progress = (line: string) => {
  if (process.stderr.isTTY || process.env.BENCH_PROGRESS) process.stderr.write(`  .. ${line}\n`);
};
const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));

interface Agent {
  id: string;
  name: string;
  options: CallOptions;
}

async function register(
  presence: Client<typeof PresenceService>,
  name: string,
  project: string,
  headers: Record<string, string> = {},
): Promise<Agent> {
  const r = await presence.registerAgent({ name, project, purpose: "messages benchmark" }, { headers });
  return {
    id: r.agent!.id,
    name: r.agent!.name,
    options: { headers: { "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey, ...headers } },
  };
}

/** Runs what `o` asks for, in order: paced messages, unpaced messages, presence fan-out. */
export async function runLoad(o: LoadOptions, mark: Mark = () => {}): Promise<LoadResult> {
  const out: LoadResult = { messages: [] };
  if (o.messages) {
    const m = o.messages;
    const admin = makeTransport(o.baseUrl, "2", 1);
    const presence = createClient(PresenceService, admin.transport);
    const senders: Agent[] = [];
    for (let i = 0; i < m.senders; i++) senders.push(await register(presence, `sender-${i}`, "msgbench"));
    admin.close();
    const sender = m.sendThread ? threadSender() : inlineSender;
    try {
      await messageScenarios(o.baseUrl, m, senders, sender, out, mark);
    } finally {
      await sender.close();
    }
  }
  if (o.fanout) {
    progress(`fan-out: ${o.fanout.watchers} watchers over ${o.fanout.conns} connection(s)`);
    out.fanout = await fanout(o.baseUrl, o.fanout, mark);
  }
  return out;
}

/** The warm-up's marks: none (it is not measured). */
const noMark: Mark = () => {};

/** The warm-up, the paced scenarios, the unpaced one. */
async function messageScenarios(baseUrl: string, m: MessagesOptions, senders: Agent[], sender: Sender, out: LoadResult, mark: Mark) {
  let run = 0;
  if (m.warmupMs > 0) {
    progress(`messages: warm-up, 300/s for ${m.warmupMs} ms`);
    const w = { ...m, seconds: m.warmupMs / 1_000, drainMs: Math.min(m.drainMs, 1_000) };
    out.warmup = await messageScenario(baseUrl, w, senders, sender, { rate: 300 }, ++run, noMark);
  }
  for (const rate of m.rates) {
    progress(`messages: paced ${rate}/s for ${m.seconds} s`);
    out.messages.push(await messageScenario(baseUrl, m, senders, sender, { rate }, ++run, mark));
  }
  if (m.maxSeconds > 0 && m.maxConc > 0) {
    progress(`messages: unpaced, ${m.maxConc} in flight for ${m.maxSeconds} s`);
    out.messages.push(await messageScenario(baseUrl, m, senders, sender, "unpaced", ++run, mark));
  }
}

async function messageScenario(
  baseUrl: string,
  m: MessagesOptions,
  senders: Agent[],
  sender: Sender,
  mode: { rate: number } | "unpaced",
  run: number,
  mark: Mark,
): Promise<MessagesResult> {
  const label = mode === "unpaced" ? `unpaced, ${m.maxConc} in flight` : `paced ${mode.rate}/s`;
  // Fresh recipients per scenario: a new Subscribe without after_seq replays every pending
  // message, and the previous scenario's are still pending (nobody acks).
  const admin = makeTransport(baseUrl, "2", 1);
  const presence = createClient(PresenceService, admin.transport);
  const recipients: Agent[] = [];
  for (let i = 0; i < m.recipients; i++) recipients.push(await register(presence, `rcpt-${run}-${i}`, "msgbench"));
  admin.close();

  // Recipients: one h2 connection of their own; the senders share another, on the sending side.
  const sub = await subscribeClient(baseUrl, m.client);

  /** Send k -> its send-to-frame latency, for the first frame of each key. */
  const latencyOf = new Map<number, number>();
  let duplicates = 0;
  let unexpected = 0;
  let outOfOrder = 0;
  let lastFrameAt = 0;
  const streamErrors: string[] = [];
  const ac = new AbortController();
  setMaxListeners(0, ac.signal);
  // BENCH_LATENCY_LOG=FILE (measured scenarios): one line per message as it arrives, "<ms of its
  // send after the scenario's start> <wall-clock ms of its send> <latency ms>", appended at the
  // scenario's end, to lay the tail next to the hub's collection or event-loop log.
  const logLines = process.env.BENCH_LATENCY_LOG && mark !== noMark ? ([] as string[]) : undefined;
  let firstSentAt = 0;

  const streams = recipients.map(async (r, ri) => {
    let ready!: () => void;
    const isReady = new Promise<void>((res) => (ready = res));
    let lastCursor = -1n;
    const done = sub.subscribe(r.options.headers as Record<string, string>, ac.signal, (f) => {
      if (f.event.case === "ready") ready();
      if (f.event.case !== "message") return;
      const at = monoMs();
      if (f.cursor <= lastCursor) outOfOrder++;
      lastCursor = f.cursor;
      lastFrameAt = at;
      // content: "<sender> <k> <send time, monoMs> <padding>"
      const [, key, sentAt] = f.event.value.content.split(" ", 3);
      const k = Number(key);
      if (!Number.isInteger(k) || f.event.value.toAgentId !== r.id || k % recipients.length !== ri) {
        unexpected++;
        return;
      }
      if (latencyOf.has(k)) duplicates++;
      else {
        const ms = at - Number(sentAt);
        latencyOf.set(k, ms);
        if (logLines) logLines.push(`${(Number(sentAt) - firstSentAt).toFixed(1)} ${(Date.now() - ms).toFixed(1)} ${ms.toFixed(2)}`);
      }
    }).then(
      () => ready(),
      (e: unknown) => {
        if (!ac.signal.aborted) streamErrors.push(`recipient ${ri}: ${errText(e)}`);
        ready();
      },
    );
    await isReady;
    return { done }; // wrapped: an async function returning a promise would wait for it
  });
  const ended = (await Promise.all(streams)).map((s) => s.done);

  mark("begin", label);
  const elu0 = performance.eventLoopUtilization();
  firstSentAt = monoMs();
  const sent = await sender.run({
    baseUrl,
    client: m.client,
    senders: senders.map((s) => s.options.headers as Record<string, string>),
    targets: recipients.map((r) => r.id),
    mode: mode === "unpaced" ? { inFlight: m.maxConc, seconds: m.maxSeconds } : { rate: mode.rate, seconds: m.seconds },
    maxOutstanding: m.maxOutstanding,
    padding: m.padding,
  });
  const { keys } = sent;
  const sendWindowMs = sent.lastAnswerMs - sent.startMs;

  // Drain: wait until every accepted send was seen, or nothing arrived for drainMs.
  const answeredAt = monoMs();
  const seenAccepted = () => {
    let n = 0;
    for (const k of latencyOf.keys()) if (keys[k] === KeyState.accepted) n++;
    return n;
  };
  while (seenAccepted() < sent.accepted && monoMs() - Math.max(answeredAt, lastFrameAt) <= m.drainMs) await sleep(20);
  const drainMs = Math.max(0, lastFrameAt - answeredAt);
  const loadBusy = performance.eventLoopUtilization(elu0).utilization;
  mark("end", label);
  if (logLines) fs.appendFileSync(process.env.BENCH_LATENCY_LOG!, logLines.map((l) => `${l}\n`).join(""));

  const latency = new Samples();
  for (const [k, ms] of latencyOf) {
    if (keys[k] === KeyState.accepted) latency.push(ms);
    else unexpected++; // a frame for a send that failed, was skipped, or was never made
  }
  let lost = 0;
  for (let k = 0; k < keys.length; k++) if (keys[k] === KeyState.accepted && !latencyOf.has(k)) lost++;

  ac.abort();
  await Promise.all(ended);
  sub.close();

  return {
    label,
    senders: senders.length,
    recipients: recipients.length,
    ...(mode === "unpaced" ? { inFlight: m.maxConc } : { targetRate: mode.rate, pacerLagMaxMs: sent.pacerLagMaxMs }),
    issued: sent.issued,
    accepted: sent.accepted,
    failed: sent.failed,
    firstError: sent.firstError,
    sendWindowMs,
    maxOutstanding: sent.maxOutstanding,
    skipped: sent.skipped,
    sendRtt: sent.sendRtt,
    latency: summarize(latency.sorted()),
    receivedUnique: latencyOf.size,
    duplicates,
    lost,
    unexpected,
    outOfOrder,
    streamErrors,
    drainMs,
    loadBusy,
    sendBusy: sent.busy,
  };
}

/** Who runs a scenario's sends: a worker thread of the load generator, or its own thread. */
interface Sender {
  run(spec: SendSpec): Promise<SendReport>;
  close(): Promise<void>;
}

const inlineSender: Sender = { run: sendScenario, close: async () => {} };

/** The sends on a worker thread (sender.ts), one scenario at a time. */
function threadSender(): Sender {
  const worker = new Worker(new URL("../common/ts-worker.mjs", import.meta.url), {
    workerData: { entry: new URL("./sender.ts", import.meta.url).href },
    // A larger young generation for the sends: fewer scavenges between a send's time and its write.
    resourceLimits: { maxYoungGenerationSizeMb: 64 },
  });
  let pending: { resolve: (r: SendReport) => void; reject: (e: Error) => void } | undefined;
  let closing = false;
  worker.on("message", (m: { ok: true; report: SendReport } | { ok: false; error: string }) => {
    const p = pending;
    pending = undefined;
    if (m.ok) p?.resolve(m.report);
    else p?.reject(new Error(m.error));
  });
  const fail = (e: Error) => {
    pending?.reject(e);
    pending = undefined;
  };
  worker.on("error", fail);
  worker.on("exit", (code) => closing || fail(new Error(`the sending thread ended (exit code ${code})`)));
  return {
    run: (spec) =>
      new Promise<SendReport>((resolve, reject) => {
        pending = { resolve, reject };
        worker.postMessage(spec);
      }),
    async close() {
      closing = true;
      await worker.terminate();
    },
  };
}

/**
 * Subscribe streams on one h2 connection, with the client `--send-client` names. `subscribe`
 * resolves when the stream ends (or is cancelled through `signal`) and rejects when it fails.
 */
async function subscribeClient(baseUrl: string, client: "lean" | "connect") {
  if (client === "connect") {
    const conn = makeTransport(baseUrl, "2", 1);
    const peer = createClient(PeerService, conn.transport);
    return {
      async subscribe(headers: Record<string, string>, signal: AbortSignal, onFrame: (f: SubscribeResponse) => void) {
        for await (const f of peer.subscribe({}, { headers, signal })) onFrame(f);
      },
      close: () => conn.close(),
    };
  }
  const conn = await H2Conn.connect(baseUrl);
  return {
    subscribe: (headers: Record<string, string>, signal: AbortSignal, onFrame: (f: SubscribeResponse) => void) =>
      new Promise<void>((resolve, reject) => {
        const stream = conn.serverStream(PeerService.method.subscribe, {}, headers, {
          onMessage: onFrame,
          onEnd: (error) => (error ? reject(error) : resolve()),
        });
        signal.addEventListener("abort", () => {
          stream.cancel();
          resolve();
        });
      }),
    close: () => conn.close(),
  };
}

/** The SETTINGS_MAX_CONCURRENT_STREAMS the hub sends to a new h2 client connection. */
async function serverMaxStreams(baseUrl: string): Promise<number | undefined> {
  const s = http2.connect(baseUrl);
  try {
    return await new Promise<number | undefined>((resolve, reject) => {
      s.once("remoteSettings", (settings) => resolve(settings.maxConcurrentStreams));
      s.once("error", reject);
      setTimeout(() => resolve(undefined), 2_000).unref();
    });
  } finally {
    s.close();
  }
}

async function fanout(baseUrl: string, f: FanoutOptions, mark: Mark): Promise<FanoutResult> {
  const bearer = { authorization: `Bearer ${f.token}` };
  const serverMaxConcurrentStreams = await serverMaxStreams(baseUrl);
  const admin = makeTransport(baseUrl, "2", 1);
  const presence = createClient(PresenceService, admin.transport);

  let registerAgentsMs: number | undefined;
  const watcherHeaders: Record<string, string>[] = [];
  if (f.watchAs === "agent") {
    const t0 = monoMs();
    for (let i = 0; i < f.watchers; i++) {
      watcherHeaders.push((await register(presence, `watcher-${i}`, f.project, bearer)).options.headers as Record<string, string>);
    }
    registerAgentsMs = monoMs() - t0;
  } else {
    for (let i = 0; i < f.watchers; i++) watcherHeaders.push(bearer);
  }
  const streamsPerConn = Array.from({ length: f.conns }, () => 0);

  /** Per round: the name to look for, when RegisterAgent was issued, and who has seen it. */
  let round: { name: string; t0: number; seen: Float64Array; count: number; all: () => void } | undefined;
  let snapshots = 0;
  let openErrors = 0;
  let streamErrors = 0;
  let firstError: string | undefined;
  let allSnapshots!: () => void;
  const snapshotsDone = new Promise<void>((res) => (allSnapshots = res));
  let closing = false;

  /** Both clients call these: a decoded frame of watcher `w`; watcher `w` failed. */
  const gotSnapshot = new Uint8Array(f.watchers);
  const onFrame = (w: number, frame: WatchPresenceResponse) => {
    if (frame.event.case === "snapshot") {
      gotSnapshot[w] = 1;
      if (++snapshots + openErrors === f.watchers) allSnapshots();
    } else if (frame.event.case === "agent" && round && frame.event.value.name === round.name) {
      if (Number.isNaN(round.seen[w]!)) {
        round.seen[w] = monoMs() - round.t0;
        if (++round.count === f.watchers) round.all();
      }
    }
  };
  const onError = (w: number, e: unknown) => {
    if (closing) return;
    firstError ??= errText(e);
    if (gotSnapshot[w]) streamErrors++;
    else if (++openErrors + snapshots === f.watchers) allSnapshots();
  };

  mark("begin", "fan-open");
  const openElu0 = performance.eventLoopUtilization();
  const t0 = monoMs();
  const watchers =
    f.client === "lean"
      ? await openLean(baseUrl, f, watcherHeaders, streamsPerConn, onFrame, onError)
      : openConnect(baseUrl, f, watcherHeaders, streamsPerConn, onFrame, onError);
  const timeout = (ms: number) => sleep(ms, undefined, { ref: false });
  await Promise.race([snapshotsDone, timeout(f.timeoutMs)]);
  const openMs = monoMs() - t0;
  const openLoadBusy = performance.eventLoopUtilization(openElu0).utilization;
  mark("end", "fan-open");

  const rounds: FanoutRound[] = [];
  if (snapshots > 0) {
    for (let r = 0; r < f.rounds; r++) {
      await sleep(200); // let the previous round's writes settle
      let all!: () => void;
      const done = new Promise<void>((res) => (all = res));
      const seen = new Float64Array(f.watchers).fill(Number.NaN);
      const name = `fan-new-${r}`;
      mark("begin", name);
      const elu0 = performance.eventLoopUtilization();
      round = { name, t0: monoMs(), seen, count: 0, all };
      // Only watchers that hold a snapshot can see the change.
      const expected = snapshots;
      if (expected < f.watchers) round.count = f.watchers - expected;
      const rpc0 = monoMs();
      await presence.registerAgent({ name, project: f.project, purpose: "fan-out probe" }, { headers: bearer });
      const rpcMs = monoMs() - rpc0;
      await Promise.race([done, timeout(f.timeoutMs)]);
      const loadBusy = performance.eventLoopUtilization(elu0).utilization;
      mark("end", name);
      const got = Float64Array.from(seen.filter((x) => !Number.isNaN(x))).sort();
      rounds.push({ rpcMs, perWatcher: summarize(got), missing: expected - got.length, loadBusy });
      round = undefined;
    }
  }

  closing = true;
  await watchers.close();
  admin.close();
  return {
    client: f.client,
    watchers: f.watchers,
    conns: f.conns,
    streamsPerConn,
    watchAs: f.watchAs,
    serverMaxConcurrentStreams,
    openMs,
    openLoadBusy,
    snapshots,
    openErrors,
    firstError,
    registerAgentsMs,
    rounds,
    streamErrors,
  };
}

type OnFrame = (w: number, frame: WatchPresenceResponse) => void;
type OnError = (w: number, e: unknown) => void;

/** The watchers on connect-node: one `Http2SessionManager` per connection, a for-await loop per stream. */
function openConnect(
  baseUrl: string,
  f: FanoutOptions,
  headers: Record<string, string>[],
  streamsPerConn: number[],
  onFrame: OnFrame,
  onError: OnError,
): { close(): Promise<void> } {
  const conns = Array.from({ length: f.conns }, () => makeTransport(baseUrl, "2", 1));
  const clients = conns.map((c) => createClient(PresenceService, c.transport));
  const ac = new AbortController();
  setMaxListeners(0, ac.signal);
  const streams = headers.map(async (h, w) => {
    const c = w % f.conns;
    streamsPerConn[c]!++;
    try {
      for await (const frame of clients[c]!.watchPresence({ project: f.project }, { headers: h, signal: ac.signal })) onFrame(w, frame);
    } catch (e) {
      if (!ac.signal.aborted) onError(w, e);
    }
  });
  return {
    async close() {
      ac.abort();
      await Promise.all(streams);
      for (const c of conns) c.close();
    },
  };
}

/** The watchers on the lean client (bench/common/raw-stream.ts): callbacks, no per-stream promise. */
async function openLean(
  baseUrl: string,
  f: FanoutOptions,
  headers: Record<string, string>[],
  streamsPerConn: number[],
  onFrame: OnFrame,
  onError: OnError,
): Promise<{ close(): Promise<void> }> {
  const conns = await Promise.all(Array.from({ length: f.conns }, () => H2Conn.connect(baseUrl)));
  // Every watcher sends the same request: encode it once.
  const request = toBinary(WatchPresenceRequestSchema, create(WatchPresenceRequestSchema, { project: f.project }));
  const streams = headers.map((h, w) => {
    const c = w % f.conns;
    streamsPerConn[c]!++;
    return conns[c]!.serverStream(PresenceService.method.watchPresence, request, h, {
      onMessage: (frame) => onFrame(w, frame),
      onEnd: (e) => onError(w, e ?? new Error("stream ended")),
    });
  });
  return {
    async close() {
      for (const s of streams) s.cancel();
      for (const c of conns) c.close();
    },
  };
}
