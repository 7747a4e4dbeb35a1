/**
 * The load side of bench/messages: registers agents, opens streams, sends, measures. Runs on
 * the hub's own thread (`--client inline`) or in a worker thread (`--client thread`); either way
 * it talks to the hub only over the network (Connect binary over h2c). Sends, Subscribe streams
 * and the fan-out's watchers use the lean client of bench/common/raw-stream.ts unless
 * `--send-client connect` / `--watch-client connect`; set-up calls use connect-node. Returns
 * plain figures.
 */
import http2 from "node:http2";
import { setMaxListeners } from "node:events";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { createClient, type CallOptions, type Client } from "@connectrpc/connect";
import { PeerService, type SendMessageRequestSchema, type SubscribeResponse } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { PresenceService, WatchPresenceRequestSchema, type WatchPresenceResponse } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { H2Conn } from "../common/raw-stream.js";
import { monoMs, Samples, summarize, type Summary } from "../common/stats.js";
import { makeTransport } from "../common/transport.js";

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
  /** Event-loop utilization of the load generator's thread over the scenario, 0..1. */
  loadBusy: number;
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
    let run = 0;
    if (m.warmupMs > 0) {
      progress(`messages: warm-up, 300/s for ${m.warmupMs} ms`);
      const w = { ...m, seconds: m.warmupMs / 1_000, drainMs: Math.min(m.drainMs, 1_000) };
      out.warmup = await messageScenario(o.baseUrl, w, senders, { rate: 300 }, ++run, () => {});
    }
    for (const rate of m.rates) {
      progress(`messages: paced ${rate}/s for ${m.seconds} s`);
      out.messages.push(await messageScenario(o.baseUrl, m, senders, { rate }, ++run, mark));
    }
    if (m.maxSeconds > 0 && m.maxConc > 0) {
      progress(`messages: unpaced, ${m.maxConc} in flight for ${m.maxSeconds} s`);
      out.messages.push(await messageScenario(o.baseUrl, m, senders, "unpaced", ++run, mark));
    }
  }
  if (o.fanout) {
    progress(`fan-out: ${o.fanout.watchers} watchers over ${o.fanout.conns} connection(s)`);
    out.fanout = await fanout(o.baseUrl, o.fanout, mark);
  }
  return out;
}

