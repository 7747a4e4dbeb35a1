"""The typical agent program on the Python library: a builder holds repo/main (10 s TTL, renewed
for it) through its work, checks the fence and commits; a reviewer reads its inbox, acks, replies;
the builder reads the reply."""
import asyncio
import os

import kxmhub


async def main() -> None:
    hub = dict(project="demo", token=os.environ.get("KXM_TOKEN"))
    url, work = os.environ.get("KXM_URL", "http://127.0.0.1:7331"), float(os.environ.get("WORK_S", "25"))
    async with await kxmhub.connect(url, name="reviewer", **hub) as reviewer, await kxmhub.connect(url, name="builder", **hub) as builder:
        async with builder.lease("repo/main", ttl=10, wait=30) as lease:
            await asyncio.sleep(work)  # the work
            lease.check()  # lost? stop before the irreversible step
            print(f"commit to main with fencing token {lease.token}")
            sent = await builder.send("reviewer", f"pushed main at token {lease.token}")
        async for event in reviewer.inbox():
            await event.ack()
            await event.reply(f"reviewed: {event.message.content}")
            print(f'reviewer replied to "{event.message.content}"')
            break
        answered = await builder.await_reply(sent.id)  # waits for the reply; here it came already
        print(f'builder read the reply "{answered.reply.content}"')


asyncio.run(main())
