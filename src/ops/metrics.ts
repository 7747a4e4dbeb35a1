import { Counter, Gauge, Registry } from "prom-client";
import type { CounterName } from "../observe.js";
import type { HubStore } from "../store/store.js";

/**
 * Prometheus metrics with the reference hub's names, registered in the reference's order.
 * Counters live in memory (reset on restart); the gauges read the store at scrape time.
 * Workflow and context counters are out of scope and not exported.
 */
export function createMetrics(store: HubStore) {
  const registry = new Registry();
  new Gauge({
    name: "kxm_online_agents",
    help: "Agents with the stored online flag.",
    registers: [registry],
    async collect() {
      this.set(await store.countOnlineAgents());
    },
  });
  new Gauge({
    name: "kxm_messages",
    help: "Retained message rows.",
    registers: [registry],
    async collect() {
      this.set(await store.countMessages());
    },
  });
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
    leasesGranted: counter("kxm_leases_granted_total", "Successful lease acquires and renewals."),
    leasesRefused: counter("kxm_leases_refused_total", "Lease refusals."),
    leasesReleased: counter("kxm_leases_released_total", "Lease releases."),
    syncAccepted: counter("kxm_sync_events_accepted_total", "Sync events stored."),
    syncDuplicate: counter("kxm_sync_events_duplicate_total", "Sync events already stored with the same hash."),
    syncRefused: counter("kxm_sync_events_refused_total", "Sync events rejected or in conflict."),
    syncConflicts: counter("kxm_sync_conflicts_total", "Sync events in conflict with stored facts."),
    runtimeHeartbeats: counter("kxm_runtime_heartbeats_total", "Runtime presence heartbeats."),
  };
  // Reserved by the reference hub and always 0.
  counter("kxm_attempt_latency_seconds_total", "Reserved; always 0.");
  counter("kxm_metered_cost_usd_total", "Reserved; always 0.");

  return {
    count(name: CounterName, by = 1) {
      counters[name].inc(by);
    },
    contentType: "text/plain; version=0.0.4; charset=utf-8",
    render: () => registry.metrics(),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
