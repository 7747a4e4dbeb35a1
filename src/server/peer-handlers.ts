import type { ServiceImpl } from "@connectrpc/connect";
import type { InboxReader } from "../peer/inbox-read.js";
import type { InboxStreams } from "../peer/inbox-stream.js";
import { errors } from "../errors.js";
import type { Messages } from "../peer/messages.js";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { PeerService, SubscribeResponseSchema } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { agentOf } from "./caller.js";
import { agentToProto, boxFromProto, deliveryFromProto, messageToProto, statusFromProto } from "./convert.js";
import type { MessageStatus as DomainStatus } from "../domain.js";

/** PeerService over the message domain. */
export function peerHandlers(messages: Messages, openInbox: InboxStreams, readInbox: InboxReader): ServiceImpl<typeof PeerService> {
  return {
    async readInbox(req, ctx) {
      // A waiting read ends when its client goes away (ctx.signal).
      const r = await readInbox(agentOf(ctx), { afterCursor: req.afterCursor, limit: req.limit, waitMs: req.waitMs }, ctx.signal);
      return {
        events: r.events.map((e) => ({ cursor: BigInt(e.seq), event: { case: e.kind, value: messageToProto(e.message) } })),
        nextCursor: BigInt(r.nextCursor),
      };
    },
    async sendMessage(req, ctx) {
      const r = await messages.send(agentOf(ctx), {
        target: req.target,
        content: req.content,
        delivery: deliveryFromProto(req.delivery),
        correlationId: req.correlationId,
        replyTo: req.replyTo,
        hops: req.hops,
        maxHops: req.maxHops,
        ttlMs: req.ttlMs,
        allowOffline: req.allowOffline,
        idempotencyKey: req.idempotencyKey,
      });
      return { message: messageToProto(r.message), idempotent: r.idempotent };
    },
    async ackMessage(req, ctx) {
      return { message: messageToProto(await messages.ack(agentOf(ctx), req.messageId)) };
    },
    async replyMessage(req, ctx) {
      return { message: messageToProto(await messages.reply(agentOf(ctx), req.messageId, req.content)) };
    },
    async cancelMessage(req, ctx) {
      return { message: messageToProto(await messages.cancel(agentOf(ctx), req.messageId)) };
    },
    async getMessage(req, ctx) {
      return { message: messageToProto(await messages.get(agentOf(ctx), req.messageId)) };
    },
    async listMessages(req, ctx) {
      const statuses = req.status.map((s): DomainStatus => {
        const status = statusFromProto(s);
        if (status === undefined) throw errors.protocol(`status ${s} is not a message state`, "status");
        return status;
      });
      const r = await messages.list(agentOf(ctx), {
        box: boxFromProto(req.box),
        statuses,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      return { messages: r.messages.map(messageToProto), nextPageToken: r.nextPageToken };
    },
    async *subscribe(req, ctx) {
      for await (const f of openInbox(agentOf(ctx), req.afterSeq, ctx.signal)) {
        const cursor = BigInt(f.cursor);
        let frame: MessageInitShape<typeof SubscribeResponseSchema>;
        switch (f.kind) {
          case "ready":
            frame = { cursor, event: { case: "ready", value: { agent: agentToProto(f.agent) } } };
            break;
          case "event":
            frame = { cursor, event: { case: f.event.kind, value: messageToProto(f.event.message) } };
            break;
          case "presence":
            frame = { cursor, event: { case: "presence", value: agentToProto(f.agent) } };
            break;
          case "forgotten":
            frame = { cursor, event: { case: "forgotten", value: f.agent } };
            break;
          case "keepAlive":
            frame = { cursor, event: { case: "keepAlive", value: { at: timestampFromMs(f.atMs) } } };
            break;
        }
        yield frame;
      }
    },
  };
}
