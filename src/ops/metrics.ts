import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { CallReport, CounterName, StreamKind } from "../observe.js";
import type { HubStore } from "../store/store.js";

/** The server streams the hub serves; their gauge series exist (at 0) before any opens. */
export const streamKinds: readonly StreamKind[] = ["subscribe", "watch_presence", "watch_leases"];

/** Request latency buckets in seconds: SQLite calls take well under a millisecond. */
const durationBuckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * Node's process metrics (`process_*`, `nodejs_*`) describe the process, not a hub, so they live
 * in one registry per process: every hub (tests build many) renders the same collectors, and
 * their GC and event-loop observers are installed once.
 */
let processRegistry: Registry | undefined;
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

export interface MetricsSources {
  /** Held leases now (read from the store at scrape time); without it the gauge is not exported. */
  heldLeases?: () => Promise<number>;
  /** Export Node's process metrics (default true). */
  processMetrics?: boolean;
}

/**
 * Prometheus metrics: the reference hub's names first, in the reference's order, then the
 * hub's own (per-method calls and latency, open streams, held leases), then Node's process
 * metrics. Counters live in memory (reset on restart); the gauges read the store, or the
 * hub's own state, at scrape time.
 */
export function createMetrics(store: Pick<HubStore, "agents" | "messages" | "commitStats">, sources: MetricsSources = {}) {
  const registry = new Registry();
  /**
   * A gauge read from the store at scrape time. While the store cannot answer (a PostgreSQL
   * database away) the gauge keeps the last value read, and the scrape goes on: the process's
   * metrics and the counters matter most then, and `/ready` says the store is away.
   */
  const storeGauge = (name: string, help: string, read: () => Promise<number>) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        try {
          this.set(await read());
        } catch {
          // the last value read stays
        }
      },
    });
  storeGauge("kxm_online_agents", "Agents with the stored online flag.", () => store.agents.countOnlineAgents());
  storeGauge("kxm_messages", "Retained message rows.", () => store.messages.countMessages());
  const counter = (name: string, help: string) => new Counter({ name, help, registers: [registry] });
  const counters: Record<CounterName, Counter> = {
    requests: counter("kxm_requests_total", "All HTTP requests, health checks included."),
    errors: counter("kxm_errors_total", "All error responses."),
    registrations: counter("kxm_registrations_total", "Agent registrations, new and resumed."),
    messagesSent: counter("kxm_messages_sent_total", "Messages sent (idempotent replays not counted)."),
    messagesReplied: counter("kxm_messages_replied_total", "Messages replied."),
    messagesCancelled: counter("kxm_messages_cancelled_total", "Messages cancelled (repeat cancels not counted)."),
    messagesExpired: counter("kxm_messages_expired_total", "Messages expired before a reply."),
    messagesPurged: counter("kxm_messages_purged_total", "Ended messages purged after retention."),
    // @NOTE the reference counts renewals here too; a holder renewing every third of its TTL then
    // hides the grants (89 for 20 acquires). Renewals have their own counter.
    leasesGranted: counter("kxm_leases_granted_total", "Leases granted: new grants, takeovers and handovers to a waiter (renewals not counted)."),
    leasesRenewed: counter("kxm_leases_renewed_total", "Lease renewals (RenewLease, and AcquireLease of the caller's own live lease)."),
    leasesRefused: counter("kxm_leases_refused_total", "Lease refusals."),
    leasesReleased: counter("kxm_leases_released_total", "Lease releases: by the holder, and forced (operator, eviction, takeover)."),
    syncAccepted: counter("kxm_sync_events_accepted_total", "Sync events stored."),
    syncDuplicate: counter("kxm_sync_events_duplicate_total", "Sync events already stored with the same hash."),
    syncRefused: counter("kxm_sync_events_refused_total", "Sync events rejected or in conflict."),
    syncConflicts: counter("kxm_sync_conflicts_total", "Sync events in conflict with stored facts."),
    runtimeHeartbeats: counter("kxm_runtime_heartbeats_total", "Runtime presence heartbeats."),
  };
  // Kept for dashboards written against the reference hub, which reserves them for model-call
  // accounting (attempt latency, metered cost). This hub runs no model calls: always 0.
  counter("kxm_attempt_latency_seconds_total", "Reserved by the reference hub for model-call latency; this hub makes no model calls, so always 0.");
  counter("kxm_metered_cost_usd_total", "Reserved by the reference hub for metered model cost; this hub makes no model calls, so always 0.");

  const callLabels = ["face", "service", "method", "code"] as const;
  const calls = new Counter({
    name: "kxm_rpc_requests_total",
    help: 'Finished requests by face (rpc, rest, http), RPC service and method ("" when the request named none) and Connect code ("ok" on success).',
    labelNames: callLabels,
    registers: [registry],
  });
  const durations = new Histogram({
    name: "kxm_rpc_duration_seconds",
    help: "Time from a request's arrival to its last byte (a stream's whole life), by face, service and method.",
    labelNames: ["face", "service", "method"] as const,
    buckets: durationBuckets,
    registers: [registry],
  });
  const streams = new Gauge({
    name: "kxm_open_streams",
    help: "Server streams open now, by kind.",
    labelNames: ["kind"] as const,
    registers: [registry],
  });
  for (const kind of streamKinds) streams.set({ kind }, 0);
  new Counter({
    name: "kxm_store_commits_total",
    help: "Store transactions committed (group commit: each holds one or more decisions, one WAL sync).",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(store.commitStats().commits);
    },
  });
  new Counter({
    name: "kxm_store_decisions_total",
    help: "Store decisions committed, refusals included; over kxm_store_commits_total, the mean batch size.",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(store.commitStats().works);
    },
  });
  const heldLeases = sources.heldLeases;
  if (heldLeases) storeGauge("kxm_held_leases", "Leases held now (a holder, not lapsed).", heldLeases);
  type Child = { duration: ReturnType<typeof durations.labels>; codes: Map<string, ReturnType<typeof calls.labels>> };
  /** By face, then service, then method: each key a string the hub keeps, whose hash is kept with it. */
  const children = new Map<string, Map<string, Map<string, Child>>>();
  const registries = sources.processMetrics === false ? [registry] : [registry, processMetrics()];

  return {
    count(name: CounterName, by = 1) {
      counters[name].inc(by);
    },
    call(r: CallReport) {
      // The label children, looked up once per label set: prom-client would hash the labels of
      // every call otherwise. Label values come from the hub's own services and codes, so the
      // cache is as bounded as the series themselves. Looked up level by level: a key joined at
      // every call would be a new string to hash at every call.
      let services = children.get(r.face);
      if (!services) children.set(r.face, (services = new Map()));
      let methods = services.get(r.service);
      if (!methods) services.set(r.service, (methods = new Map()));
      let child = methods.get(r.method);
      if (!child) methods.set(r.method, (child = { duration: durations.labels(r.face, r.service, r.method), codes: new Map() }));
      let counter = child.codes.get(r.code);
      if (!counter) child.codes.set(r.code, (counter = calls.labels(r.face, r.service, r.method, r.code)));
      counter.inc();
      child.duration.observe(r.durationMs / 1_000);
    },
    stream(kind: StreamKind, delta: 1 | -1) {
      streams.inc({ kind }, delta);
    },
    contentType: "text/plain; version=0.0.4; charset=utf-8",
    /**
     * The exposition: every registry in order, without the blank lines prom-client puts between
     * metrics, and with NaN spelled as the format spells it (prom-client writes "Nan").
     */
    async render(): Promise<string> {
      const texts = await Promise.all(registries.map((r) => r.metrics()));
      const lines = texts
        .join("\n")
        .split("\n")
        .filter((line) => line !== "")
        .map((line) => (line.endsWith(" Nan") && !line.startsWith("#") ? `${line.slice(0, -3)}NaN` : line));
      return `${lines.join("\n")}\n`;
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
