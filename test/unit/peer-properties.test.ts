import { fc, test } from "@fast-check/vitest";
import { describe, expect } from "vitest";
import { isHubError, type HubCode } from "../../src/errors.js";
import { decideAck, decideCancel, decideReply, visibleTo } from "../../src/peer/rules.js";
import { PROJECT, alice, bob, carol, message, type MessageRow, type MessageStatus } from "./peer-fixtures.js";
import { NOW, refusal } from "./support.js";

/**
 * Properties of the message state machine (reference-hub.md §3.3) over random histories of
 * acks, replies, cancels and reads by the sender, the recipient and outsiders.
 */

describe("message properties", () => {
  const statuses: MessageStatus[] = ["queued", "delivered", "replied", "cancelled", "expired", "error"];
  const open = (s: MessageStatus) => s === "queued" || s === "delivered";
  const actors = { sender: alice, recipient: bob, third: carol } as const;
  type Step = { action: "ack" | "reply" | "cancel" | "get"; actor: keyof typeof actors; advanceMs: number };
  const step = fc.record({
    action: fc.constantFrom("ack" as const, "reply" as const, "cancel" as const, "get" as const),
    actor: fc.constantFrom("sender" as const, "recipient" as const, "third" as const),
    advanceMs: fc.integer({ min: 0, max: 5_000 }),
  });
  const mayRefuse: Record<Step["action"], HubCode[]> = {
    ack: ["message_forbidden", "invalid_message_state"],
    reply: ["message_forbidden", "duplicate_reply", "invalid_message_state"],
    cancel: ["message_forbidden", "invalid_message_state"],
    get: ["message_forbidden"],
  };

  test.prop([fc.constantFrom(...statuses), fc.array(step, { minLength: 1, maxLength: 30 })], { numRuns: 400 })(
    "follows the state machine: only the party an action needs changes a message, ended ones never change, a refusal changes nothing",
    (startStatus, steps) => {
      let m = message({ status: startStatus });
      let nowMs = NOW;
      for (const s of steps) {
        nowMs += s.advanceMs;
        const req = { id: m.id, agentId: actors[s.actor].id, project: PROJECT, nowMs };
        const before = structuredClone(m);
        let d: { write?: MessageRow } | undefined;
        try {
          if (s.action === "ack") d = decideAck(m, req);
          else if (s.action === "reply") d = decideReply(m, { ...req, content: () => "pong" });
          else if (s.action === "cancel") d = decideCancel(m, req);
          else visibleTo(m, req);
        } catch (e) {
          if (!isHubError(e)) throw e;
          expect(mayRefuse[s.action]).toContain(e.code);
          expect(m).toEqual(before);
          continue;
        }
        expect(m).toEqual(before);
        const next = d?.write;
        if (!next) continue;
        // Something changed: it was open, and the right party asked.
        expect(open(m.status)).toBe(true);
        if (s.action === "cancel") expect([s.actor, next.status]).toEqual(["sender", "cancelled"]);
        else expect(s.actor).toBe("recipient");
        if (s.action === "ack") expect([m.status, next.status]).toEqual(["queued", "delivered"]);
        if (s.action === "reply") expect(next.status).toBe("replied");
        // Stamps once set stay set.
        if (m.deliveredAtMs !== undefined) expect(next.deliveredAtMs).toBe(m.deliveredAtMs);
        // Identity never changes.
        expect({ ...next, status: m.status, deliveredAtMs: m.deliveredAtMs, repliedAtMs: m.repliedAtMs, cancelledAtMs: m.cancelledAtMs, reply: m.reply, error: m.error }).toEqual(m);
        m = next;
      }
    },
  );

  test.prop([fc.constantFrom(...statuses), fc.constantFrom("ack", "reply", "cancel", "get"), fc.string({ maxLength: 12 })], { numRuns: 200 })(
    "a caller outside the message learns nothing but that it may not (or that it does not exist)",
    (status, action, outsiderId) => {
      fc.pre(outsiderId !== alice.id && outsiderId !== bob.id);
      const req = { id: "msg_1", agentId: outsiderId, project: PROJECT, nowMs: NOW };
      const m = message({ status });
      const e = refusal(() => {
        if (action === "ack") decideAck(m, req);
        else if (action === "reply") decideReply(m, { ...req, content: () => "x" });
        else if (action === "cancel") decideCancel(m, req);
        else visibleTo(m, req);
      });
      expect(e.code).toBe("message_forbidden");
      expect(e.metadata).toEqual({ messageId: "msg_1" });
    },
  );
});
