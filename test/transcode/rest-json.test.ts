import { describe, it, expect } from "vitest";
import { create, createFileRegistry, isFieldSet, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate, timestampDate, DurationSchema, FieldDescriptorProto_Type, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { fromRestJson, fromRestQuery, toRestJson, RestFieldError } from "../../src/transcode/rest-json.js";
import { markUnknownProperty, unknownProperties } from "../../src/wire/unknown-properties.js";
import {
  AcquireLeaseRequestSchema,
  AcquireLeaseResponseSchema,
  ListLeasesRequestSchema,
  RenewLeaseRequestSchema,
  WatchLeasesResponseSchema,
  LeaseEventKind,
} from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import {
  Delivery,
  MessageSchema,
  MessageStatus,
  ListMessagesRequestSchema,
  SendMessageRequestSchema,
} from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import {
  AgentSchema,
  ListAgentsRequestSchema,
  ListAgentsResponseSchema,
  PresenceState,
  WatchPresenceResponseSchema,
} from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { SyncEventSchema, UsageSchema } from "../../gen/ts/kxm/hub/v1/sync_event_pb.js";
import { PushEventsRequestSchema, SyncEventResultSchema, SyncOutcome } from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { GetSnapshotResponseSchema } from "../../gen/ts/kxm/hub/v1/ops_pb.js";

/** Runs fn and returns the RestFieldError it must throw. */
function fieldError(fn: () => unknown): RestFieldError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(RestFieldError);
    return err as RestFieldError;
  }
  throw new Error("expected a RestFieldError");
}

describe("fromRestJson: scalars", () => {
  it("decodes an int32 and rejects strings, fractions and out-of-range values", () => {
    const req = fromRestJson(AcquireLeaseRequestSchema, { name: "build", ttlMs: 5000 });
    expect(req.name).toBe("build");
    expect(req.ttlMs).toBe(5000);
    expect(fromRestJson(AcquireLeaseRequestSchema, JSON.parse('{"ttlMs": 5.0}')).ttlMs).toBe(5);

    let e = fieldError(() => fromRestJson(AcquireLeaseRequestSchema, { ttlMs: "5000" }));
    expect([e.field, e.message]).toEqual(["ttlMs", "ttlMs must be an integer"]);
    e = fieldError(() => fromRestJson(AcquireLeaseRequestSchema, { ttlMs: 1.5 }));
    expect(e.message).toBe("ttlMs must be an integer");
    e = fieldError(() => fromRestJson(AcquireLeaseRequestSchema, { ttlMs: 1e12 }));
    expect([e.field, e.message]).toEqual(["ttlMs", "ttlMs is out of range"]);
    expect(fromRestJson(AcquireLeaseRequestSchema, { ttlMs: 2 ** 31 - 1 }).ttlMs).toBe(2 ** 31 - 1);
    fieldError(() => fromRestJson(AcquireLeaseRequestSchema, { ttlMs: 2 ** 31 }));
    fieldError(() => fromRestJson(AcquireLeaseRequestSchema, { ttlMs: true }));
  });

  it("stores int64 as bigint within ±2^53-1", () => {
    const req = fromRestJson(RenewLeaseRequestSchema, { name: "x", fencingToken: 2 ** 53 - 1 });
    expect(req.fencingToken).toBe(2n ** 53n - 1n);
    expect(fromRestJson(RenewLeaseRequestSchema, { fencingToken: -(2 ** 53 - 1) }).fencingToken).toBe(-(2n ** 53n - 1n));
    const e = fieldError(() => fromRestJson(RenewLeaseRequestSchema, { fencingToken: 2 ** 53 }));
    expect([e.field, e.message]).toEqual(["fencingToken", "fencingToken is out of range"]);
    expect(fieldError(() => fromRestJson(RenewLeaseRequestSchema, { fencingToken: "12" })).message).toBe(
      "fencingToken must be an integer",
    );
  });

  it("checks strings, booleans and doubles without coercion or trimming", () => {
    expect(fromRestJson(AcquireLeaseRequestSchema, { name: "  spaced  " }).name).toBe("  spaced  ");
    expect(fieldError(() => fromRestJson(AcquireLeaseRequestSchema, { name: 7 })).message).toBe("name must be a string");
    expect(fromRestJson(SendMessageRequestSchema, { allowOffline: true }).allowOffline).toBe(true);
    const e = fieldError(() => fromRestJson(SendMessageRequestSchema, { allowOffline: "yes" }));
    expect([e.field, e.message]).toEqual(["allowOffline", "allowOffline must be a boolean"]);
    expect(fromRestJson(UsageSchema, { cost: 0.25 }).cost).toBe(0.25);
    expect(fieldError(() => fromRestJson(ListLeasesRequestSchema, { pageSize: 2.5 })).message).toBe("pageSize must be an integer");
  });

  it("ignores unknown keys and treats null as absent", () => {
    const req = fromRestJson(SendMessageRequestSchema, { target: "bob", bogus: 1, ttlMs: null, correlationId: null });
    expect(req.target).toBe("bob");
    expect(isFieldSet(req, SendMessageRequestSchema.field.ttlMs)).toBe(false);
    expect(isFieldSet(req, SendMessageRequestSchema.field.correlationId)).toBe(false);
    // Own keys only: nothing is read through Object.prototype.
    expect(fromRestJson(AgentSchema, JSON.parse('{"__proto__": {"name": "x"}}')).name).toBe("");
  });

  it("decodes into an existing message, replacing only the keys given", () => {
    const into = create(SendMessageRequestSchema, { target: "bob", content: "hi" });
    const out = fromRestJson(SendMessageRequestSchema, { content: "bye" }, into);
    expect(out).toBe(into);
    expect([out.target, out.content]).toEqual(["bob", "bye"]);
  });

  it("rejects a body that is not an object", () => {
    expect(fieldError(() => fromRestJson(SendMessageRequestSchema, [] as unknown as JsonObject)).field).toBe("");
  });
});

