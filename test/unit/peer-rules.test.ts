import { describe, expect, it } from "vitest";
import { errors, type HubCode } from "../../src/errors.js";
import {
  cancelledError,
  decideAck,
  decideCancel,
  decideReply,
  openMessageView,
  resolveTarget,
  sameRequest,
  visibleTo,
  type SendInput,
} from "../../src/peer/rules.js";
import { PROJECT, agent, alice, at, bob, carol, input, message, send, type AgentRow, type MessageRow, type MessageStatus } from "./peer-fixtures.js";
import { NOW, named, refusal, titled } from "./support.js";

/**
 * The peer-message decisions of src/peer/rules.ts, called directly at a fixed hub instant: no
 * hub, no store. Expected answers are reference-hub.md §3 (target resolution, idempotency, the
 * state machine). The send checks before the store are in peer-send-checks.test.ts, the
 * properties over random histories in peer-properties.test.ts.
 */

describe("decideSend: target resolution", () => {
  type Case = { name: string; candidates: AgentRow[]; input: SendInput; expect: { to: AgentRow } | { refused: HubCode } };
  const bobOff = agent(bob.id, bob.name, false);
  const cases: Case[] = [
    { name: "reaches an online agent by id", candidates: [bob], input: input(), expect: { to: bob } },
    { name: "reaches an online agent by name, case-insensitively", candidates: [bob], input: input({ target: "bOB" }), expect: { to: bob } },
    { name: "prefers an id match to an earlier name match", candidates: [agent("agt_x", bob.id), bob], input: input({ target: bob.id }), expect: { to: bob } },
    { name: "falls back to a name match when the id match is offline", candidates: [bobOff, agent("agt_y", bob.id)], input: input({ target: bob.id }), expect: { to: agent("agt_y", bob.id) } },
    { name: "reaches an offline agent with allowOffline", candidates: [bobOff], input: input({ allowOffline: true }), expect: { to: bobOff } },
    { name: "refuses an offline agent without allowOffline with target_not_found", candidates: [bobOff], input: input(), expect: { refused: "target_not_found" } },
    { name: "refuses an unknown target with target_not_found", candidates: [], input: input({ target: "nobody" }), expect: { refused: "target_not_found" } },
    { name: "refuses the sender itself by id with self_target", candidates: [alice], input: input({ target: alice.id }), expect: { refused: "self_target" } },
    { name: "refuses the sender itself by name with self_target", candidates: [alice], input: input({ target: "alice" }), expect: { refused: "self_target" } },
  ];

  it.each(named(cases))("%s", (_title, { candidates, input: i, expect: want }) => {
    if ("refused" in want) {
      const e = refusal(() => send({ candidates }, i));
      expect(e.code).toBe(want.refused);
      if (want.refused === "target_not_found") expect(e.metadata).toEqual({ target: i.target });
      return;
    }
    expect(resolveTarget(candidates, i)).toEqual(want.to);
    const d = send({ candidates }, i);
    expect(d.result.message).toMatchObject({ toId: want.to.id, toName: want.to.name });
    expect(d.events).toEqual([{ agentId: want.to.id, kind: "message" }]);
  });

  it("writes a queued message that expires ttl after now, numbered by the store", () => {
    const d = send({ candidates: [bob] }, input({ correlationId: "corr", replyTo: "msg_0", idempotencyKey: "k", hops: 2, maxHops: 3, delivery: "steer", ttlMs: 1_000 }));
    const want: MessageRow = {
      id: "msg_new",
      project: PROJECT,
      fromId: alice.id,
      fromName: alice.name,
      toId: bob.id,
      toName: bob.name,
      content: "hello",
      delivery: "steer",
      hops: 2,
      maxHops: 3,
      seq: 0,
      correlationId: "corr",
      replyTo: "msg_0",
      idempotencyKey: "k",
      createdAtMs: NOW,
      expiresAtMs: NOW + 1_000,
      status: "queued",
    };
    expect(d).toEqual({
      atMs: NOW,
      write: want,
      change: { stream: "messages", body: openMessageView(want, NOW) },
      events: [{ agentId: bob.id, kind: "message" }],
      result: { message: want, idempotent: false },
    });
  });

  it("leaves unset optional fields out of the message", () => {
    const m = send({ candidates: [bob] }).write!;
    expect(Object.keys(m).filter((k) => ["correlationId", "replyTo", "idempotencyKey"].includes(k))).toEqual([]);
  });
});

