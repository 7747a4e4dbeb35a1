"""The Python library's behaviour (clients/python/kxmhub) against the hub.

The library's clock is the hub's: HubClock moves the hub clock through the control port and wakes
the library's sleepers with it, so renewals and lapses happen when the test moves time.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets

import kxmhub
import pytest

from conftest import HubEnv, count_subscribes

PROJECT = "clients"


class HubClock:
    def __init__(self, hub: HubEnv | None) -> None:
        self._hub = hub  # None: a clock of this process only (timers running late against the hub's)
        self._t = 1_000.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._t

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self._t + seconds, fut)
        self._sleepers.append(entry)
        try:
            await fut
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    @property
    def sleepers(self) -> int:
        return len(self._sleepers)

    def advance(self, seconds: float) -> None:
        if self._hub is not None:
            self._hub.advance(round(seconds * 1000))
        self._t += seconds
        for entry in [e for e in self._sleepers if e[0] <= self._t]:
            self._sleepers.remove(entry)
            if not entry[1].done():
                entry[1].set_result(None)


async def until(what: str, cond, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def open_session(hub: HubEnv, clock: HubClock, name: str) -> kxmhub.Session:
    return await kxmhub.connect(hub.hub_url, project=PROJECT, name=f"{name}-{secrets.token_hex(4)}", token=hub.project_token, heartbeat=3600, clock=clock)


def test_renewals_keep_a_lease_through_three_ttls(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        async with await open_session(hub, clock, "keeper") as s:
            lease = await s.acquire(f"py-keep-{secrets.token_hex(4)}", ttl=6)
            for _ in range(9):
                await until("the keeper asleep", lambda: clock.sleepers >= 2)  # keeper + heartbeat
                clock.advance(2)
            await until("the keeper asleep", lambda: clock.sleepers >= 2)
            assert not lease.lost.is_set(), lease.error
            got = await s.leases.get_lease(kxmhub_get(lease.name), headers=s._headers())
            assert got.lease.fencing_token == lease.token and not got.expired
            await lease.release()

    asyncio.run(run())


def kxmhub_get(name: str):
    from kxm.hub.v1 import lease_pb2

    return lease_pb2.GetLeaseRequest(name=name)


def test_a_superseded_holder_is_told_it_lost_the_lease(hub: HubEnv) -> None:
    async def run() -> None:
        hub_clock, late = HubClock(hub), HubClock(None)
        async with await open_session(hub, late, "alpha") as a, await open_session(hub, hub_clock, "beta") as b:
            name = f"py-super-{secrets.token_hex(4)}"
            held = await a.acquire(name, ttl=5)
            hub_clock.advance(5.001)
            taken = await b.acquire(name, ttl=5)
            assert taken.token == held.token + 1
            late.advance(5 / 3)  # the keeper renews: the hub refuses
            await asyncio.wait_for(held.lost.wait(), 10)
            assert isinstance(held.error, kxmhub.HubError)
            assert held.error.code == "lease_superseded"
            assert held.error.lease is not None and held.error.lease.fencing_token == taken.token
            with pytest.raises(kxmhub.HubError):
                held.check()

    asyncio.run(run())


def test_blocking_acquire_hands_over_to_five_waiters_in_order_with_one_call_each(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        name = f"py-fifo-{secrets.token_hex(4)}"
        async with await open_session(hub, clock, "holder") as holder:
            first = await holder.acquire(name, ttl=30)
            base = hub.sleepers()
            sessions, waits, calls = [], [], []
            for i in range(5):
                s = await open_session(hub, clock, f"waiter{i}")
                sessions.append(s)
                original = s.leases.acquire_lease

                async def counted(req, *, headers=None, timeout_ms=None, _orig=original):
                    calls.append(req.name)
                    return await _orig(req, headers=headers, timeout_ms=timeout_ms)

                s.leases.acquire_lease = counted
                waits.append(asyncio.create_task(s.acquire(name, ttl=30, wait=120)))
                await until("the waiter queued", lambda i=i: hub.sleepers() >= base + i + 1)
            await first.release()
            token = first.token
            for i in range(5):
                got = await asyncio.wait_for(waits[i], 10)
                assert (got.lease.holder_agent_name, got.token) == (sessions[i].agent.name, token + 1)
                token = got.token
                await got.release()
            assert calls == [name] * 5  # no polling
            for s in sessions:
                await s.close()

    asyncio.run(run())


def test_the_session_is_lost_when_the_hub_refuses_its_heartbeat(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        s = await kxmhub.connect(hub.hub_url, project=PROJECT, name=f"ghost-{secrets.token_hex(4)}", token=hub.project_token, heartbeat=10, clock=clock)
        from kxm.hub.v1 import presence_pb2

        await s.presence.unregister_agent(presence_pb2.UnregisterAgentRequest(agent_id=s.agent.id), headers=s._headers())  # rotates the key away
        await until("the heartbeat asleep", lambda: clock.sleepers >= 1)
        clock.advance(10)
        await asyncio.wait_for(s.lost.wait(), 10)
        assert s.error is not None and s.error.code == "invalid_agent_identity"
        await s.close()

    asyncio.run(run())


def test_typed_errors_carry_the_code_and_the_lease(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        async with await open_session(hub, clock, "alpha") as a, await open_session(hub, clock, "beta") as b:
            name = f"py-held-{secrets.token_hex(4)}"
            held = await a.acquire(name)
            with pytest.raises(kxmhub.HubError) as refused:
                await b.acquire(name)
            err = refused.value
            assert err.code == "lease_held" and not err.transient
            assert err.metadata["holderAgentName"] == a.agent.name
            assert err.lease is not None and err.lease.fencing_token == held.token

    asyncio.run(run())


def test_inbox_acks_replies_and_ends_on_cancel_without_reconnecting(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        async with await open_session(hub, clock, "sender") as sender, await open_session(hub, clock, "reader") as reader:
            for i in range(3):
                await sender.send(reader.agent.id, f"note {i}")
            got: list[str] = []
            subscribes = count_subscribes(reader)

            async def consume() -> None:
                async for ev in reader.inbox():
                    await ev.ack()
                    await ev.reply(f"ok {ev.message.content}")
                    got.append(ev.message.content)

            task = asyncio.create_task(consume())
            await until("three messages", lambda: len(got) == 3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert got == ["note 0", "note 1", "note 2"]
            assert subscribes == [1]  # the cancel ended it: no reconnect

    asyncio.run(run())


def test_a_waiter_granted_after_more_than_two_ttls_keeps_the_lease_renewed(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        name = f"py-longwait-{secrets.token_hex(4)}"
        async with await open_session(hub, clock, "holder") as holder, await open_session(hub, clock, "waiter") as waiter:
            first = await holder.acquire(name, ttl=6)
            base = hub.sleepers()
            waiting = asyncio.create_task(waiter.acquire(name, ttl=6, wait=60))
            await until("the waiter queued", lambda: hub.sleepers() >= base + 1)
            # The holder keeps it 16 s of hub time (its keeper renews it), the waiter stays queued.
            for _ in range(8):
                await until("the holder's keeper asleep", lambda: clock.sleepers >= 3)  # keeper + 2 heartbeats
                clock.advance(2)
            await until("the holder's keeper asleep", lambda: clock.sleepers >= 3)
            assert not waiting.done() and not first.lost.is_set(), first.error
            await first.release()
            got = await asyncio.wait_for(waiting, 10)
            assert got.token == first.token + 1
            # Granted after 16 s with a 6 s TTL: counted from the grant, not from the send.
            await until("the waiter's keeper asleep (or the lease lost)", lambda: clock.sleepers >= 3 or got.lost.is_set())
            assert not got.lost.is_set(), got.error
            for _ in range(9):  # three more TTLs
                await until("the waiter's keeper asleep", lambda: clock.sleepers >= 3)
                clock.advance(2)
            await until("the waiter's keeper asleep", lambda: clock.sleepers >= 3)
            assert not got.lost.is_set(), got.error
            now = await waiter.leases.get_lease(kxmhub_get(name), headers=waiter._headers())
            assert now.lease.fencing_token == got.token and now.lease.holder_agent_id == waiter.agent.id and not now.expired
            await got.release()

    asyncio.run(run())


def count_reads(session) -> list[int]:
    """Counts the GetMessage calls a session makes (completed ones): the returned list's one item."""
    count = [0]
    original = session.peer.get_message

    async def counted(req, *, headers=None, timeout_ms=None):
        res = await original(req, headers=headers, timeout_ms=timeout_ms)
        count[0] += 1
        return res

    session.peer.get_message = counted
    return count


