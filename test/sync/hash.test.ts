import { createHash } from "node:crypto";
import canonicalizeModule from "canonicalize";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import { createClient } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { SyncEventSchema } from "../../gen/ts/kxm/hub/v1/sync_event_pb.js";
import { SyncOutcome, SyncService } from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import type { SyncEventRow, SyncStore } from "../../src/store/sync-store.js";
import { checkSyncEvent } from "../../src/sync/schema.js";
import { contentHash, createSync } from "../../src/sync/sync.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { expectRestOk } from "../fixtures/rest.js";
import { actor, effect, richPayload, syncEvent, typed } from "./fixtures.js";

/**
 * One event, one hash, whatever the wire (reference-hub.md §5.2): the hub hashes the canonical
 * text (RFC 8785) of the event's wire-independent JSON form, so the same event sent over Connect
 * binary, Connect JSON, gRPC, gRPC-Web and REST (any key order, any spacing) is stored once.
 */

const RT = "rtm_runtime0001";
/** The same canonicalizer sync.ts uses (CommonJS typed as ESM: the default import is the function). */
const canonicalize = canonicalizeModule as unknown as typeof canonicalizeModule.default;

/** A rich event of run `runId`: nested messages, refs, counts, int64 (2^40), doubles, `class` names. */
const rich = (runId: string) => typed("effect.settled", richPayload(), { runId });

/** Keys reversed at every level, and `indent` spaces of formatting. */
const reversed = (v: unknown): unknown =>
  Array.isArray(v)
    ? v.map(reversed)
    : typeof v === "object" && v !== null
      ? Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, reversed(x)]))
      : v;

type Wire = (t: TestHub, event: Record<string, unknown>) => Promise<string>;

const outcomeName = (o: SyncOutcome) => SyncOutcome[o].toLowerCase();
const rpcWire =
  (i: number): Wire =>
  async (t, event) => {
    const client = createClient(SyncService, protocols[i]!.make(t.baseUrl, [withHeaders({ authorization: "Bearer tok" })]));
    const res = await client.pushEvents({ project: "p", runtimeId: RT, events: [fromJson(SyncEventSchema, event as JsonObject)] });
    expect(res.results).toHaveLength(1);
    expect(res.results[0]!.code).toBeUndefined();
    return outcomeName(res.results[0]!.outcome);
  };
const restWire: Wire = async (t, event) => {
  const res = await t.rest("/v1/sync/events", {
    method: "POST",
    headers: { authorization: "Bearer tok", "content-type": "application/json; charset=utf-8" },
    body: `\n ${JSON.stringify({ events: [reversed(event)], runtimeId: RT, project: "p" }, null, "\t")} \n`,
  });
  const body = await expectRestOk(res);
  expect(body.results[0].code).toBeUndefined();
  return body.results[0].outcome;
};

const wires: [string, Wire][] = [
  ...protocols.map((p, i): [string, Wire] => [p.name, rpcWire(i)]),
  ["rest (reordered, whitespace)", restWire],
];

const storedRows = async (t: TestHub) =>
  (await t.sql("SELECT run_id, content_hash, record FROM sync_events ORDER BY run_id, sequence")) as { run_id: string; content_hash: string; record: string }[];

describe("the same event over every wire is stored once", () => {
  it.each(wires.map(([name], i) => [name, i] as const))("first over %s, then a duplicate over every other wire", async (_, first) => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    const event = rich("run_firstwire001");
    const order = [wires[first]!, ...wires.filter((_, i) => i !== first)];
    const outcomes = [];
    for (const [, wire] of order) outcomes.push(await wire(t, event));
    expect(outcomes).toEqual(["accepted", "duplicate", "duplicate", "duplicate", "duplicate"]);
    const rows = await storedRows(t);
    expect(rows).toHaveLength(1);
    // The stored text is the canonical form of the event as sent (no empty lists besides
    // fieldsOmitted: the JSON form leaves them out), and the hash is over exactly that text.
    const expected = richPayload() as { fileChanges: Record<string, unknown>[] };
    delete expected.fileChanges[0]!.deleted;
    expect(rows[0]!.record).toBe(canonicalize(typed("effect.settled", expected, { runId: "run_firstwire001" })));
    expect(rows[0]!.content_hash).toBe(`sha256:${createHash("sha256").update(rows[0]!.record).digest("hex")}`);
    expect(rows[0]!.record).toContain('"size":1099511627776');
    expect(rows[0]!.record).toContain('"cost":0.25');
    expect(rows[0]!.record).toContain('"error":{"class":"network-timeout"');
    expect(rows[0]!.record).toContain('"counts":{"files-changed":3,"retries":2,"zero":0}');
  });

  it("treats an empty list and an absent one as the same content (protobuf cannot tell them apart)", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    const withEmpty = syncEvent({ payload: { status: "running", evidenceRefs: [], counts: {} } });
    expect(await restWire(t, withEmpty)).toBe("accepted");
    expect(await restWire(t, syncEvent({ payload: { status: "running" } }))).toBe("duplicate");
    expect(await rpcWire(0)(t, syncEvent({ payload: { status: "running" } }))).toBe("duplicate");
  });
});

