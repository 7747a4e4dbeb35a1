import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { expectRestError, expectRestOk } from "../fixtures/rest.js";

/**
 * Agent names are shown in lists, logs, terminals and the operator page (D74): one holding a
 * control character (a terminal's escape, a newline) or a bidirectional formatting character (a
 * name that reads as another) is refused with protocol_error naming `name`, and nothing is
 * registered; any other Unicode stays valid.
 */
const refused = [
  ["an escape sequence", "alpha\u001b[2Jbeta"],
  ["a newline", "alpha\nbeta"],
  ["DEL", "alpha\u007f"],
  ["a C1 control (CSI)", "alpha\u009b31m"],
  ["a right-to-left override", "deploy\u202e1v"],
  ["a left-to-right isolate", "\u2066alpha\u2069"],
  ["a left-to-right mark", "alpha\u200e"],
] as const;

describe("agent names", () => {
  it.each(refused)("RegisterAgent refuses %s: 400 protocol_error naming name, nothing registered", async (_what, name) => {
    await using t = await startTestHub();
    const body = await expectRestError(await t.rest("/v1/agents/register", { json: { name, project: "p" } }), 400, "protocol_error");
    expect(body.error).toMatch(/^name must not contain /);
    const witness = await t.register("witness", "p");
    const agents = await expectRestOk(await t.rest("/v1/agents?includeOffline=true", { headers: witness.headers }));
    expect(agents.agents.map((a: { name: string }) => a.name)).toEqual(["witness"]);
  });

  it.each(["Ünïcødé", "エージェント", "a b", "claude-code@host", "مرحبا", "😀"])("RegisterAgent accepts %j", async (name) => {
    await using t = await startTestHub();
    expect((await expectRestOk(await t.rest("/v1/agents/register", { json: { name, project: "p" } }), 201)).agent.name).toBe(name);
  });
});