describe("fromRestJson: enums", () => {
  it("accepts rest_name spellings and lists them on error", () => {
    expect(fromRestJson(SendMessageRequestSchema, { delivery: "followUp" }).delivery).toBe(Delivery.FOLLOW_UP);
    expect(fromRestJson(SendMessageRequestSchema, { delivery: "steer" }).delivery).toBe(Delivery.STEER);
    expect(fromRestJson(SendMessageRequestSchema, { delivery: "nextTurn" }).delivery).toBe(Delivery.NEXT_TURN);
    for (const bad of ["bogus", "DELIVERY_FOLLOW_UP", "DELIVERY_UNSPECIFIED", 1]) {
      const e = fieldError(() => fromRestJson(SendMessageRequestSchema, { delivery: bad }));
      expect([e.field, e.message]).toEqual(["delivery", "delivery must be one of followUp, steer, nextTurn"]);
    }
  });

  it("uses the proto name for values without rest_name, never the zero value", () => {
    // Every enum of the hub's API has rest names: a message of a test file whose enum has none.
    const file = create(FileDescriptorProtoSchema, {
      name: "fake/v1/paint.proto",
      package: "fake.v1",
      syntax: "proto3",
      enumType: [{ name: "Color", value: [{ name: "COLOR_UNSPECIFIED", number: 0 }, { name: "COLOR_RED", number: 1 }, { name: "COLOR_BLUE", number: 2 }] }],
      messageType: [{ name: "Paint", field: [{ name: "color", number: 1, jsonName: "color", type: FieldDescriptorProto_Type.ENUM, typeName: ".fake.v1.Color" }] }],
    });
    const Paint = createFileRegistry(file, () => undefined).getMessage("fake.v1.Paint")!;
    expect(toRestJson(Paint, fromRestJson(Paint, { color: "COLOR_BLUE" }))).toEqual({ color: "COLOR_BLUE" });
    const e = fieldError(() => fromRestJson(Paint, { color: "COLOR_UNSPECIFIED" }));
    expect([e.field, e.message]).toEqual(["color", "color must be one of COLOR_RED, COLOR_BLUE"]);
  });

  it("names the frames of the event streams by rest_name", () => {
    const frame = { cursor: 1, change: { kind: "takenOver" } };
    const decoded = fromRestJson(WatchLeasesResponseSchema, frame);
    expect(decoded.event.case === "change" && decoded.event.value.kind).toBe(LeaseEventKind.TAKEN_OVER);
    expect(toRestJson(WatchLeasesResponseSchema, decoded)).toMatchObject({ cursor: 1, change: { kind: "takenOver" } });
  });
});

