import { describe, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";
import { expectAgentIdentityRefused, expectAuthRefused } from "../fixtures/rest.js";

// reference-hub.md §3.2: "| 1 | agent, project token | §1.5 | 401 |" then "| 2 | body | §1.4 | 415/413/400 |",
// and §2.2 heartbeat: "Errors (in check order): 401 ×2, 415/413/400".
// decisions.md D19: "Register checks the project token before validating `name` ... So an
// unauthenticated caller learns nothing about the request's validity."
/**
 * The REST face authenticates a request before it refuses its body (spec §3.2: "1 | agent,
 * project token | 401" before "2 | body | 415/413/400"; D19): a caller that fails authentication
 * learns nothing of its request's validity.
 */
describe("an unauthenticated caller is refused 401 before its body is looked at", () => {
  it("POST /v1/messages: wrong agent key + malformed JSON → 401 invalid_agent_identity", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const res = await t.rest("/v1/messages", {
      method: "POST",
      headers: { ...a.headers, "x-kxm-agent-key": "key_00000000000000000000000000000000", "content-type": "application/json" },
      body: "{",
    });
    await expectAgentIdentityRefused(res); // hub answers 400 invalid_json
  });

  it("POST /v1/messages: wrong agent key + a field of the wrong type → 401 invalid_agent_identity", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const res = await t.rest("/v1/messages", {
      method: "POST",
      headers: { ...a.headers, "x-kxm-agent-key": "key_00000000000000000000000000000000" },
      json: { target: 5, content: "x" },
    });
    await expectAgentIdentityRefused(res); // hub answers 400 protocol_error "target must be a string"
  });

  it("heartbeat: wrong agent key + a text/plain body → 401 invalid_agent_identity", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const res = await t.rest(`/v1/agents/${a.id}/heartbeat`, {
      method: "POST",
      headers: { ...a.headers, "x-kxm-agent-key": "key_00000000000000000000000000000000", "content-type": "text/plain" },
      body: "{}",
    });
    await expectAgentIdentityRefused(res); // hub answers 415 unsupported_media_type
  });

  it("register (D19): wrong project token + name of the wrong type → 401 invalid_auth, as for a name too long", async () => {
    await using t = await startTestHub({ config: { projectTokens: { p: "tok" } } });
    // A name too long is refused 401 (D19 holds for the length rule) ...
    await expectAuthRefused(
      await t.rest("/v1/agents/register", { headers: { authorization: "Bearer nope" }, json: { name: "n".repeat(70), project: "p" } }),
    );
    // ... but a name that is not a string tells the unauthenticated caller 400 protocol_error.
    await expectAuthRefused(
      await t.rest("/v1/agents/register", { headers: { authorization: "Bearer nope" }, json: { name: 5, project: "p" } }),
    );
  });
});
