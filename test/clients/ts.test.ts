import { createClient, type Transport } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PeerService, type SubscribeResponse } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { SyncService, SyncOutcome } from "../../gen/ts/kxm/hub/v1/sync_pb.js";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { SyncEventSchema } from "../../gen/ts/kxm/hub/v1/sync_event_pb.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { refused } from "../fixtures/rpc.js";
import { StreamScope, type Frames } from "../fixtures/streams.js";
import { syncEvent } from "../sync/fixtures.js";

const token = { authorization: "Bearer tok-clients" };

/** The next frame that is not ready, presence or a keep-alive. */
async function nextEvent(frames: Frames<SubscribeResponse>): Promise<SubscribeResponse["event"]> {
  for (;;) {
    const f = await frames.next();
    if (!["ready", "presence", "keepAlive"].includes(f.event.case ?? "")) return f.event;
  }
}

/**
 * The clients scenario (the same steps the Go, Python and browser checks run), through the
 * generated TypeScript client over every wire the hub serves.
 */
describe.each(protocols)("the clients scenario in TypeScript over $name", (p) => {
  it("registers, fences a lease, messages over streams and pushes run facts", async () => {
    await using t = await startTestHub({ config: { projectTokens: { clients: "tok-clients" } } });
    using streams = new StreamScope();
    const transport = (headers: Record<string, string>): Transport => p.make(t.baseUrl, [withHeaders({ ...token, ...headers })]);
    const presence = createClient(PresenceService, transport({}));

    // 1. two agents
    const one = await presence.registerAgent({ name: "alpha-ts", project: "clients" });
    const two = await presence.registerAgent({ name: "beta-ts", project: "clients" });
    const as = (r: typeof one) => transport({ "x-kxm-agent-id": r.agent!.id, "x-kxm-agent-key": r.agentKey });
    const leases1 = createClient(LeaseService, as(one));
    const leases2 = createClient(LeaseService, as(two));

    // 2. acquire and renew
    const held = await leases1.acquireLease({ name: "deploy-ts", ttlMs: 5_000 });
    expect(held.lease?.fencingToken).toBe(1n);
    expect((await leases1.renewLease({ name: "deploy-ts", fencingToken: 1n, ttlMs: 5_000 })).renewed).toBe(true);

    // 3. refused while held, with the typed detail
    const refusal = await refused(leases2.acquireLease({ name: "deploy-ts", ttlMs: 5_000 }));
    expect(refusal).toMatchObject({ code: "aborted", reason: "LEASE_HELD", metadata: { holderAgentName: "alpha-ts" } });
    expect(refusal.lease?.fencingToken).toBe(1n);

    // 4. lapse, takeover with token 2, the old holder is superseded
    t.clock.advance(5_001);
    const taken = await leases2.acquireLease({ name: "deploy-ts", ttlMs: 5_000 });
    expect([taken.lease?.fencingToken, taken.renewed]).toEqual([2n, false]);
    expect((await refused(leases1.renewLease({ name: "deploy-ts", fencingToken: 1n }))).reason).toBe("LEASE_SUPERSEDED");

    // 5. a message, its ack and reply, over both agents' streams
    const peer1 = createClient(PeerService, as(one));
    const peer2 = createClient(PeerService, as(two));
    const inbox1 = streams.add((signal) => peer1.subscribe({}, { signal }));
    const inbox2 = streams.add((signal) => peer2.subscribe({}, { signal }));
    expect((await inbox1.next()).event.case).toBe("ready");
    expect((await inbox2.next()).event.case).toBe("ready");
    const sent = await peer1.sendMessage({ target: "beta-ts", content: "ship it?" });
    const received = await nextEvent(inbox2);
    expect(received.case === "message" && received.value.content).toBe("ship it?");
    await peer2.ackMessage({ messageId: sent.message!.id });
    await peer2.replyMessage({ messageId: sent.message!.id, content: "shipped" });
    const reply = await nextEvent(inbox1);
    expect(reply.case === "reply" && reply.value.reply?.content).toBe("shipped");

    // 6. a runtime pushes three run facts and reads its cursor
    const sync = createClient(SyncService, transport({}));
    const runtimeId = "rtm_tsclient01";
    const events = [1, 2, 3].map((sequence) =>
      fromJson(SyncEventSchema, syncEvent({ sequence, homeRuntimeId: runtimeId, runId: "run_tsclient01" }) as JsonObject),
    );
    const pushed = await sync.pushEvents({ project: "clients", runtimeId, events });
    expect(pushed.results.map((r) => r.outcome)).toEqual([SyncOutcome.ACCEPTED, SyncOutcome.ACCEPTED, SyncOutcome.ACCEPTED]);
    const cursor = await sync.getCursor({ project: "clients", projectId: "prj_project0001", runId: "run_tsclient01" });
    expect(cursor.cursor?.cursor).toBe(3n);
  });
});