describe("fromRestJson: messages, lists, maps, oneofs, timestamps", () => {
  it("prefixes nested error paths with list indexes and json names", () => {
    const agents: JsonObject[] = [{}, {}, { presence: "bogus" }];
    const e = fieldError(() => fromRestJson(ListAgentsResponseSchema, { agents }));
    expect([e.field, e.message]).toEqual(["agents.2.presence", "agents.2.presence must be one of online, stale, offline"]);
    expect(fieldError(() => fromRestJson(PushEventsRequestSchema, { events: {} })).message).toBe("events must be a list");
  });

  it("keeps what a closed message cannot hold as marked unknown properties instead of failing", () => {
    const events: JsonObject[] = [{ extra: 1, payload: { effect: { policy: { class: 5 } } } }, 1 as unknown as JsonObject];
    const req = fromRestJson(PushEventsRequestSchema, { events });
    expect(req.events).toHaveLength(2);
    expect(unknownProperties(req.events[0]!)).toEqual(["extra"]);
    expect(unknownProperties(req.events[0]!.payload!.effect!.policy!)).toEqual(["class"]);
    expect(req.events[0]!.payload!.effect!.policy!.policyClass).toBeUndefined();
    expect(unknownProperties(req.events[1]!)).toEqual([""]);
    const counts = fromRestJson(SyncEventSchema, { payload: { counts: [] } });
    expect(unknownProperties(counts.payload!)).toEqual(["counts"]);
    const redaction = fromRestJson(SyncEventSchema, { redaction: { fieldsOmitted: ["a", 2] } });
    expect(unknownProperties(redaction.redaction!)).toEqual(["fieldsOmitted"]);
    expect(redaction.redaction!.fieldsOmitted).toEqual([]);
    expect(unknownProperties(fromRestJson(UsageSchema, { cost: "0.25" }))).toEqual(["cost"]);
  });

  it("marks unknown properties by appending to one list, so a body of 50,000 of them costs linear time", () => {
    // Bodies are decoded before their caller is authenticated: a copy of the list per key would
    // be quadratic (about 3.6 s of the hub's thread for 25,000 keys).
    const m = create(UsageSchema);
    const list: NonNullable<typeof m.$unknown> = [];
    m.$unknown = list;
    for (const k of ["a", "b", "c"]) markUnknownProperty(m, k);
    expect(m.$unknown).toBe(list);
    expect(unknownProperties(m)).toEqual(["a", "b", "c"]);
    const keys = Array.from({ length: 50_000 }, (_, i) => `k${i}`);
    const many = fromRestJson(UsageSchema, Object.fromEntries(keys.map((k) => [k, 1])));
    expect(unknownProperties(many)).toEqual(keys);
  });

  it("sets oneof members through the oneof and refuses two members", () => {
    const m = fromRestJson(WatchPresenceResponseSchema, { cursor: 3, agent: { name: "a", presence: "online" } });
    expect(m.event.case).toBe("agent");
    expect(m.event.case === "agent" && m.event.value.presence).toBe(PresenceState.ONLINE);
    const e = fieldError(() => fromRestJson(WatchPresenceResponseSchema, { agent: {}, keepAlive: {} }));
    expect([e.field, e.message]).toEqual(["keepAlive", "agent and keepAlive cannot both be set"]);
    // null is absent, so it does not count as a second member.
    expect(fromRestJson(WatchPresenceResponseSchema, { agent: {}, keepAlive: null }).event.case).toBe("agent");
  });

  it("parses strict RFC 3339 timestamps with offsets and nanoseconds", () => {
    const m = fromRestJson(MessageSchema, { createdAt: "2026-01-01T01:00:00.123456789+01:00" });
    expect(m.createdAt?.seconds).toBe(BigInt(Date.UTC(2026, 0, 1) / 1000));
    expect(m.createdAt?.nanos).toBe(123456789);
    expect(timestampDate(fromRestJson(MessageSchema, { createdAt: "0099-12-31T23:59:59Z" }).createdAt!).getUTCFullYear()).toBe(99);
    for (const bad of ["2026-01-01", "2026-02-30T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01 00:00:00Z", "1/1/2026", 1700000000]) {
      const e = fieldError(() => fromRestJson(MessageSchema, { createdAt: bad }));
      expect([e.field, e.message]).toEqual(["createdAt", "createdAt must be an RFC 3339 timestamp"]);
    }
  });

  it("throws a plain Error for unsupported well-known types", () => {
    expect(() => fromRestJson(DurationSchema, {})).toThrow(/unsupported well-known type google.protobuf.Duration/);
    expect(() => toRestJson(DurationSchema, create(DurationSchema))).toThrow(/unsupported well-known type/);
  });
});

