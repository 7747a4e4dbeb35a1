from __future__ import annotations

import asyncio
import socket
import urllib.parse
import weakref
from collections.abc import AsyncGenerator, Awaitable
from typing import TypeVar

from connectrpc.protocol import ProtocolType
from kxm.hub.v1 import lease_pb2, peer_pb2, presence_pb2
from kxm.hub.v1.lease_connect import LeaseServiceClient
from kxm.hub.v1.peer_connect import PeerServiceClient
from kxm.hub.v1.presence_connect import PresenceServiceClient
from pyqwest import Client, HTTPTransport

from ._clock import Clock, MonotonicClock
from ._errors import HubError
from ._fence import FenceCheck, check_fence
from ._inbox import InboxEvent, inbox_events
from ._lease import TTL_RANGE, WAIT_RANGE, Lease, millis
from ._reply import reply_to
from ._tls import PathLike, diagnose
from ._tls import transport as tls_transport

# The codes of a call that ended without the hub's answer (HubError.of): it may have been carried out.
_UNANSWERED = frozenset({"cancelled", "unavailable", "unknown"})
# How long the look after such an acquire may take (Session._settle_unanswered).
_SETTLE_TIMEOUT = 10.0

T = TypeVar("T")


class Session:
    """An agent's session: registered (or resumed) by `connect`, its credentials on every call, a
    heartbeat while it lives, unregistered by `close` (or leaving `async with`). `lost` is set when
    the hub refuses the agent (its key replaced by a takeover included) or three heartbeats in a
    row fail; `error` says why. `taken_over` says whether `connect(takeover=True)` replaced an
    instance still online, and `released_leases` names the leases that instance held.
    """

    def __init__(self, url: str, token: str | None, clock: Clock, http: Client, transport: HTTPTransport | None, protocol: ProtocolType) -> None:
        kw = {"protocol": protocol, "http_client": http}
        self.presence = PresenceServiceClient(url, **kw)
        self.leases = LeaseServiceClient(url, **kw)
        self.peer = PeerServiceClient(url, **kw)
        self.clock = clock
        self.agent: presence_pb2.Agent | None = None
        self.lost = asyncio.Event()
        self.error: HubError | None = None
        self.taken_over = False
        self.released_leases: list[str] = []
        self._token = token
        self._key = ""
        self._transport = transport
        self._held: set[Lease] = set()
        # Acquires in flight, and the looks after acquires that got no answer, by lease name.
        self._acquiring: dict[str, int] = {}
        self._unsettled: dict[str, asyncio.Task[None]] = {}
        # The leases whose look waits for the acquires of the name in flight to end.
        self._look_later: set[str] = set()
        self._inboxes: weakref.WeakSet[AsyncGenerator[InboxEvent, None]] = weakref.WeakSet()
        # The tasks waiting inside an inbox now (on its stream or its back-off), and those of them
        # close() interrupted: their inbox raises the session's `closed` error (see _interruptible).
        self._readers: set[asyncio.Task[object]] = set()
        self._interrupted: set[asyncio.Task[object]] = set()
        self._closed = False
        # Set by close() before it waits for the looks: no new one starts after.
        self._no_looks = False
        self._beats: asyncio.Task[None] | None = None

    def _headers(self) -> dict[str, str]:
        h = {"authorization": f"Bearer {self._token}"} if self._token else {}
        if self.agent is not None:
            h["x-kxm-agent-id"] = self.agent.id
            h["x-kxm-agent-key"] = self._key
        return h

    def _lose(self, err: HubError) -> None:
        if self.error is None:
            self.error = err
            self.lost.set()

    def _check_open(self) -> None:
        """Raises the session's `closed` error (not transient) once close() has begun: its clients
        are gone, and trying again cannot succeed."""
        if self._closed:
            raise HubError("closed", "the session was closed")

    async def _interruptible(self, awaitable: Awaitable[T]) -> T:
        """Awaits what an inbox waits for (its stream's next frame, its back-off) such that close()
        can end the wait: it cancels the task, and the wait raises the session's `closed` error
        instead of the cancellation (a cancellation of the task's own stays one)."""
        task = asyncio.current_task()
        assert task is not None
        self._readers.add(task)
        try:
            got = await awaitable
        except (Exception, asyncio.CancelledError) as e:
            if self._interrupted_by_close(task):
                raise HubError("closed", "the session was closed") from e
            raise
        finally:
            self._readers.discard(task)
        if self._interrupted_by_close(task):  # the cancellation came after the awaitable had ended
            raise HubError("closed", "the session was closed")
        return got

    def _interrupted_by_close(self, task: asyncio.Task[object]) -> bool:
        """Whether close() interrupted `task`, and no one else cancelled it too."""
        if task not in self._interrupted:
            return False
        self._interrupted.discard(task)
        return task.uncancel() == 0

    async def acquire(self, name: str, ttl: float = 30.0, wait: float = 0.0) -> Lease:
        """Acquires the lease (waiting in the hub's queue up to `wait` seconds) and keeps it renewed.
        `ttl` is 5..600 seconds, `wait` 0..600: outside, HubError protocol_error before anything
        is sent (`metadata["field"]` is "ttl" or "wait"). Raises HubError (lease_held, with the
        holder's lease). Cancelling the call leaves the queue; a grant that crossed the cancellation on
        the wire is looked up and released by the session."""
        ttl_ms, wait_ms = millis("ttl", ttl, *TTL_RANGE), millis("wait", wait, *WAIT_RANGE)
        self._check_open()
        req = lease_pb2.AcquireLeaseRequest(name=name, ttl_ms=ttl_ms)
        if wait_ms > 0:
            req.wait_ms = wait_ms
        while (look := self._unsettled.get(name)) is not None and not look.done():
            await asyncio.shield(look)
        self._check_open()
        # Taken after the wait for the look: the TTL counts from this send, never from before it.
        sent = self.clock.now()
        self._acquiring[name] = self._acquiring.get(name, 0) + 1
        try:
            res = await self.leases.acquire_lease(req, headers=self._headers())
        except asyncio.CancelledError:
            self._done_acquiring(name)
            self._acquire_ended(name, unanswered=True)
            raise
        except Exception as e:  # noqa: BLE001 - typed
            self._done_acquiring(name)
            err = HubError.of(e)
            self._acquire_ended(name, unanswered=err.code in _UNANSWERED)
            raise err from e
        self._done_acquiring(name)
        # Renewed: this agent holds the lease already, under this acquire's token. When a call of
        # this session holds it (or is acquiring it), two holders of one token are what no fence can
        # tell apart, so it stays that call's and this is refused. When none does, nobody answers for
        # it (an acquire whose answer was lost and whose look failed too, an earlier process of the
        # agent): this acquire takes it over, or every retry would renew it and no agent would ever
        # get it.
        if res.renewed and self._after(name):
            self._acquire_ended(name, unanswered=False)
            raise HubError("lease_held", f"lease {name} is already held by this agent (fencing token {res.lease.fencing_token}); hold it once", lease=res.lease)
        # Granted no earlier than the time it waited in the queue after it was sent, and no later
        # than the answer came: the hub's count of the wait is not taken past what this process saw.
        held = Lease(self, res.lease, ttl_ms / 1000, sent + min(res.waited_ms / 1000, self.clock.now() - sent))
        self._held.add(held)
        # Held by this call now: a look put off for the name has nothing left to settle.
        self._look_later.discard(name)
        return held

    def _done_acquiring(self, name: str) -> None:
        n = self._acquiring[name] - 1
        if n == 0:
            del self._acquiring[name]
        else:
            self._acquiring[name] = n

    def _after(self, name: str) -> bool:
        """Whether a call of this session holds lease `name` or is acquiring it."""
        return name in self._acquiring or any(h.name == name for h in self._held)

    def _acquire_ended(self, name: str, unanswered: bool) -> None:
        """An acquire of `name` ended without holding the lease (counted out of _acquiring already);
        `unanswered` says it got no answer. Starts the look it needs, or one put off for the name."""
        if unanswered or name in self._look_later:
            self._settle_unanswered(name)

    def _settle_unanswered(self, name: str) -> None:
        """An acquire that got no answer (cancelled, timed out, the connection lost) may have been
        granted all the same, the grant on its way when the call ended. Nothing of this session
        would ever release it, and it would stay held until its TTL ran out. So the lease is looked
        up, and released when this agent holds it and no call of this session holds or acquires it
        (as etcd's lock recipe deletes its key when a wait for the lock is cancelled). The next
        acquire of the name waits for this look; close() too. While another acquire of the name is
        in flight, the look is put off until the last of them ends: without the lease, the look runs
        then; holding it, that call answers for it."""
        if self.error is not None or self._no_looks or any(h.name == name for h in self._held):
            self._look_later.discard(name)
            return
        if name in self._acquiring:
            self._look_later.add(name)
            return
        self._look_later.discard(name)
        look = self._unsettled.get(name)
        if look is not None and not look.done():
            return

        async def look() -> None:
            try:
                if self._after(name):
                    return
                async with asyncio.timeout(_SETTLE_TIMEOUT):
                    got = await self.leases.get_lease(lease_pb2.GetLeaseRequest(name=name), headers=self._headers())
                    if got.lease.holder_agent_id != self.agent.id or self._after(name):
                        return
                    await self.leases.release_lease(lease_pb2.ReleaseLeaseRequest(name=name, fencing_token=got.lease.fencing_token), headers=self._headers())
            except Exception:  # noqa: BLE001 - a look that fails leaves the lease to its TTL
                pass
            finally:
                if self._unsettled.get(name) is task:
                    del self._unsettled[name]

        task = asyncio.ensure_future(look())
        self._unsettled[name] = task

    def lease(self, name: str, ttl: float = 30.0, wait: float = 0.0) -> _LeaseContext:
        """`async with hub.lease(name) as lease:` holds the lease for the block and releases it after."""
        return _LeaseContext(self, name, ttl, wait)

    def inbox(self, after_seq: int | None = None) -> AsyncGenerator[InboxEvent, None]:
        """The agent's inbox (see inbox_events): resumes across dropped connections and hub restarts.
        An inbox left open (a `break` out of `async for`) is closed by close()."""
        events = inbox_events(self, after_seq)
        self._inboxes.add(events)
        return events

    async def check_fence(self, name: str, fencing_token: int) -> FenceCheck:
        """Whether `fencing_token` is the live holder's current token for lease `name` of the
        session's project (see kxmhub.check_fence, which a resource without an agent calls)."""
        self._check_open()
        return await check_fence(self.leases, name, fencing_token, headers=self._headers())

    async def send(self, target: str, content: str) -> peer_pb2.Message:
        """Messages an agent of the project (its id or name)."""
        self._check_open()
        try:
            return (await self.peer.send_message(peer_pb2.SendMessageRequest(target=target, content=content), headers=self._headers())).message
        except Exception as e:  # noqa: BLE001 - typed
            raise HubError.of(e) from e

    async def await_reply(self, message_id: str) -> peer_pb2.Message:
        """The message `message_id` this agent sent, once replied (`reply` set), whether the reply
        came before this call or comes after it. Waits on the Subscribe stream, never polls, and
        goes on across dropped connections and hub restarts. Raises HubError message_ended when the
        message ended without a reply (`metadata["status"]` "cancelled" or "expired",
        `metadata["error"]` the hub's reason), the session's error when the session is lost or
        closed meanwhile, and any other refusal (message_not_found, message_forbidden, a refused
        identity). Cancelling the call closes its stream::

            sent = await hub.send("reviewer", "pushed main")
            answered = await asyncio.wait_for(hub.await_reply(sent.id), 600)
            print(answered.reply.content)
        """
        self._check_open()
        if self.error is not None:
            raise self.error
        waiting = asyncio.ensure_future(reply_to(self, message_id))
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait((waiting, lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not waiting.done():
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
        if not waiting.cancelled():
            return waiting.result()
        raise self.error or HubError("closed", "the session was closed")

    async def close(self) -> None:
        """Releases the leases still held, stops the heartbeats and unregisters the agent. From its
        start, the session's calls (and each round of its inboxes) raise HubError `closed`, not
        transient; an inbox another task is reading ends with it too."""
        self._closed = True
        for held in list(self._held):
            try:
                await held.release()
            except HubError:
                pass
        self._no_looks = True
        # Shielded: a close that is cancelled leaves the looks to finish (cancelled, they would
        # leave the lease to its TTL).
        await asyncio.shield(asyncio.gather(*self._unsettled.values(), return_exceptions=True))
        if self._beats is not None:
            self._beats.cancel()
            await asyncio.gather(self._beats, return_exceptions=True)
        # Streams still open would hold the connection (and the process) open. An inbox another
        # task is reading (waiting on its stream) cannot be closed from here (aclose() of a running
        # generator raises): that task's wait is interrupted, and its inbox raises `closed`.
        for task in list(self._readers):
            self._interrupted.add(task)
            task.cancel()
        for events in list(self._inboxes):
            if events.ag_running:
                continue
            try:
                await events.aclose()
            except Exception:  # noqa: BLE001 - an inbox that fails to close must not keep the session open
                pass
        if self.error is None:
            self._lose(HubError("closed", "the session was closed"))
            try:
                await self.presence.unregister_agent(presence_pb2.UnregisterAgentRequest(agent_id=self.agent.id), headers=self._headers())
            except Exception:  # noqa: BLE001 - gone already
                pass
        # Let go of the HTTP client now, while the event loop runs.
        self.presence = self.leases = self.peer = None  # type: ignore[assignment]
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None
            # pyqwest goes on tearing the connections down in its native runtime after aclose()
            # returns; an interpreter that exits meanwhile aborts the process (about 1 run in 4 of
            # the example, measured). A moment here lets it finish.
            await asyncio.sleep(0.05)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _beat(self, every: float) -> None:
        failures = 0
        while True:
            await self.clock.sleep(every)
            try:
                # At most one interval: a heartbeat that never answers (a connection gone silent)
                # is a failed one, so three of them lose the session instead of hanging it.
                await asyncio.wait_for(self.presence.heartbeat(presence_pb2.HeartbeatRequest(agent_id=self.agent.id), headers=self._headers()), every)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - typed
                err = HubError.of(e)
                failures += 1
                if not err.transient or failures >= 3:
                    self._lose(err)
                    # Refused for good (its key no longer works: taken over, evicted): what it holds
                    # is lost with it, at once, not at the next renewal.
                    if not err.transient:
                        for held in list(self._held):
                            held._keeper.cancel()
                            held._lose(err)
                    return


class _LeaseContext:
    def __init__(self, session: Session, name: str, ttl: float, wait: float) -> None:
        self._args = (session, name, ttl, wait)
        self._lease: Lease | None = None

    async def __aenter__(self) -> Lease:
        session, name, ttl, wait = self._args
        self._lease = await session.acquire(name, ttl, wait)
        return self._lease

    async def __aexit__(self, *exc: object) -> None:
        if self._lease is not None:
            try:
                await self._lease.release()
            except HubError:
                pass


async def connect(
    url: str,
    *,
    project: str,
    name: str,
    token: str | None = None,
    purpose: str | None = None,
    host: str | None = None,
    heartbeat: float = 10.0,
    clock: Clock | None = None,
    http: Client | None = None,
    protocol: ProtocolType = ProtocolType.CONNECT,
    takeover: bool = False,
    tls_ca: PathLike | None = None,
    tls_cert: PathLike | None = None,
    tls_key: PathLike | None = None,
) -> Session:
    """Registers (or resumes) the agent `name` in `project` and starts its heartbeats (every 10 s,
    well inside the hub's default stale-after of 30 s). Default transport: HTTP/2 (h2c for
    http://, TLS for https://), one connection, closed by close().

    For an https:// hub, `tls_ca` is the PEM file of the CA that signed its certificate, trusted
    instead of the system's CAs (trusted without it), and `tls_cert` and `tls_key` are the client
    certificate and key (PEM files) for a hub with mutual TLS; they go into the default transport
    (an `http` client of your own brings its own). A file that cannot be used is HubError
    invalid_tls_config; a failed handshake is HubError tls_failed with the TLS reason
    (`metadata["tlsCode"]`, e.g. CERTIFICATE_VERIFY_FAILED, TLSV13_ALERT_CERTIFICATE_REQUIRED).

    A name still held by an instance marked online is HubError duplicate_agent_name, unless
    `takeover=True`: then that instance is replaced at once (a restart that cannot wait for the
    crashed one to go stale). Its key stops working (its calls and streams are refused with
    invalid_agent_identity), its leases are released (each next grant gets a higher token), and
    the agent keeps its id and its inbox; `Session.taken_over` and `Session.released_leases` say
    what was replaced."""
    transport = None
    if http is None:
        # TLS files for a hub reached in clear would not be used, and the token and agent key
        # would travel unprotected while the caller thinks otherwise.
        if (tls_ca or tls_cert or tls_key) and urllib.parse.urlsplit(url).scheme != "https":
            raise HubError("invalid_tls_config", "TLS files are given but the hub's URL is not https://: use https://, or drop them")
        transport = tls_transport(tls_ca, tls_cert, tls_key)
        await transport.__aenter__()
        http = Client(transport)
    s = Session(url, token, clock or MonotonicClock(), http, transport, protocol)
    req = presence_pb2.RegisterAgentRequest(name=name, project=project, host=(host or socket.gethostname())[:64])
    if purpose:
        req.purpose = purpose
    if takeover:
        req.takeover = True
    try:
        res = await s.presence.register_agent(req, headers=s._headers())
    except Exception as e:  # noqa: BLE001 - typed
        if transport is not None:
            await transport.__aexit__(None, None, None)
        err = HubError.of(e)
        if err.code in ("unavailable", "tls_failed", "cancelled", "unknown") and transport is not None:
            # The HTTP client names few TLS failures (a refused client certificate is a closed
            # connection to it): one handshake of the standard library's own says which it was.
            err = await diagnose(url, tls_ca, tls_cert, tls_key) or err
        raise err from e
    s.agent, s._key = res.agent, res.agent_key
    s.taken_over, s.released_leases = res.taken_over, list(res.released_leases)
    s._beats = asyncio.create_task(s._beat(heartbeat))
    return s