async def answer_one(reader: kxmhub.Session, text: str) -> None:
    """The reader acks and replies to the first message of its inbox."""
    async with contextlib.aclosing(reader.inbox()) as inbox:
        async for ev in inbox:
            await ev.ack()
            await ev.reply(text)
            return


def test_await_reply_returns_a_reply_that_came_before_the_call(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        async with await open_session(hub, clock, "sender") as sender, await open_session(hub, clock, "reader") as reader:
            sent = await sender.send(reader.agent.id, "review this")
            await answer_one(reader, "looks good")
            subscribes, reads = count_subscribes(sender), count_reads(sender)
            got = await asyncio.wait_for(sender.await_reply(sent.id), 10)
            assert got.id == sent.id and got.reply.content == "looks good"
            assert subscribes == [1] and reads == [1]

    asyncio.run(run())


def test_await_reply_waits_for_a_reply_that_comes_after_the_call(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        async with await open_session(hub, clock, "sender") as sender, await open_session(hub, clock, "reader") as reader:
            sent = await sender.send(reader.agent.id, "review this")
            subscribes, reads = count_subscribes(sender), count_reads(sender)
            waiting = asyncio.create_task(sender.await_reply(sent.id))
            await until("the message read once, not yet replied", lambda: reads[0] == 1)
            assert not waiting.done()
            await answer_one(reader, "ship it")
            got = await asyncio.wait_for(waiting, 10)
            assert got.id == sent.id and got.reply.content == "ship it"
            assert subscribes == [1] and reads == [1]  # the reply came on the stream: no polling

    asyncio.run(run())


def test_await_reply_reads_again_after_a_dropped_stream(hub: HubEnv) -> None:
    async def run() -> None:
        from connectrpc.code import Code
        from connectrpc.errors import ConnectError

        clock = HubClock(hub)
        async with await open_session(hub, clock, "sender") as sender, await open_session(hub, clock, "reader") as reader:
            sent = await sender.send(reader.agent.id, "review this")
            reads, subscribes, original = count_reads(sender), [0], sender.peer.subscribe

            def subscribe(req, *, headers=None, timeout_ms=None):
                subscribes[0] += 1
                frames = original(req, headers=headers, timeout_ms=timeout_ms)
                if subscribes[0] > 1:
                    return frames

                async def dropped_after_ready():
                    async with contextlib.aclosing(frames):
                        async for frame in frames:
                            yield frame
                            raise ConnectError(Code.UNAVAILABLE, "connection dropped")

                return dropped_after_ready()

            sender.peer.subscribe = subscribe
            waiting = asyncio.create_task(sender.await_reply(sent.id))
            await until("the back-off after the drop", lambda: reads[0] == 1 and clock.sleepers >= 3)  # + 2 heartbeats
            # The reply comes while no stream is open: only the read after reconnecting sees it.
            await answer_one(reader, "seen it")
            clock.advance(0.1)
            got = await asyncio.wait_for(waiting, 10)
            assert got.reply.content == "seen it"
            assert subscribes == [2] and reads == [2]

    asyncio.run(run())


def test_await_reply_ends_without_a_reply_and_closes_its_stream_on_cancel(hub: HubEnv) -> None:
    async def run() -> None:
        from kxm.hub.v1 import peer_pb2

        clock = HubClock(hub)
        async with await open_session(hub, clock, "sender") as sender, await open_session(hub, clock, "reader") as reader:
            # Cancelled before the call: the read says so.
            cancelled = await sender.send(reader.agent.id, "never mind")
            await sender.peer.cancel_message(peer_pb2.CancelMessageRequest(message_id=cancelled.id), headers=sender._headers())
            with pytest.raises(kxmhub.HubError) as ended:
                await asyncio.wait_for(sender.await_reply(cancelled.id), 10)
            assert ended.value.code == "message_ended" and ended.value.metadata["status"] == "cancelled"
            # Expired while waiting: the expired event ends the wait.
            req = peer_pb2.SendMessageRequest(target=reader.agent.id, content="quick one", ttl_ms=1000)
            short = (await sender.peer.send_message(req, headers=sender._headers())).message
            reads = count_reads(sender)
            waiting = asyncio.create_task(sender.await_reply(short.id))
            await until("the message read", lambda: reads[0] == 1)
            clock.advance(2)
            await open_a_stream(reader)  # a stream opening expires what is due
            with pytest.raises(kxmhub.HubError) as ended:
                await asyncio.wait_for(waiting, 10)
            assert ended.value.code == "message_ended" and ended.value.metadata["status"] == "expired"
            # Cancelling the call ends it, its stream closed, never reconnected.
            pending = await sender.send(reader.agent.id, "still open")
            base, subscribes, reads = hub.sleepers(), count_subscribes(sender), count_reads(sender)
            waiting = asyncio.create_task(sender.await_reply(pending.id))
            await until("the message read", lambda: reads[0] == 1)
            await until("the stream asleep on the hub", lambda: hub.sleepers() >= base + 1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await until("the stream closed on the hub", lambda: hub.sleepers() <= base)
            assert subscribes == [1]

    asyncio.run(run())


async def open_a_stream(reader: kxmhub.Session) -> None:
    """Opens (and closes) one stream of the reader's: the hub expires due messages when a stream opens."""
    from kxm.hub.v1 import peer_pb2

    frames = reader.peer.subscribe(peer_pb2.SubscribeRequest(), headers=reader._headers())
    async for frame in frames:
        assert frame.WhichOneof("event") == "ready"
        break
    await frames.aclose()


def test_takeover_replaces_an_online_instance_at_once(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        name, resource = f"restarter-{secrets.token_hex(4)}", f"py-takeover-{secrets.token_hex(4)}"
        connect = lambda **kw: kxmhub.connect(hub.hub_url, project=PROJECT, name=name, token=hub.project_token, heartbeat=3600, clock=clock, **kw)  # noqa: E731
        peer = await open_session(hub, clock, "peer")
        old = await connect()
        held = await old.acquire(resource, ttl=30)
        sent = await old.send(peer.agent.id, "still there?")
        reads = count_reads(old)
        replying = asyncio.create_task(old.await_reply(sent.id))  # a stream of the old instance
        await until("the old instance's stream open", lambda: reads[0] == 1)
        await until("the keeper asleep", lambda: clock.sleepers >= 3)  # keeper + 2 heartbeats
        with pytest.raises(kxmhub.HubError) as refused:
            await connect()
        assert refused.value.code == "duplicate_agent_name"
        new = await connect(takeover=True)
        try:
            assert new.taken_over and resource in new.released_leases
            assert new.agent.id == old.agent.id
            with pytest.raises(kxmhub.HubError) as ended:
                await asyncio.wait_for(replying, 10)
            assert ended.value.code == "invalid_agent_identity"
            await until("the keepers asleep", lambda: clock.sleepers >= 4)  # keeper + 3 heartbeats
            with pytest.raises(kxmhub.HubError) as stale:
                await old.acquire(f"{resource}-other", ttl=30)
            assert stale.value.code == "invalid_agent_identity"
            clock.advance(10)  # the old keeper renews: refused
            await asyncio.wait_for(held.lost.wait(), 10)
            mine = await new.acquire(resource, ttl=30)
            assert mine.token > held.token
            await mine.release()
            again = await new.acquire(resource, ttl=30)
            assert again.token > mine.token > held.token
        finally:
            await old.close()
            await new.close()
            await peer.close()

    asyncio.run(run())


def test_ttl_and_wait_errors_speak_in_seconds(hub: HubEnv) -> None:
    async def run() -> None:
        clock = HubClock(hub)
        async with await open_session(hub, clock, "units") as s:
            calls: list[str] = []
            original = s.leases.acquire_lease

            async def counted(req, *, headers=None, timeout_ms=None):
                calls.append(req.name)
                return await original(req, headers=headers, timeout_ms=timeout_ms)

            s.leases.acquire_lease = counted
            name = f"py-units-{secrets.token_hex(4)}"
            for kw, field, text in (
                ({"ttl": 2}, "ttl", "ttl must be between 5 and 600 seconds"),
                ({"ttl": 601}, "ttl", "ttl must be between 5 and 600 seconds"),
                ({"ttl": 10, "wait": 900}, "wait", "wait must be between 0 and 600 seconds"),
                ({"ttl": 10, "wait": -1}, "wait", "wait must be between 0 and 600 seconds"),
            ):
                with pytest.raises(kxmhub.HubError) as refused:
                    await s.acquire(name, **kw)
                err = refused.value
                assert err.code == "protocol_error" and not err.transient
                assert text in str(err) and "ttlMs" not in str(err) and "waitMs" not in str(err)
                assert err.metadata == {"field": field}
            assert calls == []  # refused before anything was sent
            lease = await s.acquire(name, ttl=5, wait=600)
            assert lease.token >= 1
            await lease.release()

    asyncio.run(run())


def test_check_fence_says_what_a_token_is(hub: HubEnv) -> None:
    """A resource checks the token a writer presents: the session's own check, and a resource's
    client that carries the project's token alone and names the project."""
    from kxm.hub.v1 import lease_pb2
    from kxm.hub.v1.lease_connect import LeaseServiceClient

    async def run() -> None:
        clock = HubClock(hub)
        async with await open_session(hub, clock, "fenced") as s:
            name = f"py-fence-{secrets.token_hex(4)}"
            held = await s.acquire(name, ttl=6)
            own = await s.check_fence(name, held.token)
            assert own.valid and own.reason == "current"
            assert own.lease is not None and own.lease.fencing_token == held.token and own.lease.holder_agent_name == s.agent.name
            resource = LeaseServiceClient(hub.hub_url)
            bearer = {"authorization": f"Bearer {hub.project_token}"}

            async def check(token: int) -> kxmhub.FenceCheck:
                return await kxmhub.check_fence(resource, name, token, project=PROJECT, headers=bearer)

            assert await check(held.token) == kxmhub.FenceCheck(True, "current", own.lease)
            assert await check(held.token + 1) == kxmhub.FenceCheck(False, "unknown")
            await held.release()
            assert await check(held.token) == kxmhub.FenceCheck(False, "released")
            # Taken again through the generated client, so that no renewal keeps it past its TTL.
            again = (await s.leases.acquire_lease(lease_pb2.AcquireLeaseRequest(name=name, ttl_ms=6000), headers=s._headers())).lease
            superseded = await check(held.token)
            assert (superseded.valid, superseded.reason, superseded.lease.fencing_token) == (False, "superseded", again.fencing_token)
            clock.advance(6)
            assert (await check(again.fencing_token)).reason == "expired"
            with pytest.raises(kxmhub.HubError) as refused:
                await s.check_fence(name, 0)
            assert refused.value.code == "protocol_error"
            with pytest.raises(kxmhub.HubError) as typed:
                await s.check_fence(name, "7")  # type: ignore[arg-type]
            assert typed.value.code == "protocol_error" and typed.value.metadata == {"field": "fencingToken"}

    asyncio.run(run())


def test_a_second_acquire_of_a_held_lease_is_refused(hub: HubEnv) -> None:
    """An agent holds a lease once: a second acquire of it (the hub renews its own lease) is
    refused with lease_held, and the first holder keeps it."""

    async def run() -> None:
        clock = HubClock(hub)
        async with await open_session(hub, clock, "twice") as s:
            name = f"py-twice-{secrets.token_hex(4)}"
            held = await s.acquire(name, ttl=6)
            for wait in (0, 5):
                with pytest.raises(kxmhub.HubError) as refused:
                    await s.acquire(name, ttl=6, wait=wait)
                assert refused.value.code == "lease_held" and refused.value.lease is not None
                assert refused.value.lease.fencing_token == held.token
            assert not held.lost.is_set()
            await held.release()

    asyncio.run(run())


def test_a_lease_granted_to_an_acquire_whose_answer_never_came_is_released(hub: HubEnv) -> None:
    """An acquire cancelled while its grant was on its way would leave the lease held by the agent
    until its TTL: the library looks the lease up and releases it, and the session's next acquire
    of the name is a grant of its own, not lease_held."""

    async def run() -> None:
        clock = HubClock(hub)
        name = f"py-unanswered-{secrets.token_hex(4)}"
        async with await open_session(hub, clock, "holder") as holder, await open_session(hub, clock, "waiter") as waiter:
            first = await holder.acquire(name, ttl=30)
            # The hub's answer to the first acquire reaches this side of the wire and no further: the
            # call ends only when its caller gives up.
            answered = asyncio.Event()
            original = waiter.leases.acquire_lease

            async def lose(req, *, headers=None, timeout_ms=None):
                res = await original(req, headers=headers, timeout_ms=timeout_ms)
                if answered.is_set():
                    return res
                answered.set()
                await asyncio.Event().wait()

            waiter.leases.acquire_lease = lose
            base = hub.sleepers()
            waiting = asyncio.create_task(waiter.acquire(name, ttl=30, wait=120))
            await until("the waiter queued", lambda: hub.sleepers() >= base + 1)
            await first.release()
            await asyncio.wait_for(answered.wait(), 10)
            now = await holder.leases.get_lease(kxmhub_get(name), headers=holder._headers())
            assert now.lease.holder_agent_id == waiter.agent.id and now.lease.fencing_token == first.token + 1
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            again = await waiter.acquire(name, ttl=30)
            assert again.token == first.token + 2
            await again.release()
            last = await holder.acquire(name, ttl=30)
            assert last.token == first.token + 3
            await last.release()

    asyncio.run(run())


def test_an_unanswered_acquire_leaves_no_orphan_when_another_acquire_of_the_name_was_in_flight(hub: HubEnv) -> None:
    """The look after an acquire whose answer was lost waits for another acquire of the name in
    flight to end, instead of being skipped. The first acquire (A) waits in the queue and is
    granted, its answer lost, and is cancelled while a second (B, no wait) is on the wire; B ends
    refused (lease_held, asked before the grant). The look then releases A's grant, where skipping
    it left the lease held by the agent with nobody renewing or releasing it until its TTL."""

    async def run() -> None:
        clock = HubClock(None)
        name = f"py-orphan-flight-{secrets.token_hex(4)}"
        async with await open_session(hub, clock, "other") as other, await open_session(hub, clock, "me") as me:
            held = await other.acquire(name, ttl=30)
            original = me.leases.acquire_lease
            calls = [0]
            a_answered, b_answered, b_goes = asyncio.Event(), asyncio.Event(), asyncio.Event()

            async def gated(req, *, headers=None, timeout_ms=None):
                calls[0] += 1
                n = calls[0]
                try:
                    res = await original(req, headers=headers, timeout_ms=timeout_ms)
                finally:
                    if n == 2:  # B's answer (lease_held) is held back
                        b_answered.set()
                        await b_goes.wait()
                if n == 1:  # A's answer (the grant) is lost
                    a_answered.set()
                    await asyncio.Event().wait()
                return res

            me.leases.acquire_lease = gated
            base = hub.sleepers()
            a = asyncio.create_task(me.acquire(name, ttl=30, wait=60))
            await until("A queued", lambda: hub.sleepers() >= base + 1)
            b = asyncio.create_task(me.acquire(name, ttl=30))
            await asyncio.wait_for(b_answered.wait(), 10)
            await held.release()
            await asyncio.wait_for(a_answered.wait(), 10)
            a.cancel()
            with pytest.raises(asyncio.CancelledError):
                await a
            b_goes.set()
            with pytest.raises(kxmhub.HubError) as refused:
                await b
            assert refused.value.code == "lease_held"
            # Another agent gets the lease once the look has released A's grant.
            got = None
            deadline = asyncio.get_running_loop().time() + 10
            while got is None:
                try:
                    got = await other.acquire(name, ttl=30)
                except kxmhub.HubError as e:
                    assert e.code == "lease_held", e
                    if asyncio.get_running_loop().time() > deadline:
                        pytest.fail("A's grant is still held by the agent with no call of its session holding it (an orphan until its TTL)")
                    await asyncio.sleep(0.005)
            assert got.token == held.token + 2
            await got.release()

    asyncio.run(run())


def test_an_acquire_that_waited_for_a_look_counts_its_ttl_from_its_send(hub: HubEnv) -> None:
    """An acquire of a name whose look (after an unanswered acquire) is under way waits for it,
    then sends: its lease counts from that send, as in TypeScript and Go, not from before the
    wait. Counted from before a 9 s look, a 10 s lease was lost (lease_unconfirmed) as granted."""

    async def run() -> None:
        clock = HubClock(hub)
        name = f"py-look-ttl-{secrets.token_hex(4)}"
        async with await open_session(hub, clock, "looker") as s:
            original_acquire, original_get = s.leases.acquire_lease, s.leases.get_lease
            sent, look_goes = asyncio.Event(), asyncio.Event()

            async def first_unanswered(req, *, headers=None, timeout_ms=None):
                if not sent.is_set():
                    sent.set()
                    await asyncio.Event().wait()  # the first acquire's answer never comes
                return await original_acquire(req, headers=headers, timeout_ms=timeout_ms)

            async def slow_look(req, *, headers=None, timeout_ms=None):
                await look_goes.wait()
                return await original_get(req, headers=headers, timeout_ms=timeout_ms)

            s.leases.acquire_lease, s.leases.get_lease = first_unanswered, slow_look
            first = asyncio.create_task(s.acquire(name, ttl=10))
            await asyncio.wait_for(sent.wait(), 10)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            second = asyncio.create_task(s.acquire(name, ttl=10))
            await asyncio.sleep(0)  # the second acquire runs up to its wait for the look
            base = clock.sleepers
            clock.advance(9)  # the look takes 9 s
            look_goes.set()
            lease = await asyncio.wait_for(second, 10)
            await until("the keeper asleep", lambda: clock.sleepers >= base + 1 or lease.lost.is_set())
            assert not lease.lost.is_set(), f"a lease granted just now was lost at once: {lease.error!r}"
            await lease.release()

    asyncio.run(run())


def test_close_while_another_task_reads_the_inbox_ends_that_read_and_unregisters(hub: HubEnv) -> None:
    """The usual agent reads its inbox in a task of its own and closes the session from another.
    close() cannot aclose() an inbox generator that is running (RuntimeError), and skipped the rest
    of closing when it tried: it interrupts the reading task's wait instead, whose inbox raises
    HubError closed (the task not left cancelled), and goes on to unregister the agent."""

    async def run() -> None:
        clock = HubClock(None)
        s = await open_session(hub, clock, "reader")
        subscribes = count_subscribes(s)

        async def read() -> str:
            try:
                async for _ in s.inbox():
                    pass
            except kxmhub.HubError as e:
                await asyncio.sleep(0)  # the task goes on: not left cancelled
                return f"{e.code} transient={e.transient}"
            return "ended"

        reader = asyncio.create_task(read())
        await until("the reader waits on its stream", lambda: subscribes[0] == 1)
        await asyncio.wait_for(s.close(), 10)
        assert await asyncio.wait_for(reader, 10) == "closed transient=False"
        assert s.error is not None and s.error.code == "closed"
        async with await open_session(hub, clock, "observer") as observer:
            from kxm.hub.v1 import presence_pb2

            listed = await observer.presence.list_agents(presence_pb2.ListAgentsRequest(), headers=observer._headers())
            assert s.agent.id not in [a.id for a in listed.agents], "the closed session's agent is still online"

    asyncio.run(run())


def test_a_lease_is_lost_with_its_session_when_the_agent_is_taken_over(hub: HubEnv) -> None:
    """When the hub refuses the session's agent for good (taken over), what it holds is lost with
    it at the next heartbeat, not at the lease's next renewal."""

    async def run() -> None:
        clock = HubClock(hub)
        name = f"replaced-{secrets.token_hex(4)}"
        connect = lambda **kw: kxmhub.connect(hub.hub_url, project=PROJECT, name=name, token=hub.project_token, clock=clock, **kw)  # noqa: E731
        old = await connect(heartbeat=10)
        held = await old.acquire(f"py-replaced-{secrets.token_hex(4)}", ttl=300)  # renewed every 100 s
        await until("the keeper and the heartbeat asleep", lambda: clock.sleepers >= 2)
        new = await connect(heartbeat=3600, takeover=True)
        try:
            clock.advance(10)  # the old heartbeat: refused
            await asyncio.wait_for(held.lost.wait(), 10)
            assert held.error is not None and held.error.code == "invalid_agent_identity"
            assert old.error is not None and old.error.code == "invalid_agent_identity"
        finally:
            await old.close()
            await new.close()

    asyncio.run(run())


def test_back_off_pauses_are_jittered_between_half_and_all_of_the_pause() -> None:
    """The inbox's and await_reply's pauses before a stream is opened again: half of the pause and
    up to the other half at random, so that the clients a hub restart cut off come back spread
    out, not in step."""
    from kxmhub._clock import jittered

    assert jittered(0.1, lambda: 0.0) == 0.05
    assert jittered(5.0, lambda: 1.0) == 5.0
    pauses = [jittered(1.0) for _ in range(200)]
    assert 0.5 <= min(pauses) and max(pauses) <= 1.0
    assert len({min(9, int((p - 0.5) / 0.05)) for p in pauses}) == 10
