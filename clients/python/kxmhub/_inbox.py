from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kxm.hub.v1 import peer_pb2

from ._clock import jittered
from ._errors import HubError

if TYPE_CHECKING:
    from ._session import Session

_KINDS = ("message", "reply", "cancelled", "expired")


@dataclass
class InboxEvent:
    """One event of the inbox: kind "message" (to this agent), "reply" (to one it sent),
    "cancelled" or "expired"; `cursor` is its number in the stream."""

    kind: str
    message: peer_pb2.Message
    cursor: int
    _session: Session = field(repr=False)

    async def ack(self) -> peer_pb2.Message:
        """Acknowledges a message (it is delivered)."""
        self._session._check_open()
        try:
            return (await self._session.peer.ack_message(peer_pb2.AckMessageRequest(message_id=self.message.id), headers=self._session._headers())).message
        except Exception as e:  # noqa: BLE001 - typed
            raise HubError.of(e) from e

    async def reply(self, content: str) -> peer_pb2.Message:
        """Replies to a message."""
        self._session._check_open()
        try:
            res = await self._session.peer.reply_message(peer_pb2.ReplyMessageRequest(message_id=self.message.id, content=content), headers=self._session._headers())
            return res.message
        except Exception as e:  # noqa: BLE001 - typed
            raise HubError.of(e) from e


async def inbox_events(session: Session, after_seq: int | None = None) -> AsyncGenerator[InboxEvent, None]:
    """The inbox as an async iterator that resumes from the last cursor it yielded after a dropped
    connection or a hub restart (nothing lost, nothing twice) and where subscriber_too_slow says.
    It raises HubError only for what retrying cannot fix (cursor_expired, a refused identity).
    Cancelling the task that iterates ends it with CancelledError, never a reconnect: the runtime
    reports a cancelled stream as ConnectError(CANCELED), which is not taken for a dropped one.
    Once the session is closed it raises HubError `closed` (not transient), a wait on the stream
    that close() interrupts included, instead of opening the stream again.
    """
    after = after_seq
    backoff = 0.1
    while True:
        session._check_open()
        request = peer_pb2.SubscribeRequest() if after is None else peer_pb2.SubscribeRequest(after_seq=after)
        try:
            stream = session.peer.subscribe(request, headers=session._headers())
            while (frame := await session._interruptible(anext(stream, None))) is not None:
                backoff = 0.1
                kind = frame.WhichOneof("event")
                if kind == "keep_alive":
                    # Where the stream stands: past what it skipped (what was no longer pending
                    # when it opened), which a resume must not bring back.
                    if after is None or frame.cursor > after:
                        after = frame.cursor
                    continue
                if kind not in _KINDS:
                    continue
                after = frame.cursor
                yield InboxEvent(kind, getattr(frame, kind), frame.cursor, session)
        except asyncio.CancelledError:
            raise
        except HubError:
            # `closed`: the session closed under the wait (Session._interruptible).
            raise
        except Exception as e:  # noqa: BLE001 - typed below
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError from e
            err = HubError.of(e)
            if err.code == "subscriber_too_slow" and "resumeAfterSeq" in err.metadata:
                after = int(err.metadata["resumeAfterSeq"])
                continue
            if not err.transient:
                raise err from e
        # The stream ended or the hub is away: reconnect from the last cursor, with a back-off.
        await session._interruptible(session.clock.sleep(jittered(backoff)))
        backoff = min(backoff * 2, 5.0)
