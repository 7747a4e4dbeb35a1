import { connect } from "@kxm/hub-client";

const { KXM_URL = "http://127.0.0.1:7331", KXM_TOKEN, WORK_MS = "25000" } = process.env;
const hub = { url: KXM_URL, token: KXM_TOKEN, project: "demo" };
const reviewer = await connect({ ...hub, name: "reviewer" });
const builder = await connect({ ...hub, name: "builder" });

// The builder holds repo/main (10 s TTL, renewed for it) through its work, checks the fence, commits.
const sent = await builder.withLease("repo/main", async ({ token, signal }) => {
  await new Promise((done) => setTimeout(done, Number(WORK_MS)));
  signal.throwIfAborted(); // lost? stop before the irreversible step
  console.log(`commit to main with fencing token ${token}`);
  return builder.send("reviewer", `pushed main at token ${token}`);
}, { ttlMs: 10_000, waitMs: 30_000 });

// The reviewer reads its inbox, acknowledges and replies.
for await (const event of reviewer.inbox()) {
  await event.ack();
  await event.reply(`reviewed: ${event.message.content}`);
  console.log(`reviewer replied to "${event.message.content}"`);
  break;
}
// The builder reads the reply (it came already; awaitReply also waits for one still to come).
console.log(`builder read the reply "${(await builder.awaitReply(sent)).reply?.content}"`);
await Promise.all([builder.close(), reviewer.close()]);