describe("empty lists and maps of a valid event (D21)", () => {
  const approval = { actor: actor(), outcome: "approved" };
  const resolved = { effect: effect("unknown"), resolvedBy: actor(), resolutionAction: "mark-failed", reason: "checked by hand" };
  /** Events, and whether each is valid as JSON (§5.3): a list or map sent empty is there. */
  const cases: [string, Record<string, unknown>, boolean][] = [
    ["payload of only counts: {}", syncEvent({ payload: { counts: {} } }), true],
    ["payload of only fileChanges: []", syncEvent({ payload: { fileChanges: [] } }), true],
    ["payload of only evidenceRefs: []", syncEvent({ payload: { evidenceRefs: [] } }), true],
    ["approval.recorded, suppliedRefs: []", typed("approval.recorded", { ...approval, suppliedRefs: [] }), true],
    ["effect.uncertainty_resolved, suppliedRefs: []", typed("effect.uncertainty_resolved", { ...resolved, suppliedRefs: [] }), true],
    ["payload: {}", syncEvent({ payload: {} }), false],
    ["approval.recorded without suppliedRefs", typed("approval.recorded", approval), false],
    ["effect.uncertainty_resolved without suppliedRefs", typed("effect.uncertainty_resolved", resolved), false],
  ];
  const outcomeOver = async (t: TestHub, wire: number | "rest", event: Record<string, unknown>): Promise<string> => {
    if (wire === "rest") {
      const body = await expectRestOk(await t.rest("/v1/sync/events", { headers: { authorization: "Bearer tok" }, json: { project: "p", runtimeId: RT, events: [event] } }));
      return body.results[0].code ?? body.results[0].outcome;
    }
    const client = createClient(SyncService, protocols[wire]!.make(t.baseUrl, [withHeaders({ authorization: "Bearer tok" })]));
    const res = await client.pushEvents({ project: "p", runtimeId: RT, events: [fromJson(SyncEventSchema, event as JsonObject)] });
    return res.results[0]!.code ?? outcomeName(res.results[0]!.outcome);
  };

  it.each(cases)("%s: REST decides as the schema does on the JSON, every other wire as REST where protobuf can tell", async (_, event, valid) => {
    expect(checkSyncEvent(event) === undefined).toBe(valid);
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    const outcomes = [];
    for (const [i, wire] of (["rest", 0, 1, 2, 3] as const).entries()) {
      outcomes.push(await outcomeOver(t, wire, { ...event, runId: `run_emptylists0${i}` }));
    }
    // protobuf has no absent list: over it, a list left out is one sent empty, and a valid event.
    expect(outcomes).toEqual([valid ? "accepted" : "sync_event_invalid", "accepted", "accepted", "accepted", "accepted"]);
  });

  it("stores an empty list as left out, whichever wire sent it, so a repeat is a duplicate", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    const event = typed("approval.recorded", { ...approval, suppliedRefs: [], evidenceRefs: [], counts: {} });
    expect(await outcomeOver(t, "rest", event)).toBe("accepted");
    for (const wire of [0, 1, 2, 3]) expect(await outcomeOver(t, wire, event)).toBe("duplicate");
    expect(await outcomeOver(t, "rest", typed("approval.recorded", { ...approval, suppliedRefs: [], counts: {} }))).toBe("duplicate");
    const [row] = await storedRows(t);
    expect(row!.record).toContain('"payload":{"actor":{"id":"alice@example.com","kind":"human"},"outcome":"approved"}');
    expect(row!.record).toContain('"fieldsOmitted":[]');
  });
});

