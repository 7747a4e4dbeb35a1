import { createClient } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { streamProtocols } from "../fixtures/streams.js";

describe.each(streamProtocols)("shutdown over $name", (p) => {
  it("ends open streams instead of waiting out the grace time", async () => {
    // A grace time far beyond the test timeout: close() must not need it.
    const t = await startTestHub({ config: { shutdownGraceMs: 600_000 } });
    const a = await t.register("alpha");
    const transport = p.make(t.baseUrl, [withHeaders(a.headers)]);
    const inbox = createClient(PeerService, transport).subscribe({})[Symbol.asyncIterator]();
    const watch = createClient(PresenceService, transport).watchPresence({})[Symbol.asyncIterator]();
    expect((await inbox.next()).value?.event.case).toBe("ready");
    expect((await watch.next()).value?.event.case).toBe("snapshot");

    const inboxEnd = inbox.next();
    const watchEnd = watch.next();
    inboxEnd.catch(() => undefined);
    watchEnd.catch(() => undefined);
    await t.close();
    // Each stream ends: cleanly, or with the transport's error once the connection closes.
    await expect(inboxEnd.then((r) => r.done, () => true)).resolves.toBe(true);
    await expect(watchEnd.then((r) => r.done, () => true)).resolves.toBe(true);
  }, 15_000);
});
