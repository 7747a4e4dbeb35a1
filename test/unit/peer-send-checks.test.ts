import { describe, expect, it } from "vitest";
import type { HubCode } from "../../src/errors.js";
import { createMessages, messageLimits, type MessagesDeps, type SendRequest } from "../../src/peer/messages.js";
import type { AgentCaller } from "../../src/caller.js";
import { PROJECT, alice, bob, type MessageRow, type SendContext } from "./peer-fixtures.js";
import { NOW, decideOf, dependencyCall, passesChecks, quietObserver, refusalOf, titled, untouchable } from "./support.js";

/**
 * What SendMessage checks before the store is reached (reference-hub.md §3.2 steps 3-14, in that
 * order), through the messages domain with a store that is never used: no hub.
 */

describe("send request bounds (validated before any store decision)", () => {
  const caller: AgentCaller = { kind: "agent", agentId: alice.id, agentName: alice.name, project: PROJECT };
  const deps = { observer: quietObserver, messageTtlMs: 86_400_000, messageRetentionMs: 604_800_000 };
  /** Messages whose store is never reached by a request the checks refuse. */
  const messages = () => createMessages({ ...deps, store: untouchable<MessagesDeps["store"]>("store") });
  const req = (over: Partial<SendRequest> = {}): SendRequest => ({ target: bob.id, content: "hello", ...over });

  it("has the reference's limits", () => {
    expect(messageLimits).toEqual({ contentMax: 32_000, ttlMinMs: 1_000, ttlMaxMs: 604_800_000, hopsMax: 100, maxHopsMin: 1, maxHopsMax: 20, maxHopsDefault: 5 });
  });

  type Refused = { name: string; req: SendRequest; code: HubCode; field?: string };
  const refused: Refused[] = [
    { name: "an empty target", req: req({ target: "  " }), code: "protocol_error", field: "target" },
    { name: "a target over 80 characters", req: req({ target: "x".repeat(81) }), code: "protocol_error", field: "target" },
    { name: "empty content", req: req({ content: " \n " }), code: "protocol_error", field: "content" },
    { name: "content over 32,000 characters", req: req({ content: "x".repeat(32_001) }), code: "protocol_error", field: "content" },
    { name: "an unknown delivery", req: req({ delivery: "now" }), code: "protocol_error", field: "delivery" },
    { name: "a correlationId over 128 characters", req: req({ correlationId: "c".repeat(129) }), code: "protocol_error", field: "correlationId" },
    { name: "a replyTo over 80 characters", req: req({ replyTo: "r".repeat(81) }), code: "protocol_error", field: "replyTo" },
    { name: "negative hops", req: req({ hops: -1 }), code: "protocol_error", field: "hops" },
    { name: "hops over 100", req: req({ hops: 101, maxHops: 20 }), code: "protocol_error", field: "hops" },
    { name: "maxHops 0", req: req({ maxHops: 0 }), code: "protocol_error", field: "maxHops" },
    { name: "maxHops over 20", req: req({ maxHops: 21 }), code: "protocol_error", field: "maxHops" },
    { name: "hops equal to maxHops", req: req({ hops: 3, maxHops: 3 }), code: "hop_limit_reached" },
    { name: "hops above maxHops", req: req({ hops: 20, maxHops: 1 }), code: "hop_limit_reached" },
    { name: "hops 5 against the default maxHops 5", req: req({ hops: 5 }), code: "hop_limit_reached" },
    { name: "a ttl 1 ms below 1 s", req: req({ ttlMs: 999 }), code: "protocol_error", field: "ttlMs" },
    { name: "a ttl 1 ms above 7 days", req: req({ ttlMs: 604_800_001 }), code: "protocol_error", field: "ttlMs" },
    { name: "an idempotencyKey over 128 characters", req: req({ idempotencyKey: "k".repeat(129) }), code: "protocol_error", field: "idempotencyKey" },
  ];
  it.each(titled(refused, (c) => `refuses ${c.name} with ${c.code}`))("%s", async (_title, { req: r, code, field }) => {
    const e = await refusalOf(messages().send(caller, r));
    expect(e.code).toBe(code);
    if (field) expect(e.metadata.field).toBe(field);
    if (code === "hop_limit_reached") expect(e.metadata).toEqual({ hops: String(r.hops), maxHops: String(r.maxHops ?? 5) });
  });

  const accepted: { name: string; req: SendRequest }[] = [
    { name: "the minimum ttl", req: req({ ttlMs: 1_000 }) },
    { name: "the maximum ttl", req: req({ ttlMs: 604_800_000 }) },
    { name: "no ttl, hops or maxHops (the defaults)", req: req() },
    { name: "hops one below maxHops", req: req({ hops: 19, maxHops: 20 }) },
    { name: "hops 0 with maxHops 1", req: req({ hops: 0, maxHops: 1 }) },
    { name: "content of exactly 32,000 characters after trimming", req: req({ content: ` ${"x".repeat(32_000)} ` }) },
    { name: "a target of exactly 80 characters", req: req({ target: "b".repeat(80) }) },
    { name: "the steer delivery", req: req({ delivery: "steer" }) },
    { name: "the nextTurn delivery", req: req({ delivery: "nextTurn" }) },
    { name: "an idempotencyKey of exactly 128 characters", req: req({ idempotencyKey: "k".repeat(128) }) },
  ];
  it.each(titled(accepted, (c) => `takes ${c.name} to the store`))("%s", async (_title, { req: r }) => {
    expect(await passesChecks(messages().send(caller, r))).toBe(true);
  });

  // Several faults at once: the first in the reference's order is the one answered.
  it.each(
    titled(
      [
        { name: "target before content", req: req({ target: "", content: "" }), field: "target" },
        { name: "content before delivery", req: req({ content: "", delivery: "now" }), field: "content" },
        { name: "delivery before correlationId", req: req({ delivery: "now", correlationId: "c".repeat(129) }), field: "delivery" },
        { name: "replyTo before hops", req: req({ replyTo: "r".repeat(81), hops: -1 }), field: "replyTo" },
        { name: "maxHops before the hop check", req: req({ hops: 30, maxHops: 21 }), field: "maxHops" },
        { name: "the hop check before ttl", req: req({ hops: 5, maxHops: 5, ttlMs: 1 }), code: "hop_limit_reached" },
        { name: "ttl before idempotencyKey", req: req({ ttlMs: 1, idempotencyKey: "k".repeat(129) }), field: "ttlMs" },
      ],
      (c) => `checks ${c.name}`,
    ),
  )("%s", async (_title, { req: r, field, code = "protocol_error" }) => {
    const e = await refusalOf(messages().send(caller, r));
    expect([e.code, e.metadata.field]).toEqual([code, field]);
  });

  it("hands the rule a trimmed request with the defaults: followUp, hops 0, maxHops 5, the hub's ttl", async () => {
    const call = await dependencyCall(messages().send(caller, req({ target: ` ${bob.id} `, content: " hello " })));
    const decide = decideOf<(ctx: SendContext, nowMs: number) => { write?: MessageRow }>(call);
    expect(decide({ candidates: [bob], sender: alice }, NOW).write).toMatchObject({ toId: bob.id, content: "hello", delivery: "followUp", hops: 0, maxHops: 5, expiresAtMs: NOW + 86_400_000 });
  });

  it("decides only for the instance that was authenticated: the sender's row, as the store read it, must carry the call's key (D26)", async () => {
    const keyed: AgentCaller = { ...caller, keyHash: alice.keyHash };
    const call = await dependencyCall(messages().send(keyed, req()));
    const decide = decideOf<(ctx: SendContext, nowMs: number) => { write?: MessageRow }>(call);
    const codeOf = (ctx: SendContext) => {
      try {
        return decide(ctx, NOW).write?.toId;
      } catch (e) {
        return (e as { code: string }).code;
      }
    };
    expect({
      same: codeOf({ candidates: [bob], sender: alice }),
      takenOver: codeOf({ candidates: [bob], sender: { ...alice, keyHash: "1".repeat(64) } }),
      gone: codeOf({ candidates: [bob] }),
    }).toEqual({ same: bob.id, takenOver: "invalid_agent_identity", gone: "invalid_agent_identity" });
  });
});
