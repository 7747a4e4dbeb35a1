"""Client library for kxm-hub over the generated Connect clients (kxm.hub.v1).

A Session registers the agent (takeover=True replaces a crashed instance still marked online),
sends its credentials on every call and heartbeats; a Lease is kept renewed with a loss signal;
acquire can wait in the hub's queue; the inbox resumes across dropped connections; a sender awaits
the reply to its message; every refusal is a HubError. An https:// hub: `tls_ca` (its CA),
`tls_cert` and `tls_key` (mutual TLS), PEM files. asyncio throughout::

    async with await kxmhub.connect(url, project="demo", name="builder", token=token) as hub:
        async with hub.lease("repo/main", ttl=10, wait=30) as lease:
            ...                       # lease.token is the fencing token
            lease.check()             # raises the loss before an irreversible step
            # what the resource asks before it takes a write carrying the token (kxmhub.check_fence):
            assert (await hub.check_fence("repo/main", lease.token)).valid
        sent = await hub.send("reviewer", f"pushed main at token {lease.token}")
        print((await hub.await_reply(sent.id)).reply.content)
"""

from __future__ import annotations

from ._clock import Clock, MonotonicClock
from ._errors import HubError
from ._fence import FenceCheck, check_fence
from ._inbox import InboxEvent
from ._lease import Lease
from ._session import Session, connect

__all__ = ["Clock", "FenceCheck", "HubError", "InboxEvent", "Lease", "MonotonicClock", "Session", "check_fence", "connect"]