async function messageScenario(
  baseUrl: string,
  m: MessagesOptions,
  senders: Agent[],
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

  // Recipients: one h2 connection of their own; senders share another.
  const { subscribe, sendMessage, close } = await peerClients(baseUrl, m.client);

  const latency = new Samples();
  const sendRtt = new Samples();
  /** key "sender:k" -> send issue time (ms); set when the send is issued. */
  const issuedAt = new Map<string, number>();
  const failedKeys = new Set<string>();
  const seen = new Set<string>();
  let duplicates = 0;
  let unexpected = 0;
  let outOfOrder = 0;
  let lastFrameAt = 0;
  const streamErrors: string[] = [];
  const ac = new AbortController();
  setMaxListeners(0, ac.signal);

  const streams = recipients.map(async (r, ri) => {
    let ready!: () => void;
    const isReady = new Promise<void>((res) => (ready = res));
    let lastCursor = -1n;
    const done = subscribe(
      r.options.headers as Record<string, string>,
      ac.signal,
      (f) => {
        if (f.event.case === "ready") ready();
        if (f.event.case !== "message") return;
        const at = monoMs();
        if (f.cursor <= lastCursor) outOfOrder++;
        lastCursor = f.cursor;
        lastFrameAt = at;
        // content: "<sender> <k> <issued ms> <padding>"
        const [s, k] = f.event.value.content.split(" ", 2);
        const key = `${s}:${k}`;
        if (seen.has(key)) {
          duplicates++;
          return;
        }
        seen.add(key);
        const t0 = issuedAt.get(key);
        if (t0 === undefined || f.event.value.toAgentId !== r.id) {
          unexpected++;
          return;
        }
        latency.push(at - t0);
      },
    ).then(
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

  const pad = "x".repeat(m.padding);
  let issued = 0;
  let accepted = 0;
  let failed = 0;
  let firstError: string | undefined;
  let outstanding = 0;
  let maxOutstanding = 0;
  let lastAnswerAt = 0;
  const send = (k: number): Promise<void> => {
    const s = k % senders.length;
    const key = `${s}:${k}`;
    const target = recipients[k % recipients.length]!.id;
    const t0 = monoMs();
    issuedAt.set(key, t0);
    issued++;
    outstanding++;
    if (outstanding > maxOutstanding) maxOutstanding = outstanding;
    return sendMessage({ target, content: `${s} ${k} ${t0.toFixed(3)} ${pad}` }, senders[s]!.options.headers as Record<string, string>).then(
      () => {
        const t1 = monoMs();
        sendRtt.push(t1 - t0);
        accepted++;
        lastAnswerAt = t1;
      },
      (e: unknown) => {
        failed++;
        failedKeys.add(key);
        firstError ??= errText(e);
        lastAnswerAt = monoMs();
      },
    ).finally(() => {
      outstanding--;
    });
  };

  mark("begin", label);
  const elu0 = performance.eventLoopUtilization();
  const start = monoMs();
  let pacerLagMaxMs: number | undefined;
  let skipped = 0;
  if (mode !== "unpaced") {
    // Open loop: every message has a slot at start + k / rate; sends do not wait for answers.
    const rate = mode.rate;
    const total = Math.round(rate * m.seconds);
    const pending: Promise<void>[] = [];
    let k = 0;
    pacerLagMaxMs = 0;
    while (k < total) {
      const now = monoMs();
      const due = Math.min(total, Math.floor(((now - start) * rate) / 1_000) + 1);
      for (; k < due; k++) {
        pacerLagMaxMs = Math.max(pacerLagMaxMs, now - (start + (k * 1_000) / rate));
        if (outstanding >= m.maxOutstanding) skipped++;
        else pending.push(send(k));
      }
      if (k < total) await sleep(Math.max(1, Math.min(5, start + (k * 1_000) / rate - monoMs())));
    }
    await Promise.all(pending);
  } else {
    // Closed loop: maxConc workers, each sends again as soon as its answer arrives.
    const stopAt = start + m.maxSeconds * 1_000;
    let k = 0;
    await Promise.all(
      Array.from({ length: m.maxConc }, async () => {
        while (monoMs() < stopAt) await send(k++);
      }),
    );
  }
  const sendWindowMs = lastAnswerAt - start;

  // Drain: wait until every accepted send was seen, or nothing arrived for drainMs.
  const answeredAt = monoMs();
  for (;;) {
    const got = [...issuedAt.keys()].reduce((n, key) => n + (seen.has(key) && !failedKeys.has(key) ? 1 : 0), 0);
    if (got >= accepted) break;
    if (monoMs() - Math.max(answeredAt, lastFrameAt) > m.drainMs) break;
    await sleep(20);
  }
  const drainMs = Math.max(0, lastFrameAt - answeredAt);
  const loadBusy = performance.eventLoopUtilization(elu0).utilization;
  mark("end", label);
  let lost = 0;
  for (const key of issuedAt.keys()) if (!failedKeys.has(key) && !seen.has(key)) lost++;
  for (const key of failedKeys) if (seen.has(key)) unexpected++;

  ac.abort();
  await Promise.all(ended);
  close();

  return {
    label,
    senders: senders.length,
    recipients: recipients.length,
    ...(mode === "unpaced" ? { inFlight: m.maxConc } : { targetRate: mode.rate, pacerLagMaxMs }),
    issued,
    accepted,
    failed,
    firstError,
    sendWindowMs,
    maxOutstanding,
    skipped,
    sendRtt: summarize(sendRtt.sorted()),
    latency: summarize(latency.sorted()),
    receivedUnique: seen.size,
    duplicates,
    lost,
    unexpected,
    outOfOrder,
    streamErrors,
    drainMs,
    loadBusy,
  };
}

/**
 * SendMessage and Subscribe over two h2 connections (senders on one, recipients on the other),
 * with the client `--send-client` names. `subscribe` resolves when the stream ends (or is
 * cancelled through `signal`) and rejects when it fails.
 */
async function peerClients(baseUrl: string, client: "lean" | "connect") {
  if (client === "connect") {
    const subConn = makeTransport(baseUrl, "2", 1);
    const sendConn = makeTransport(baseUrl, "2", 1);
    const peerSub = createClient(PeerService, subConn.transport);
    const peerSend = createClient(PeerService, sendConn.transport);
    return {
      async subscribe(headers: Record<string, string>, signal: AbortSignal, onFrame: (f: SubscribeResponse) => void) {
        for await (const f of peerSub.subscribe({}, { headers, signal })) onFrame(f);
      },
      sendMessage: (req: MessageInitShape<typeof SendMessageRequestSchema>, headers: Record<string, string>) =>
        peerSend.sendMessage(req, { headers }),
      close() {
        subConn.close();
        sendConn.close();
      },
    };
  }
  const subConn = await H2Conn.connect(baseUrl);
  const sendConn = await H2Conn.connect(baseUrl);
  return {
    subscribe: (headers: Record<string, string>, signal: AbortSignal, onFrame: (f: SubscribeResponse) => void) =>
      new Promise<void>((resolve, reject) => {
        const stream = subConn.serverStream(PeerService.method.subscribe, {}, headers, {
          onMessage: onFrame,
          onEnd: (error) => (error ? reject(error) : resolve()),
        });
        signal.addEventListener("abort", () => {
          stream.cancel();
          resolve();
        });
      }),
    sendMessage: (req: MessageInitShape<typeof SendMessageRequestSchema>, headers: Record<string, string>) =>
      sendConn.unary(PeerService.method.sendMessage, req, headers),
    close() {
      subConn.close();
      sendConn.close();
    },
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
