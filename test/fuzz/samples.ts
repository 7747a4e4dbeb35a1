// A valid request for every method (REST JSON spelling), so that one hostile part of an
// otherwise sound request is what the hub must refuse. Values name the seeded world.
import { create, toBinary, type DescMethod, type JsonObject } from "@bufbuild/protobuf";
import { fromRestJson } from "../../src/transcode/rest-json.js";
import { syncEvent } from "../sync/fixtures.js";
import { ADMIN_TOKEN, PROJECT_ID, PROJECT_TOKEN, RUN_ID, RUNTIME_ID, type World } from "./harness.js";

type Sample = (w: World) => JsonObject;

const samples: Record<string, Sample> = {
  RegisterAgent: () => ({ name: "fz-agent", project: "p", purpose: "fuzz", model: "m", host: "h" }),
  Heartbeat: (w) => ({ agentId: w.a.id }),
  UnregisterAgent: (w) => ({ agentId: w.a.id }),
  ListAgents: () => ({ includeOffline: true }),
  ReportRuntimePresence: () => ({ project: "p", runtimeId: RUNTIME_ID, host: "h" }),
  WatchPresence: () => ({ project: "p" }),
  AcquireLease: () => ({ name: "fz-lease", ttlMs: 60_000 }),
  RenewLease: () => ({ name: "db", fencingToken: 1, ttlMs: 60_000 }),
  ReleaseLease: () => ({ name: "db", fencingToken: 1 }),
  GetLease: () => ({ name: "db" }),
  CheckFence: () => ({ name: "db", fencingToken: 1 }),
  ListLeases: () => ({ includeExpired: true, pageSize: 10 }),
  WatchLeases: () => ({ project: "p" }),
  SendMessage: (w) => ({ target: w.b.id, content: "fuzz", delivery: "followUp", ttlMs: 60_000, allowOffline: true }),
  AckMessage: (w) => ({ messageId: w.openMessageId }),
  ReplyMessage: (w) => ({ messageId: w.openMessageId, content: "re" }),
  CancelMessage: (w) => ({ messageId: w.openMessageId }),
  GetMessage: (w) => ({ messageId: w.openMessageId }),
  ListMessages: () => ({ box: "inbox", status: ["queued", "delivered"], pageSize: 10 }),
  Subscribe: () => ({ afterSeq: 0 }),
  PushEvents: () => ({ project: "p", runtimeId: RUNTIME_ID, events: [syncEvent({ sequence: 2 })] as JsonObject[] }),
  GetCursor: () => ({ project: "p", projectId: PROJECT_ID, runId: RUN_ID }),
  GetSnapshot: () => ({ project: "p" }),
  ServerReflectionInfo: () => ({ host: "", listServices: "" }),
};

export const sampleJson = (m: DescMethod, w: World): JsonObject => ({ ...(samples[m.name]?.(w) ?? {}) });

/** The sample as protobuf binary (the RPC face's payload). */
export const sampleBinary = (m: DescMethod, w: World): Uint8Array =>
  toBinary(m.input, samples[m.name] ? fromRestJson(m.input, sampleJson(m, w)) : create(m.input));

/** Whose credentials a request carries. */
export type Creds = "agentA" | "agentB" | "project" | "admin" | "none" | "wrongKey" | "wrongToken";
export const credsKinds: readonly Creds[] = ["agentA", "agentA", "agentB", "project", "admin", "none", "wrongKey", "wrongToken"];

export function credHeaders(c: Creds, w: World): [string, string][] {
  switch (c) {
    case "agentA":
      return Object.entries(w.a.headers);
    case "agentB":
      return Object.entries(w.b.headers);
    case "project":
      return [["authorization", `Bearer ${PROJECT_TOKEN}`]];
    case "admin":
      return [["authorization", `Bearer ${ADMIN_TOKEN}`]];
    case "none":
      return [];
    case "wrongKey":
      return [["x-kxm-agent-id", w.a.id], ["x-kxm-agent-key", "key_00000000000000000000000000000000"], ["authorization", `Bearer ${PROJECT_TOKEN}`]];
    case "wrongToken":
      return [...Object.entries(w.a.headers).filter(([k]) => k !== "authorization"), ["authorization", "Bearer nope"]];
  }
}

/** Values for path variables, by field name. */
export function pathValue(variable: string, w: World): string {
  switch (variable) {
    case "agent_id":
      return w.a.id;
    case "name":
      return "db";
    case "message_id":
      return w.openMessageId;
    case "project_id":
      return PROJECT_ID;
    case "run_id":
      return RUN_ID;
    default:
      return "x";
  }
}
