from __future__ import annotations

import asyncio

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.rpc import error_details_pb2
from kxm.hub.v1 import lease_pb2

# No answer from the hub: it is away, or the connection broke under the call. Try again.
_TRANSIENT = {Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.UNKNOWN, Code.INTERNAL, Code.ABORTED}


class HubError(Exception):
    """A refusal from the hub: its code ("lease_held", "cursor_expired", ...), the facts in
    `metadata` and the `lease` it concerns when there is one. Anything else (the hub away, a
    cancelled call) has code "unavailable", "cancelled" or "unknown" (a failure that is not the
    network's, never transient); `transient` says whether trying again may succeed. A call on a
    closed session is "closed", not transient. A failed TLS handshake (a hub certificate no
    trusted CA signed, a client certificate the hub wants and did not get) is "tls_failed", not
    transient; TLS files `connect` cannot use are "invalid_tls_config".
    """

    def __init__(self, code: str, message: str, metadata: dict[str, str] | None = None, lease: lease_pb2.Lease | None = None, transient: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.metadata = metadata or {}
        self.lease = lease
        self.transient = transient

    @classmethod
    def of(cls, err: BaseException) -> HubError:
        """The error of a failed call, typed."""
        if isinstance(err, HubError):
            return err
        from ._tls import is_tls_message

        # The hub's own refusal first: its message may name a lease or an agent that reads like
        # a TLS failure ("dlq/CorruptMessage"), and it is the hub's answer all the same.
        if isinstance(err, ConnectError):
            # ErrorDetail.value() knows only the runtime's own message types: decode by type name.
            infos = [error_details_pb2.ErrorInfo.FromString(d.message_bytes) for d in err.details if d.type_name == "google.rpc.ErrorInfo"]
            leases = [lease_pb2.Lease.FromString(d.message_bytes) for d in err.details if d.type_name == "kxm.hub.v1.Lease"]
            info = next((i for i in infos if i.domain == "kxm-hub"), None)
            if info is not None:
                code = info.reason.lower()
                # Over the rate or the stream's lag: later. A body over the limit fails the same way again.
                transient = err.code == Code.UNAVAILABLE or (err.code == Code.RESOURCE_EXHAUSTED and code != "payload_too_large")
                return cls(code, err.message, dict(info.metadata), leases[0] if leases else None, transient)
        if is_tls_message(str(err)):
            return cls("tls_failed", f"TLS with the hub failed: {err}")
        if not isinstance(err, ConnectError):
            # The runtime types every failure of a call as a ConnectError; what else comes here is a
            # wait of the library's own that timed out (the hub did not answer in time), a network
            # error met outside the runtime, or a bug (AttributeError, TypeError, ...), which
            # trying again cannot fix.
            if isinstance(err, (TimeoutError, OSError)):
                return cls("unavailable", str(err), transient=True)
            return cls("unknown", f"{type(err).__name__}: {err}")
        # The runtime reports the caller's own cancel (its task cancelled) as CANCELED, and a
        # stream the hub's end reset with CANCEL (a hub killed under the call) the same way: only
        # the first is "cancelled"; the second is the hub away, as a reset connection is.
        if err.code == Code.CANCELED and _task_cancelling():
            return cls("cancelled", err.message)
        if err.code in _TRANSIENT or err.code == Code.CANCELED:
            return cls("unavailable", err.message, transient=True)
        return cls("unknown", err.message)


def _task_cancelling() -> bool:
    """Whether the running task is being cancelled (outside a task, nobody can tell: assume so)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return True
    return task is None or task.cancelling() > 0
