"""The library's answers where the hub's answer alone does not settle them (the TypeScript and Go
libraries answer the same): a hub refusal is read from its details before its text is taken for a
TLS failure, await_reply refuses a message this agent did not send, a body over the hub's limit is
never transient, and a lease an acquire's lost answer left behind is taken over by the retry."""

from __future__ import annotations

import asyncio
import secrets

import kxmhub

from conftest import HubEnv

PROJECT = "clients"


async def open_session(hub: HubEnv, name: str) -> kxmhub.Session:
    return await kxmhub.connect(hub.hub_url, project=PROJECT, name=name, token=hub.project_token, heartbeat=3600)


def test_a_hub_refusal_naming_a_corruptmessage_lease_is_not_taken_for_a_tls_failure(hub: HubEnv) -> None:
    """lease_held's message names the lease; HubError.of matches its TLS regex on str(err)
    before it reads the ErrorInfo, so a lease (or agent) whose name holds "CorruptMessage",
    "InvalidMessage", ... turns every refusal into tls_failed (no lease, not lease_held)."""

    async def run() -> None:
        sfx = secrets.token_hex(4)
        async with await open_session(hub, f"holder-{sfx}") as a, await open_session(hub, f"other-{sfx}") as b:
            name = f"dlq/CorruptMessage-replay-{sfx}"
            held = await a.acquire(name, ttl=30)
            try:
                await b.acquire(name, ttl=30)
            except kxmhub.HubError as e:
                assert e.code == "lease_held"
                assert e.lease is not None and e.lease.fencing_token == held.token
            else:
                raise AssertionError("the second acquire was not refused")
            await held.release()

    asyncio.run(run())


def test_await_reply_on_a_message_this_agent_did_not_send_is_forbidden(hub: HubEnv) -> None:
    """TS (reply.ts) and Go (reply.go, replied) refuse with message_forbidden a message the agent
    did not send; Python checks the outcome first, so the recipient gets the message back as if it
    were its own reply."""

    async def run() -> None:
        sfx = secrets.token_hex(4)
        async with await open_session(hub, f"sender-{sfx}") as a, await open_session(hub, f"recipient-{sfx}") as b:
            sent = await a.send(b.agent.name, "please review")
            await b.peer.reply_message(kxmhub_reply(sent.id, "done"), headers=b._headers())
            try:
                got = await asyncio.wait_for(b.await_reply(sent.id), 10)
            except kxmhub.HubError as e:
                assert e.code == "message_forbidden", e
            else:
                raise AssertionError("await_reply returned a message this agent did not send (TS and Go: message_forbidden)")

    asyncio.run(run())


def kxmhub_reply(message_id: str, content: str):
    from kxm.hub.v1 import peer_pb2

    return peer_pb2.ReplyMessageRequest(message_id=message_id, content=content)


def test_payload_too_large_is_not_transient(hub: HubEnv) -> None:
    """A 413 (payload_too_large, Connect resource_exhausted) will fail the same way every time."""

    async def run() -> None:
        sfx = secrets.token_hex(4)
        async with await open_session(hub, f"big-{sfx}") as a, await open_session(hub, f"tgt-{sfx}") as b:
            try:
                await a.send(b.agent.name, "x" * 300_000)
            except kxmhub.HubError as e:
                assert e.code == "payload_too_large"
                assert e.transient is False
            else:
                raise AssertionError("a 300 KB message was accepted")

    asyncio.run(run())



def test_retrying_an_acquire_whose_answer_was_lost_never_renews_an_orphan_forever(hub: HubEnv) -> None:
    """The hub grants the first acquire, its answer is lost; the session's look (GetLease) finds
    the hub unreachable too. The caller retries every 5 s for 2 minutes (12 TTLs): each retry is
    answered 'renewed', refused as lease_held, and has renewed the orphan."""
    from connectrpc.code import Code
    from connectrpc.errors import ConnectError

    async def run() -> None:
        sfx = secrets.token_hex(4)
        async with await open_session(hub, f"builder-{sfx}") as s, await open_session(hub, f"other-{sfx}") as other:
            calls = {"acquire": 0, "get": 0}
            acquire, get = s.leases.acquire_lease, s.leases.get_lease

            async def flaky_acquire(req, *, headers=None, timeout_ms=None):
                calls["acquire"] += 1
                res = await acquire(req, headers=headers, timeout_ms=timeout_ms)
                if calls["acquire"] == 1:
                    raise ConnectError(Code.UNAVAILABLE, "connection reset")
                return res

            async def flaky_get(req, *, headers=None, timeout_ms=None):
                calls["get"] += 1
                if calls["get"] == 1:
                    raise ConnectError(Code.UNAVAILABLE, "connection refused")
                return await get(req, headers=headers, timeout_ms=timeout_ms)

            s.leases.acquire_lease, s.leases.get_lease = flaky_acquire, flaky_get
            name = f"py-orphan-{sfx}"
            try:
                await s.acquire(name, ttl=10)
            except kxmhub.HubError as e:
                assert e.code == "unavailable"
            refused: dict[str, int] = {}
            got = None
            for _ in range(24):
                hub.advance(5_000)
                try:
                    got = await s.acquire(name, ttl=10)
                    break
                except kxmhub.HubError as e:
                    refused[e.code] = refused.get(e.code, 0) + 1
            try:
                await other.acquire(name, ttl=10)
                other_got = "granted"
            except kxmhub.HubError as e:
                other_got = e.code
            assert got is not None or other_got == "granted", f"retries refused {refused}; another agent's acquire: {other_got}"
            if got is not None:
                assert got.token == 1  # the token the lost answer carried
                await got.release()

    asyncio.run(run())



