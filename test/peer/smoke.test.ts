import { describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { jsonOf, startTestHub } from "../fixtures/hub.js";
import { idle } from "../fixtures/streams.js";

describe("peer smoke", () => {
  it("sends, streams, acks, replies", async () => {
    await using t = await startTestHub();
    const a = await t.register("alpha");
    const b = await t.register("beta");
    const sent = await t.rest("/v1/messages", { headers: a.headers, json: { target: "beta", content: "hi" } });
    expect(sent.status).toBe(202);
    const m = (await jsonOf(sent)).message;
    expect(m).toMatchObject({ from: a.id, to: b.id, status: "queued", seq: 1, delivery: "followUp", hops: 0, maxHops: 5 });

    const bClient = createClient(PeerService, protocols[1].make(t.baseUrl, [withHeaders(b.headers)]));
    const ac = new AbortController();
    const it = bClient.subscribe({}, { signal: ac.signal })[Symbol.asyncIterator]();
    const ready = (await it.next()).value;
    expect(ready.event.case).toBe("ready");
    const first = (await it.next()).value;
    expect(first.event.case).toBe("message");
    expect(first.cursor).toBe(1n);

    const sent2 = await t.rest("/v1/messages", { headers: a.headers, json: { target: b.id, content: "again" } });
    expect(sent2.status).toBe(202);
    const second = (await it.next()).value;
    expect(second.event.value.content).toBe("again");

    const ack = await t.rest(`/v1/messages/${m.id}/ack`, { method: "POST", headers: b.headers });
    expect((await jsonOf(ack)).message.status).toBe("delivered");
    const reply = await t.rest(`/v1/messages/${m.id}/reply`, { headers: b.headers, json: { content: "yo" } });
    expect((await jsonOf(reply)).message.reply.content).toBe("yo");

    await idle(t.clock); // the stream waits on the hub clock before the clock moves
    t.clock.advance(15_000);
    const ka = (await it.next()).value;
    expect(ka.event.case).toBe("keepAlive");
    ac.abort();
  });
});