describe("toRestJson", () => {
  const t0 = timestampFromDate(new Date("2026-01-01T00:00:00Z"));
  const t1 = timestampFromDate(new Date("2026-01-01T00:05:00.5Z"));

  it("writes defaults of implicit fields, int64 as numbers and millisecond timestamps", () => {
    const res = create(AcquireLeaseResponseSchema, {
      renewed: false,
      lease: { resource: "p/build", project: "p", name: "build", fencingToken: 42n, acquiredAt: t0, expiresAt: t1 },
    });
    expect(toRestJson(AcquireLeaseResponseSchema, res)).toEqual({
      renewed: false,
      lease: {
        resource: "p/build",
        project: "p",
        name: "build",
        holderAgentId: "",
        holderAgentName: "",
        fencingToken: 42,
        acquiredAt: "2026-01-01T00:00:00.000Z",
        expiresAt: "2026-01-01T00:05:00.500Z",
        waiters: [],
      },
      waitedMs: 0,
    });
  });

  it("omits unset optional and message fields, keeps hops: 0, uses json_name keys", () => {
    const json = toRestJson(
      MessageSchema,
      create(MessageSchema, { id: "msg_1", fromAgentId: "agt_a", toAgentId: "agt_b", delivery: Delivery.STEER, status: MessageStatus.QUEUED, createdAt: t0 }),
    );
    expect(json).toMatchObject({ id: "msg_1", from: "agt_a", to: "agt_b", hops: 0, maxHops: 0, seq: 0, delivery: "steer", status: "queued" });
    for (const key of ["reply", "correlationId", "replyTo", "deliveredAt", "expiresAt", "error", "fromAgentId"]) expect(json).not.toHaveProperty(key);
    expect(json.createdAt).toBe("2026-01-01T00:00:00.000Z");
  });

  it("writes set optional fields even at their default", () => {
    const json = toRestJson(SendMessageRequestSchema, create(SendMessageRequestSchema, { hops: 0, allowOffline: false, correlationId: "" }));
    expect(json).toEqual({ target: "", content: "", hops: 0, allowOffline: false, correlationId: "" });
  });

  it("writes empty lists and maps, enum rest names, omits UNSPECIFIED enums", () => {
    expect(toRestJson(ListAgentsResponseSchema, create(ListAgentsResponseSchema))).toEqual({ agents: [] });
    const agent = toRestJson(AgentSchema, create(AgentSchema, { id: "agt_1", presence: PresenceState.ONLINE, online: true }));
    expect(agent.presence).toBe("online");
    expect(agent.model).toBeUndefined();
    expect(toRestJson(AgentSchema, create(AgentSchema))).not.toHaveProperty("presence");
    expect(toRestJson(SyncEventResultSchema, create(SyncEventResultSchema, { outcome: SyncOutcome.DUPLICATE, sequence: 7n }))).toEqual({
      outcome: "duplicate",
      sequence: 7,
    });
    const snap = toRestJson(GetSnapshotResponseSchema, create(GetSnapshotResponseSchema, { project: "p" }));
    expect(snap).toEqual({ project: "p", agents: [], openMessages: [], openMessageTotal: 0, homeRuntimes: [], leases: [] });
  });

  it("writes a oneof member under its json name", () => {
    const frame = create(WatchLeasesResponseSchema, { cursor: 9n, event: { case: "keepAlive", value: { at: t0 } } });
    expect(toRestJson(WatchLeasesResponseSchema, frame)).toEqual({ cursor: 9, keepAlive: { at: "2026-01-01T00:00:00.000Z" } });
  });

  it("round-trips a nested SyncEvent", () => {
    const json: JsonObject = {
      schema: "kxm.sync-event.v1",
      sequence: 12,
      redaction: { version: "v1", fieldsOmitted: [], valuesReplaced: 0 },
      payload: {
        status: "running",
        counts: { retries: 2, files: 0 },
        evidenceRefs: [{ id: "evd_aaaaaa", kind: "log" }, { id: "evd_bbbbbb", kind: "diff", hash: "sha256:00" }],
        suppliedRefs: [],
        fileChanges: [{ repositoryId: "repo", added: ["a.ts"], modified: [], deleted: [], redactedPathCount: 0 }],
        artifacts: [],
        receipts: [],
        environment: [],
        effect: { id: "eff_aaaaaa", policy: { class: "external-idempotent", sharedMutable: false, idempotencyKey: "run" } },
        error: { class: "timeout", component: "executor", retryable: true },
        usage: { inputTokens: 100, cost: 0.5 },
        degraded: false,
      },
    };
    const event = fromRestJson(SyncEventSchema, json);
    expect(event.payload?.effect?.policy?.policyClass).toBe("external-idempotent");
    expect(event.payload?.counts).toEqual({ retries: 2n, files: 0n });
    expect(toRestJson(SyncEventSchema, event)).toEqual(json);
  });
});