describe("fields a binary client's newer schema has", () => {
  it.each([1, 2, 3])("make the event invalid instead of being dropped from the hash (%i)", async (i) => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    const client = createClient(SyncService, protocols[i]!.make(t.baseUrl, [withHeaders({ authorization: "Bearer tok" })]));
    const event = fromJson(SyncEventSchema, syncEvent() as JsonObject);
    const nested = fromJson(SyncEventSchema, syncEvent({ sequence: 2 }) as JsonObject);
    event.$unknown = [{ no: 99, wireType: WireType.Varint, data: new Uint8Array([1]) }];
    nested.payload!.$unknown = [{ no: 99, wireType: WireType.Varint, data: new Uint8Array([1]) }];
    const res = await client.pushEvents({ project: "p", runtimeId: RT, events: [event, nested] });
    expect(res.results.map((r) => [outcomeName(r.outcome), r.code])).toEqual([
      ["rejected", "sync_event_invalid"],
      ["rejected", "sync_event_invalid"],
    ]);
  });
});

describe("canonical JSON and contentHash", () => {
  it("hashes a canonical text as sha256: + hex of its UTF-8 bytes", () => {
    const text = '{"a":[1,"é",true,null],"b":{"c":0.25}}';
    expect(contentHash(text)).toBe(`sha256:${createHash("sha256").update(Buffer.from(text, "utf8")).digest("hex")}`);
    expect(contentHash("abc")).toBe("sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect(contentHash("")).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it("sorts keys by UTF-16 code units, not by code points", () => {
    const text = canonicalize({ "é": 1, z: 2, A: 3, a: 4, "\u{1F600}": 5, "\uFB01": 6, nested: { b: [{ y: 1, x: 2 }], a: "\u2028" } });
    // 😀 is the surrogate pair D83D DE00, below U+FB01 by code unit though above it by code point.
    expect(text).toBe('{"A":3,"a":4,"nested":{"a":"\u2028","b":[{"x":2,"y":1}]},"z":2,"é":1,"\u{1F600}":5,"\uFB01":6}');
    expect(canonicalize({ n: 1e21, m: 2 ** 40, f: 0.1, neg: -0 })).toBe('{"f":0.1,"m":1099511627776,"n":1e+21,"neg":0}');
  });

  it("stores the canonical text of the event (keys sorted at every level) and hashes exactly it", async () => {
    const rows: SyncEventRow[] = [];
    const store = {
      sync: {
        async pushSyncEvents(batch: SyncEventRow[]) {
          rows.push(...batch);
          return { outcomes: batch.map(() => ({ outcome: "accepted" as const })), cursors: [] };
        },
      } as unknown as SyncStore,
    };
    const sync = createSync({ store, clock: new FakeClock(), observer: { log() {}, count() {} } });
    const event = rich("run_canonical001");
    const spaced = JSON.parse(JSON.stringify(reversed(event), null, 2)) as Record<string, unknown>;
    const r = await sync.push("p", { runtimeId: RT, events: [event, spaced] });
    expect(r.results.map((x) => x.outcome)).toEqual(["accepted", "accepted"]);
    expect(rows[0]!.record).toBe(rows[1]!.record);
    // Stored without its empty lists but fieldsOmitted (D21), as over every face.
    const stored = rich("run_canonical001") as { payload: { fileChanges: Record<string, unknown>[] } };
    delete stored.payload.fileChanges[0]!.deleted;
    expect(rows[0]!.record).toBe(naiveCanonical(stored));
    expect(rows[0]!.record).toContain('"fieldsOmitted":[]');
    expect(rows[0]!.record.startsWith('{"configRevision":')).toBe(true);
    expect(rows[0]!.contentHash).toBe(contentHash(rows[0]!.record));
    expect(rows[0]!.contentHash).toBe(`sha256:${createHash("sha256").update(naiveCanonical(stored)).digest("hex")}`);
  });
});

/** An independent canonicalizer good enough for events (strings, safe integers, short decimals). */
function naiveCanonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(naiveCanonical).join(",")}]`;
  if (typeof v === "object" && v !== null) {
    const keys = Object.keys(v).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${naiveCanonical((v as Record<string, unknown>)[k])}`).join(",")}}`;
  }
  return JSON.stringify(v);
}
