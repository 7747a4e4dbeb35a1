from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from kxm.hub.v1 import peer_pb2

from ._clock import jittered
from ._errors import HubError

if TYPE_CHECKING:
    from ._session import Session

_ENDED = {
    peer_pb2.MESSAGE_STATUS_CANCELLED: "cancelled",
    peer_pb2.MESSAGE_STATUS_EXPIRED: "expired",
    peer_pb2.MESSAGE_STATUS_ERROR: "error",
}


def _outcome(message: peer_pb2.Message) -> peer_pb2.Message | None:
    """The message once replied; HubError message_ended when it ended without a reply; None while
    a reply may still come."""
    if message.HasField("reply"):
        return message
    status = _ENDED.get(message.status)
    if status is None:
        return None
    metadata = {"messageId": message.id, "status": status}
    text = f"message {message.id} ended {status} without a reply"
    if message.HasField("error"):
        metadata["error"] = message.error
        text += f": {message.error}"
    raise HubError("message_ended", text, metadata)


async def _read(session: Session, message_id: str) -> peer_pb2.Message:
    return (await session.peer.get_message(peer_pb2.GetMessageRequest(message_id=message_id), headers=session._headers())).message


async def reply_to(session: Session, message_id: str) -> peer_pb2.Message:
    """Waits for the reply to a message the session's agent sent (see Session.await_reply).

    The Subscribe stream is opened first and the message read once its ready frame came, so a
    reply made before the read is in the message and one made after it comes as a `reply` event on
    the stream: none is missed, and nothing polls. After a dropped connection or a hub restart the
    stream is opened again (with a back-off, as the inbox does) and the message read again.
    """
    backoff = 0.1
    while True:
        try:
            # Default start: live events from the stream's head on; the read covers what came before.
            stream = session.peer.subscribe(peer_pb2.SubscribeRequest(), headers=session._headers())
            async with contextlib.aclosing(stream) as frames:
                async for frame in frames:
                    kind = frame.WhichOneof("event")
                    if kind == "ready":
                        backoff = 0.1
                        message = await _read(session, message_id)
                        # Whose it is first: a recipient's await of a message it replied to is refused too.
                        if message.from_agent_id != session.agent.id:
                            raise HubError("message_forbidden", f"message {message_id} was not sent by this agent: its reply goes to its sender", {"messageId": message_id})
                        done = _outcome(message)
                        if done is not None:
                            return done
                    elif kind in ("reply", "expired") and getattr(frame, kind).id == message_id:
                        done = _outcome(getattr(frame, kind)) or _outcome(await _read(session, message_id))
                        if done is not None:
                            return done
        except asyncio.CancelledError:
            raise
        except HubError as e:
            if not e.transient:
                raise
        except Exception as e:  # noqa: BLE001 - typed below
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError from e  # the runtime reports a cancelled stream as CANCELED
            err = HubError.of(e)
            if not err.transient and err.code != "subscriber_too_slow":
                raise err from e
        # The stream ended or the hub is away: open it again and read the message again.
        await session.clock.sleep(jittered(backoff))
        backoff = min(backoff * 2, 5.0)