class PartitionableProxy:
    """A TCP proxy in front of the hub: partition() turns the connections open now into black holes
    (bytes dropped both ways, nothing closed); later connections are forwarded as before."""

    def __init__(self, hub_url: str) -> None:
        import urllib.parse

        u = urllib.parse.urlsplit(hub_url)
        self._target = (u.hostname, u.port)
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._dead: set[int] = set()
        self.opened = 0
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _on(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self.opened += 1
        ur, uw = await asyncio.open_connection(*self._target)
        self._pairs.append((cw, uw))

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter, key: int) -> None:
            while data := await r.read(65536):
                if key not in self._dead:
                    w.write(data)
            if key not in self._dead:
                w.close()

        await asyncio.gather(pump(cr, uw, id(cw)), pump(ur, cw, id(cw)), return_exceptions=True)

    def partition(self) -> None:
        for cw, _ in self._pairs:
            self._dead.add(id(cw))

    def close(self) -> None:
        for cw, uw in self._pairs:
            cw.transport.abort()
            uw.transport.abort()
        self._server.close()


def test_a_session_whose_connection_went_silent_is_lost_after_three_unanswered_heartbeats(hub: HubEnv) -> None:
    """Heartbeats every 0.3 s; the connection under the session goes silent (the hub stays
    reachable on a new connection). Each heartbeat waits one interval at most, so three unanswered
    ones lose the session, as in Go and TypeScript, instead of one waiting forever."""

    async def run() -> None:
        proxy = PartitionableProxy(hub.hub_url)
        await proxy.start()
        s = await kxmhub.connect(proxy.url, project=PROJECT, name=f"silent-{secrets.token_hex(4)}", token=hub.project_token, heartbeat=0.3)
        try:
            proxy.partition()
            await asyncio.wait_for(s.lost.wait(), 10)
            assert s.lost.is_set()
        finally:
            proxy.close()
            try:
                await asyncio.wait_for(s.close(), 5)
            except Exception:  # noqa: BLE001 - the connection is gone: closing is best effort here
                pass

    asyncio.run(run())


def test_a_rate_limited_renewal_waits_out_retry_after_ms(hub: HubEnv) -> None:
    """A renewal refused for the rate (rate_limited, retryAfterMs 10 s) is tried again when the
    window ends, not every second before it (each such try is refused too)."""
    from test_library import HubClock, until

    async def run() -> None:
        clock = HubClock(None)  # this process's clock only: the hub's lease runs on real time
        sfx = secrets.token_hex(4)
        async with await kxmhub.connect(hub.hub_url, project=PROJECT, name=f"patient-{sfx}", token=hub.project_token, heartbeat=3600, clock=clock) as s:
            calls = {"renew": 0}
            renew = s.leases.renew_lease

            async def limited_renew(req, *, headers=None, timeout_ms=None):
                calls["renew"] += 1
                if calls["renew"] == 1:
                    raise kxmhub.HubError("rate_limited", "request rate limit exceeded", {"retryAfterMs": "10000"}, transient=True)
                return await renew(req, headers=headers, timeout_ms=timeout_ms)

            s.leases.renew_lease = limited_renew
            lease = await s.acquire(f"py-rate-{sfx}", ttl=30)
            for _ in range(19):  # the renewal at 10 s is refused; until 20 s nothing more is sent
                await until("the keeper asleep", lambda: clock.sleepers >= 2)  # keeper + heartbeat
                clock.advance(1)
            await until("the keeper asleep", lambda: clock.sleepers >= 2)
            assert calls["renew"] == 1, calls
            clock.advance(1)
            await until("the renewal at 20 s", lambda: calls["renew"] == 2)
            await until("the keeper asleep", lambda: clock.sleepers >= 2)
            assert not lease.lost.is_set(), lease.error
            await lease.release()

    asyncio.run(run())