describe("decideSend: idempotency (sender, key)", () => {
  const existing = message({ idempotencyKey: "k1", status: "delivered", deliveredAtMs: NOW - 500 });
  const same = input({ idempotencyKey: "k1" });
  type Case = { name: string; input: SendInput; candidates?: AgentRow[]; original?: MessageRow; idempotent: boolean };
  const cases: Case[] = [
    { name: "replays an identical request", input: same, idempotent: true },
    { name: "replays when the target names the original recipient case-insensitively", input: { ...same, target: "BOB" }, idempotent: true },
    { name: "replays whatever allowOffline says", input: { ...same, allowOffline: true }, idempotent: true },
    { name: "replays before target resolution (the recipient may be gone)", input: same, candidates: [], idempotent: true },
    { name: "replays the original in its current state, even ended", input: same, original: { ...existing, status: "replied", repliedAtMs: NOW - 10 }, idempotent: true },
    { name: "refuses another target", input: { ...same, target: carol.id }, idempotent: false },
    { name: "refuses other content", input: { ...same, content: "hello!" }, idempotent: false },
    { name: "refuses another delivery", input: { ...same, delivery: "steer" }, idempotent: false },
    { name: "refuses another correlationId", input: { ...same, correlationId: "c" }, idempotent: false },
    { name: "refuses another replyTo", input: { ...same, replyTo: "msg_0" }, idempotent: false },
    { name: "refuses other hops", input: { ...same, hops: 1 }, idempotent: false },
    { name: "refuses another maxHops", input: { ...same, maxHops: 6 }, idempotent: false },
    { name: "refuses another effective ttl", input: { ...same, ttlMs: 60_001 }, idempotent: false },
  ];

  it.each(named(cases))("%s", (_title, { input: i, candidates = [bob], original = existing, idempotent }) => {
    const before = structuredClone(original);
    if (idempotent) {
      expect(sameRequest(original, i)).toBe(true);
      const d = send({ existing: original, candidates }, i);
      expect(d).toEqual({ atMs: NOW, result: { message: original, idempotent: true } });
    } else {
      expect(sameRequest(original, i)).toBe(false);
      const e = refusal(() => send({ existing: original, candidates }, i));
      expect(e.code).toBe("idempotency_conflict");
      expect(e.metadata).toEqual({ idempotencyKey: "k1", messageId: original.id });
    }
    expect(original).toEqual(before);
  });
});

describe("decideAck", () => {
  type Case = { name: string; m: MessageRow | undefined; who: AgentRow; project?: string; expect: { refused: HubCode } | { status: MessageStatus; written: boolean } };
  const cases: Case[] = [
    { name: "refuses an unknown id with message_not_found", m: undefined, who: bob, expect: { refused: "message_not_found" } },
    { name: "refuses the sender with message_forbidden", m: message(), who: alice, expect: { refused: "message_forbidden" } },
    { name: "refuses a third agent with message_forbidden", m: message(), who: carol, expect: { refused: "message_forbidden" } },
    { name: "refuses the sender of a replied message with message_forbidden, before its state", m: message({ status: "replied" }), who: alice, expect: { refused: "message_forbidden" } },
    { name: "moves a queued message to delivered", m: message(), who: bob, expect: { status: "delivered", written: true } },
    { name: "answers a delivered message unchanged", m: message({ status: "delivered", deliveredAtMs: NOW - 10 }), who: bob, expect: { status: "delivered", written: false } },
    { name: "refuses a replied message with invalid_message_state", m: message({ status: "replied" }), who: bob, expect: { refused: "invalid_message_state" } },
    { name: "refuses a cancelled message with invalid_message_state", m: message({ status: "cancelled" }), who: bob, expect: { refused: "invalid_message_state" } },
    { name: "refuses an expired message with invalid_message_state", m: message({ status: "expired" }), who: bob, expect: { refused: "invalid_message_state" } },
    { name: "refuses a queued message whose TTL ran out, its expiry not written yet, as expired", m: message({ expiresAtMs: NOW }), who: bob, expect: { refused: "invalid_message_state" } },
    { name: "refuses a message in error with invalid_message_state", m: message({ status: "error" }), who: bob, expect: { refused: "invalid_message_state" } },
  ];

  it.each(named(cases))("%s", (_title, { m, who, expect: want }) => {
    const before = structuredClone(m);
    if ("refused" in want) {
      const e = refusal(() => decideAck(m, at(who)));
      expect(e.code).toBe(want.refused);
      // The status the decision saw: an open message past its TTL is expired.
      const seen = m && m.expiresAtMs <= NOW && (m.status === "queued" || m.status === "delivered") ? "expired" : m?.status;
      expect(e.metadata).toEqual(want.refused === "invalid_message_state" ? { status: seen } : { messageId: "msg_1" });
      expect(m).toEqual(before);
      return;
    }
    const d = decideAck(m, at(who));
    expect(d.result.status).toBe(want.status);
    // The recipient's cursor advances to the message either way.
    expect(d.ack).toEqual({ agentId: bob.id, seq: 7 });
    if (want.written) {
      const next = { ...m!, status: "delivered" as const, deliveredAtMs: NOW };
      expect(d.write).toEqual(next);
      expect(d.change).toEqual({ stream: "messages", body: openMessageView(next, NOW) });
    } else {
      expect(d.write).toBeUndefined();
      expect(d.change).toBeUndefined();
      expect(d.result).toBe(m);
    }
    expect(m).toEqual(before);
  });
});

