/**
 * whileCallerLasts (server/token-guard.ts) for a waiting call let in while its project had no token
 * of its own: the project is read once its closing is listened for, so a token committed between
 * the call's authentication and the subscription still ends the call before it waits.
 */
import { describe, expect, it } from "vitest";
import type { Caller } from "../../src/caller.js";
import { createBus } from "../../src/events/bus.js";
import { whileCallerLasts } from "../../src/server/token-guard.js";

const agent: Caller = { kind: "agent", agentId: "agt_a", agentName: "a", project: "p", untilClosed: true };
const waiting = { waitMs: 60_000 };

function setup(closedAlready: boolean) {
  const closedProjects = createBus<string>((p) => p);
  const ran: AbortSignal[] = [];
  const run = async (signal: AbortSignal) => {
    ran.push(signal);
    return "answered";
  };
  const outcome = (caller: Caller, message: unknown) =>
    whileCallerLasts(undefined, caller, message, new AbortController().signal, run, { closedProjects, projectClosed: async () => closedAlready }).then(
      (v) => v,
      (e: { code?: string }) => e.code,
    );
  return { closedProjects, ran, outcome };
}

describe("a waiting call of a project that was open when it was authenticated", () => {
  it("is refused before it runs when the project got a token before the call listened", async () => {
    const t = setup(true);
    expect(await t.outcome(agent, waiting)).toBe("invalid_auth");
    expect(t.ran).toEqual([]);
  });

  it("runs with a signal that the project's closing aborts with invalid_auth", async () => {
    const t = setup(false);
    let signal: AbortSignal | undefined;
    const { closedProjects } = t;
    const ended = whileCallerLasts(
      undefined,
      agent,
      waiting,
      new AbortController().signal,
      (s) =>
        new Promise((_, reject) => {
          signal = s;
          s.addEventListener("abort", () => reject(new Error("the wait ended")));
        }),
      { closedProjects, projectClosed: async () => false },
    ).then(
      () => "answered",
      (e: { code?: string }) => e.code,
    );
    await new Promise((r) => setImmediate(r));
    expect(signal?.aborted).toBe(false);
    closedProjects.publish("q"); // another project's: nothing
    expect(signal?.aborted).toBe(false);
    closedProjects.publish("p");
    expect(await ended).toBe("invalid_auth");
  });

  it("a call that does not wait, or a caller with a token of the project's own, is not watched", async () => {
    const t = setup(true);
    expect(await t.outcome(agent, { waitMs: 0 })).toBe("answered");
    expect(await t.outcome({ kind: "agent", agentId: "agt_a", agentName: "a", project: "p", token: { id: "tok_1", project: "p" } }, waiting)).toBe("answered");
    expect(await t.outcome({ kind: "admin" }, waiting)).toBe("answered");
  });
});
