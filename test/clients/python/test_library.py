"""The Python library's behaviour (gen/python/kxmhub) against the hub.

The library's clock is the hub's: HubClock moves the hub clock through the control port and wakes
the library's sleepers with it, so renewals and lapses happen when the test moves time.
"""

from __future__ import annotations

import asyncio
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