describe("decideReply", () => {
  type Case = { name: string; m: MessageRow | undefined; who: AgentRow; expect: { refused: HubCode } | "replied" };
  const cases: Case[] = [
    { name: "refuses an unknown id with message_not_found", m: undefined, who: bob, expect: { refused: "message_not_found" } },
    { name: "refuses the sender with message_forbidden", m: message(), who: alice, expect: { refused: "message_forbidden" } },
    { name: "refuses a third agent with message_forbidden, before duplicate_reply", m: message({ status: "replied" }), who: carol, expect: { refused: "message_forbidden" } },
    { name: "replies to a queued message", m: message(), who: bob, expect: "replied" },
    { name: "replies to a delivered message", m: message({ status: "delivered", deliveredAtMs: NOW - 10 }), who: bob, expect: "replied" },
    { name: "refuses a second reply with duplicate_reply", m: message({ status: "replied", repliedAtMs: NOW - 10 }), who: bob, expect: { refused: "duplicate_reply" } },
    { name: "refuses a cancelled message with invalid_message_state", m: message({ status: "cancelled" }), who: bob, expect: { refused: "invalid_message_state" } },
    { name: "refuses an expired message with invalid_message_state", m: message({ status: "expired" }), who: bob, expect: { refused: "invalid_message_state" } },
    { name: "refuses a delivered message whose TTL ran out, its expiry not written yet, as expired", m: message({ status: "delivered", deliveredAtMs: NOW - 10, expiresAtMs: NOW - 1 }), who: bob, expect: { refused: "invalid_message_state" } },
    { name: "refuses a message in error with invalid_message_state", m: message({ status: "error" }), who: bob, expect: { refused: "invalid_message_state" } },
  ];

  it.each(named(cases))("%s", (_title, { m, who, expect: want }) => {
    let contentReads = 0;
    const req = { ...at(who), content: () => (contentReads++, "pong") };
    if (want !== "replied") {
      expect(refusal(() => decideReply(m, req)).code).toBe(want.refused);
      // The content is checked only once the state allows a reply.
      expect(contentReads).toBe(0);
      return;
    }
    const d = decideReply(m, req);
    const next = { ...m!, status: "replied" as const, reply: { content: "pong", createdAtMs: NOW }, repliedAtMs: NOW };
    expect(d).toEqual({ atMs: NOW, write: next, change: { stream: "messages", body: openMessageView(next, NOW) }, events: [{ agentId: alice.id, kind: "reply" }], result: next });
    expect(contentReads).toBe(1);
  });

  it("refuses bad reply content only after the state checks pass", () => {
    const bad = () => {
      throw errors.protocol("content cannot be empty", "content");
    };
    expect(refusal(() => decideReply(message({ status: "cancelled" }), { ...at(bob), content: bad })).code).toBe("invalid_message_state");
    expect(refusal(() => decideReply(message({ status: "replied" }), { ...at(bob), content: bad })).code).toBe("duplicate_reply");
    expect(refusal(() => decideReply(message(), { ...at(bob), content: bad })).code).toBe("protocol_error");
  });
});

