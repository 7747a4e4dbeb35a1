/**
 * What domain code reports: log events with the reference hub's names, and counters. The ops
 * layer implements it (pino, prom-client); domain code never imports either.
 */
export type CounterName =
  | "requests"
  | "errors"
  | "registrations"
  | "leasesGranted"
  | "leasesRefused"
  | "leasesReleased"
  | "runtimeHeartbeats"
  | "messagesSent"
  | "messagesReplied"
  | "messagesCancelled"
  | "messagesExpired"
  | "messagesPurged"
  | "syncAccepted"
  | "syncDuplicate"
  | "syncRefused"
  | "syncConflicts";

export interface Observer {
  log(event: string, fields: Record<string, unknown>): void;
  count(counter: CounterName, by?: number): void;
}
