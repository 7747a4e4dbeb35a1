import { describe, expect, it } from "vitest";
import { startTestHub } from "../fixtures/hub.js";

/**
 * Connect JSON drops a property it does not know; read that way, an enum value whose name it
 * does not know is dropped too, and the field reads as unset: its default. A misspelled token
 * scope minted the broadest one. A request that holds an enum field is read strictly instead
 * (src/wire/serialization.ts jsonOptionsOf, D66): refused, nothing changed, on both ways a
 * unary call is served (the fast path and connect's own, KXM_WIRE=connect in the second pass).
 */
describe("Connect JSON: an enum value the hub does not know", () => {
  const post = (baseUrl: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${baseUrl}/${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

  it("is refused with invalid_argument, and no token is minted", async () => {
    await using t = await startTestHub();
    for (const scope of ["read", "TOKEN_SCOPE_REED", "TOKEN_SCOPE_UNKNOWN"]) {
      const res = await post(t.baseUrl, "kxm.hub.v1.OpsService/CreateProjectToken", { project: "p", scope });
      expect(res.status, scope).toBe(400);
      expect(await res.json()).toMatchObject({ code: "invalid_argument" });
    }
    const listed = await post(t.baseUrl, "kxm.hub.v1.OpsService/ListProjectTokens", { project: "p" });
    expect(await listed.json()).toEqual({});
    // The names it knows are taken as ever.
    const made = await post(t.baseUrl, "kxm.hub.v1.OpsService/CreateProjectToken", { project: "p", scope: "TOKEN_SCOPE_READ" });
    expect(made.status).toBe(200);
    expect(await made.json()).toMatchObject({ token: { scope: "TOKEN_SCOPE_READ" } });
  });

  it("is refused in a message's delivery and in a listing's box, and nothing is sent", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    await t.register("beta");
    const send = await post(t.baseUrl, "kxm.hub.v1.PeerService/SendMessage", { target: "beta", content: "x", delivery: "DELIVERY_STEER_NOW" }, a.headers);
    expect(send.status).toBe(400);
    const list = await post(t.baseUrl, "kxm.hub.v1.PeerService/ListMessages", { box: "BOX_TRASH" }, a.headers);
    expect(list.status).toBe(400);
    const outbox = await post(t.baseUrl, "kxm.hub.v1.PeerService/ListMessages", { box: "MESSAGE_BOX_OUTBOX" }, a.headers);
    expect(outbox.status, await outbox.clone().text()).toBe(200);
    expect(await outbox.json()).toEqual({});
  });
});