describe("decideCancel", () => {
  type Case = { name: string; m: MessageRow | undefined; who: AgentRow; expect: { refused: HubCode } | { changed: boolean } };
  const cases: Case[] = [
    { name: "refuses an unknown id with message_not_found", m: undefined, who: alice, expect: { refused: "message_not_found" } },
    { name: "refuses the recipient with message_forbidden", m: message(), who: bob, expect: { refused: "message_forbidden" } },
    { name: "refuses the recipient of a cancelled message with message_forbidden", m: message({ status: "cancelled" }), who: bob, expect: { refused: "message_forbidden" } },
    { name: "refuses a third agent with message_forbidden", m: message(), who: carol, expect: { refused: "message_forbidden" } },
    { name: "cancels a queued message", m: message(), who: alice, expect: { changed: true } },
    { name: "cancels a delivered message", m: message({ status: "delivered", deliveredAtMs: NOW - 10 }), who: alice, expect: { changed: true } },
    { name: "answers a repeat cancel unchanged", m: message({ status: "cancelled", cancelledAtMs: NOW - 10, error: cancelledError }), who: alice, expect: { changed: false } },
    { name: "refuses a replied message with invalid_message_state", m: message({ status: "replied" }), who: alice, expect: { refused: "invalid_message_state" } },
    { name: "refuses an expired message with invalid_message_state", m: message({ status: "expired" }), who: alice, expect: { refused: "invalid_message_state" } },
    { name: "refuses a queued message whose TTL ran out, its expiry not written yet, as expired", m: message({ expiresAtMs: NOW }), who: alice, expect: { refused: "invalid_message_state" } },
    { name: "cancels a queued message 1 ms before its TTL runs out", m: message({ expiresAtMs: NOW + 1 }), who: alice, expect: { changed: true } },
    { name: "refuses a message in error with invalid_message_state", m: message({ status: "error" }), who: alice, expect: { refused: "invalid_message_state" } },
  ];

  it.each(named(cases))("%s", (_title, { m, who, expect: want }) => {
    const before = structuredClone(m);
    if ("refused" in want) {
      expect(refusal(() => decideCancel(m, at(who))).code).toBe(want.refused);
      expect(m).toEqual(before);
      return;
    }
    const d = decideCancel(m, at(who));
    expect(d.result.changed).toBe(want.changed);
    if (!want.changed) {
      expect(d).toEqual({ atMs: NOW, result: { message: m, changed: false } });
      return;
    }
    const next = { ...m!, status: "cancelled" as const, cancelledAtMs: NOW, error: "message cancelled by sender" };
    expect(d).toEqual({ atMs: NOW, write: next, change: { stream: "messages", body: openMessageView(next, NOW) }, events: [{ agentId: bob.id, kind: "cancelled" }], result: { message: next, changed: true } });
  });
});

describe("visibleTo (GetMessage)", () => {
  it.each(named([
    { name: "shows a message to its sender", who: alice, visible: true },
    { name: "shows a message to its recipient", who: bob, visible: true },
    { name: "refuses a third agent with message_forbidden", who: carol, visible: false },
  ]))("%s", (_title, { who, visible }) => {
    const m = message();
    if (visible) expect(visibleTo(m, at(who))).toBe(m);
    else {
      const e = refusal(() => visibleTo(m, at(who)));
      expect([e.code, e.message]).toEqual(["message_forbidden", "message is not visible to this agent"]);
    }
  });

  it("refuses an unknown id with message_not_found", () => {
    expect(refusal(() => visibleTo(undefined, at(bob))).code).toBe("message_not_found");
  });
});

describe("another project's message", () => {
  const foreign = message({ project: "elsewhere", fromId: "agt_x", toId: "agt_y" });
  const refusalFor = (action: string) => {
    const who = { id: "msg_1", agentId: carol.id, project: PROJECT, nowMs: NOW };
    if (action === "ack") return refusal(() => decideAck(foreign, who));
    if (action === "reply") return refusal(() => decideReply(foreign, { ...who, content: () => "x" }));
    if (action === "cancel") return refusal(() => decideCancel(foreign, who));
    return refusal(() => visibleTo(foreign, who));
  };

  // Decision D44: another project's message is message_not_found to the caller, exactly as an
  // unknown id, so nothing confirms that it exists (the reference answers 403 here).
  it.each(["ack", "reply", "cancel", "get"])("answers %s across projects with message_not_found, as for an unknown id", (action) => {
    expect(refusalFor(action).code).toBe("message_not_found");
  });
});

describe("open-message views (WatchOpenMessages)", () => {
  it.each(titled([
    { name: "an open message has no end", m: message(), endedAtMs: undefined },
    { name: "a replied message ended at its reply", m: message({ status: "replied", repliedAtMs: NOW - 5 }), endedAtMs: NOW - 5 },
    { name: "a cancelled message ended at its cancel", m: message({ status: "cancelled", cancelledAtMs: NOW - 7 }), endedAtMs: NOW - 7 },
    { name: "an expired message ended now", m: message({ status: "expired" }), endedAtMs: NOW },
  ], (c) => `${c.name}, and never shows the content`))("%s", (_title, { m, endedAtMs }) => {
    const v = openMessageView({ ...m, reply: { content: "secret reply", createdAtMs: NOW } }, NOW);
    expect(v.endedAtMs).toBe(endedAtMs);
    expect(JSON.stringify(v)).not.toContain("hello");
    expect(JSON.stringify(v)).not.toContain("secret reply");
  });
});
