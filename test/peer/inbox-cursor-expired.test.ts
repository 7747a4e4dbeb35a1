import { expect, it } from "vitest";
import { createClient, ConnectError } from "@connectrpc/connect";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import type { HubConfig } from "../../src/config.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { refusalOf } from "../fixtures/rpc.js";
import { StreamScope } from "../fixtures/streams.js";

const keepAliveMs = 15_000;
const config: Partial<HubConfig> = {
  cleanupIntervalMs: 3_600_000,
  staleAfterMs: 3_600_000,
  streamKeepAliveMs: keepAliveMs,
  messageRetentionMs: 10_000,
};
const protocol = protocols[1]; // connect-binary (HTTP/2)

/**
 * Retention purges an inbox's ended messages, not a prefix of it: a message still pending can sit
 * below the purged number. An expired Subscribe cursor says to open the inbox again without a
 * cursor (resume "pending"), and doing so brings the pending message back.
 */
it("Subscribe: an expired cursor's hint (open again without a cursor) loses no message still pending", async () => {
  await using t = await startTestHub({ config });
  using s = new StreamScope();
  const a = await t.register("a");
  const b = await t.register("b");
  const peer = (h: Record<string, string>) => createClient(PeerService, protocol.make(t.baseUrl, [withHeaders(h)]));
  const m1 = (await peer(a.headers).sendMessage({ target: "b", content: "keep me", ttlMs: 3_600_000 })).message!;
  const m2 = (await peer(a.headers).sendMessage({ target: "b", content: "cancel me", ttlMs: 3_600_000 })).message!;
  await peer(a.headers).cancelMessage({ messageId: m2.id });
  t.clock.advance(11_000);
  await t.hub.sweepNow();
  const refused = s.add((signal) => peer(b.headers).subscribe({ afterSeq: 0n }, { signal }));
  const e = await refused.error();
  if (!(e instanceof ConnectError)) throw e;
  const r = refusalOf(e);
  expect(r.reason).toBe("CURSOR_EXPIRED");
  expect(r.metadata.resume).toBe("pending");
  expect(e.rawMessage).toMatch(/without a cursor/);
  const again = s.add((signal) => peer(b.headers).subscribe({}, { signal }));
  expect((await again.next()).event.case).toBe("ready");
  const next = await again.next();
  expect({ case: next.event.case, id: next.event.case === "message" ? next.event.value.id : undefined }).toEqual({ case: "message", id: m1.id });
});
