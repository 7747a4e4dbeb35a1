"""The Python library against a hub process this test starts, SIGKILLs and starts again on the same
file and port (real time). KXM_NODE and KXM_HUB_BIN say how to run `kxm-hub serve`."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import secrets
import socket
import subprocess
import tempfile
import time

import kxmhub
import pytest
from kxm.hub.v1 import lease_pb2

from conftest import count_subscribes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HubProcess:
    def __init__(self, port: int, data_path: str, **env: str) -> None:
        node, hub_bin = os.environ.get("KXM_NODE"), os.environ.get("KXM_HUB_BIN")
        if not node or not hub_bin:
            pytest.fail("KXM_NODE and KXM_HUB_BIN must be set (run through `npx vitest run test/clients/python.test.ts`)")
        self.proc = subprocess.Popen(
            [node, hub_bin, "serve", "--port", str(port), "--data-path", data_path, "--log-path", "-"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **env},
            text=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            m = re.match(r"kxm hub listening at (\S+);", line)
            if m:
                self.url = m.group(1)
                return
        self.kill()
        pytest.fail("kxm-hub did not start")

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL
        self.proc.wait()


async def send_to_reader(sender: kxmhub.Session, text: str):
    """Sends `text` to the agent "reader", again while the hub says it is not there: after a restart
    the reader is offline until its inbox reconnects."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return await sender.send("reader", text)
        except kxmhub.HubError as e:
            if e.code != "target_not_found" or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def test_lease_through_a_short_outage_and_lost_before_its_ttl_in_a_long_one() -> None:
    async def run() -> None:
        with tempfile.TemporaryDirectory() as d:
            port, data = free_port(), os.path.join(d, "kxm.db")
            hub = HubProcess(port, data)
            try:
                s = await kxmhub.connect(hub.url, project="p", name="survivor", heartbeat=3600)
                ttl = 6.0
                lease = await s.acquire("db", ttl=ttl)
                # Short: down for about a second, then back on the same file and port.
                hub.kill()
                await asyncio.sleep(1)
                hub = HubProcess(port, data)
                await asyncio.sleep(ttl)
                assert not lease.lost.is_set(), lease.error
                got = await s.leases.get_lease(lease_pb2.GetLeaseRequest(name="db"), headers=s._headers())
                assert got.lease.fencing_token == lease.token
                # Long: down for good; the loss comes before the lease, as the hub last confirmed it, ends.
                hub.kill()
                await asyncio.wait_for(lease.lost.wait(), 2 * ttl)
                lost_at_ms = time.time() * 1000
                assert lease.error is not None and lease.error.code == "lease_unconfirmed"
                assert lost_at_ms < lease.lease.expires_at.ToMilliseconds()
                await s.close()
            finally:
                hub.kill()

    asyncio.run(run())


def test_inbox_loses_and_repeats_nothing_through_subscriber_too_slow_and_a_restart() -> None:
    async def run() -> None:
        with tempfile.TemporaryDirectory() as d:
            port, data = free_port(), os.path.join(d, "kxm.db")
            hub = HubProcess(port, data, KXM_STREAM_MAX_LAG="4")
            try:
                sender = await kxmhub.connect(hub.url, project="p", name="sender", heartbeat=3600)
                reader = await kxmhub.connect(hub.url, project="p", name="reader", heartbeat=3600)
                subscribes = count_subscribes(reader)

                def big(i: int) -> str:
                    # Random: the hub compresses frames, repeated text would fill no buffer.
                    return f"message {i:03d} " + base64.b64encode(secrets.token_bytes(22_000)).decode()

                async def send(i: int) -> None:
                    await send_to_reader(sender, big(i))

                inbox = reader.inbox().__aiter__()
                seen: list[str] = []

                async def read() -> None:
                    ev = await asyncio.wait_for(inbox.__anext__(), 30)
                    seen.append(ev.message.content[:11])

                await send(0)
                await read()
                # The reader stops reading while 200 large messages (6 MB) arrive: HTTP/2 flow
                # control holds the hub's writes, the stream falls more than 4 events behind and is
                # cut off; the inbox resumes where the hub says.
                for i in range(1, 201):
                    await send(i)
                for _ in range(1, 201):
                    await read()
                assert subscribes[0] >= 2, "the stream was never cut off"
                hub.kill()
                hub = HubProcess(port, data, KXM_STREAM_MAX_LAG="4")
                before = subscribes[0]
                first = asyncio.create_task(read())  # reading makes the inbox reconnect, and the reader online
                for i in range(201, 206):
                    await send(i)
                await first
                for _ in range(202, 206):
                    await read()
                assert subscribes[0] > before, "the inbox did not reconnect after the restart"
                assert seen == [f"message {i:03d}" for i in range(206)]
                await inbox.aclose()
                await sender.close()
                await reader.close()
            finally:
                hub.kill()

    asyncio.run(run())


def test_inbox_resumes_where_its_stream_stood_not_after_its_last_message() -> None:
    """After a restart the inbox resumes where its stream stood: a message cancelled before the
    inbox opened (which the default start skips) does not come back."""

    async def run() -> None:
        from kxm.hub.v1 import peer_pb2

        with tempfile.TemporaryDirectory() as d:
            port, data = free_port(), os.path.join(d, "kxm.db")
            hub = HubProcess(port, data)
            try:
                sender = await kxmhub.connect(hub.url, project="p", name="sender", heartbeat=3600)
                reader = await kxmhub.connect(hub.url, project="p", name="reader", heartbeat=3600)

                await send_to_reader(sender, "m1 pending")
                m2 = await send_to_reader(sender, "m2 cancelled before the inbox opened")
                await sender.peer.cancel_message(peer_pb2.CancelMessageRequest(message_id=m2.id), headers=sender._headers())
                inbox = reader.inbox().__aiter__()
                seen = [(await asyncio.wait_for(inbox.__anext__(), 30)).message.content]
                # The hub restarts; the inbox reconnects and reads on.
                hub.kill()
                hub = HubProcess(port, data)
                nxt = asyncio.create_task(asyncio.wait_for(inbox.__anext__(), 30))  # reading makes the inbox reconnect
                await send_to_reader(sender, "m3 live after the reconnect")
                seen.append((await nxt).message.content)
                assert seen == ["m1 pending", "m3 live after the reconnect"]
                await inbox.aclose()
                await sender.close()
                await reader.close()
            finally:
                hub.kill()

    asyncio.run(run())