def test_calls_and_inboxes_of_a_closed_session_raise_closed_not_transient(hub: HubEnv) -> None:
    """After close() the session's clients are gone: its calls failed with an AttributeError typed
    as a transient "unavailable" (so callers retried them forever), and an inbox opened on it
    reconnected forever. They raise HubError closed, not transient; and an error that is no
    network failure (a bug) is typed "unknown", not transient, while a timed-out wait of the
    library's own stays a transient "unavailable"."""

    async def run() -> None:
        sfx = secrets.token_hex(4)
        s = await open_session(hub, f"closed-{sfx}")
        await s.close()
        calls = {
            "acquire": lambda: s.acquire(f"py-closed-{sfx}", ttl=10),
            "send": lambda: s.send(s.agent.name, "hello"),
            "check_fence": lambda: s.check_fence(f"py-closed-{sfx}", 1),
            "await_reply": lambda: s.await_reply("msg_x"),
        }
        for what, call in calls.items():
            try:
                await asyncio.wait_for(call(), 10)
            except kxmhub.HubError as e:
                assert (e.code, e.transient) == ("closed", False), f"{what}: {e!r} transient={e.transient}"
            else:
                raise AssertionError(f"{what} on a closed session succeeded")

        async def read() -> None:
            async for _ in s.inbox():
                pass

        try:
            await asyncio.wait_for(read(), 10)
        except kxmhub.HubError as e:
            assert (e.code, e.transient) == ("closed", False), f"inbox: {e!r}"
        else:
            raise AssertionError("the inbox of a closed session ended without an error")

    asyncio.run(run())
    bug = kxmhub.HubError.of(AttributeError("'NoneType' object has no attribute 'acquire_lease'"))
    assert (bug.code, bug.transient) == ("unknown", False), bug
    timed_out = kxmhub.HubError.of(TimeoutError())
    assert (timed_out.code, timed_out.transient) == ("unavailable", True), timed_out


def test_a_call_cut_as_canceled_from_the_hubs_side_is_transient_and_the_inbox_reads_on(hub: HubEnv) -> None:
    """The runtime reports a stream the hub's end reset with CANCEL (a hub killed under the call)
    as ConnectError(CANCELED), as it reports the caller's own cancel: a send so cut is
    "unavailable" and transient, the inbox reads on, and a cancel of the caller's task stays
    "cancelled". Before, all of them were "cancelled", and the inbox ended."""
    from connectrpc.code import Code
    from connectrpc.errors import ConnectError

    async def run() -> None:
        sfx = secrets.token_hex(4)
        async with await open_session(hub, f"sender-{sfx}") as sender, await open_session(hub, f"reader-{sfx}") as reader:
            send, subscribe = sender.peer.send_message, reader.peer.subscribe
            cuts = {"send": 0, "subscribe": 0}

            async def cut_send(req, *, headers=None, timeout_ms=None):
                cuts["send"] += 1
                if cuts["send"] == 1:
                    raise ConnectError(Code.CANCELED, "stream reset by the peer: CANCEL")
                return await send(req, headers=headers, timeout_ms=timeout_ms)

            def cut_subscribe(req, *, headers=None, timeout_ms=None):
                cuts["subscribe"] += 1
                if cuts["subscribe"] == 1:
                    async def cut():
                        raise ConnectError(Code.CANCELED, "stream reset by the peer: CANCEL")
                        yield  # an async generator, as the runtime's stream is
                    return cut()
                return subscribe(req, headers=headers, timeout_ms=timeout_ms)

            sender.peer.send_message, reader.peer.subscribe = cut_send, cut_subscribe
            try:
                await sender.send(f"reader-{sfx}", "cut")
                raise AssertionError("the cut send did not fail")
            except kxmhub.HubError as e:
                assert (e.code, e.transient) == ("unavailable", True), (e.code, e.transient)
            await sender.send(f"reader-{sfx}", "m1")
            event = await asyncio.wait_for(anext(aiter(reader.inbox())), 30)
            assert (cuts["subscribe"], event.message.content) == (2, "m1")

            # The caller's own cancel, met as the runtime's CANCELED inside the cancelled task.
            async def cancelled_task() -> kxmhub.HubError:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    return kxmhub.HubError.of(ConnectError(Code.CANCELED, "cancelled"))
                raise AssertionError("not cancelled")

            task = asyncio.create_task(cancelled_task())
            await asyncio.sleep(0)
            task.cancel()
            own = await task
            assert (own.code, own.transient) == ("cancelled", False), (own.code, own.transient)

    asyncio.run(run())
