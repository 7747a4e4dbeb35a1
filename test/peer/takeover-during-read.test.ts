/**
 * A Subscribe stream of an instance taken over while the stream reads its inbox from the store
 * sends nothing sent after the takeover (to the next instance): the key is checked again after
 * the read, before anything read is sent, and the stream ends unauthenticated. The test runs the
 * takeover, and a message to the new instance, inside the stream's store read.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { expect, it } from "vitest";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";

it("a Subscribe stream of an instance taken over while it reads its inbox gets nothing sent after the takeover", async () => {
  await using t = await startTestHub();
  const a = await t.register("alpha");
  const b = await t.register("beta");
  const send = (content: string) => t.rest("/v1/messages", { json: { target: b.id, content }, headers: a.headers });
  expect((await send("before takeover")).status).toBe(202);

  // The stream's store read of b's inbox: the takeover (a supervisor restarting b) and a message
  // to the new instance commit while it is under way.
  const store = t.hub.store.messages as { readInbox(id: string, after: number, limit: number): Promise<unknown[]> };
  const original = store.readInbox.bind(store);
  let armed = true;
  store.readInbox = async (id, after, limit) => {
    if (armed && id === b.id) {
      armed = false;
      const r = await t.rest("/v1/agents/register", { json: { name: "beta", project: "p", takeover: true } });
      expect(r.status).toBeLessThan(300);
      expect((await send("after takeover")).status).toBe(202);
    }
    return original(id, after, limit);
  };

  const transport = createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1", interceptors: [withHeaders(b.headers)] });
  const got: string[] = [];
  let end = "open";
  try {
    for await (const f of createClient(PeerService, transport).subscribe({ afterSeq: 0n })) {
      if (f.event.case === "message") got.push(f.event.value.content);
    }
    end = "ended";
  } catch (e) {
    end = e instanceof ConnectError ? Code[e.code] : String(e);
  }
  expect(end).toBe("Unauthenticated");
  // The old instance ended at the takeover: what was sent to its successor is not its to read.
  expect(got).not.toContain("after takeover");
});