describe("fromRestQuery", () => {
  const q = (s: string) => new URLSearchParams(s);

  it("reads booleans the old hub's way: exactly 'true'", () => {
    expect(fromRestQuery(ListAgentsRequestSchema, q("includeOffline=true"), create(ListAgentsRequestSchema)).includeOffline).toBe(true);
    for (const v of ["1", "TRUE", "yes", ""]) {
      expect(fromRestQuery(ListAgentsRequestSchema, q(`includeOffline=${v}`), create(ListAgentsRequestSchema)).includeOffline).toBe(false);
    }
  });

  it("reads repeated enums from every occurrence and single enums by rest name", () => {
    const req = fromRestQuery(ListMessagesRequestSchema, q("status=queued&status=delivered&box=outbox"), create(ListMessagesRequestSchema));
    expect(req.status).toEqual([MessageStatus.QUEUED, MessageStatus.DELIVERED]);
    expect(req.box).toBe(2);
    const e = fieldError(() => fromRestQuery(ListMessagesRequestSchema, q("status=queued&status=nope"), create(ListMessagesRequestSchema)));
    expect(e.field).toBe("status");
    expect(e.message).toMatch(/^status must be one of queued, delivered, /);
  });

  it("parses integers strictly and keeps strings verbatim", () => {
    const req = fromRestQuery(ListLeasesRequestSchema, q("pageSize=25&pageToken=%20t%2F1&includeExpired=true&x=1"), create(ListLeasesRequestSchema));
    expect([req.pageSize, req.pageToken, req.includeExpired]).toEqual([25, " t/1", true]);
    for (const bad of ["abc", "1.5", "", "1e3", "0x10"]) {
      const e = fieldError(() => fromRestQuery(ListLeasesRequestSchema, q(`pageSize=${bad}`), create(ListLeasesRequestSchema)));
      expect([e.field, e.message]).toEqual(["pageSize", "pageSize must be an integer"]);
    }
    const e = fieldError(() => fromRestQuery(ListLeasesRequestSchema, q("pageSize=99999999999"), create(ListLeasesRequestSchema)));
    expect(e.message).toBe("pageSize is out of range");
  });

  it("ignores message fields and unknown parameters", () => {
    const into = create(WatchPresenceResponseSchema);
    expect(fromRestQuery(WatchPresenceResponseSchema, q("agent=x&cursor=4&zzz=1"), into).cursor).toBe(4n);
    expect(into.event.case).toBeUndefined();
  });
});
