from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from kxm.hub.v1 import lease_pb2
from kxm.hub.v1.lease_connect import LeaseServiceClient

from ._errors import HubError

_REASONS = {
    lease_pb2.FENCE_REASON_CURRENT: "current",
    lease_pb2.FENCE_REASON_SUPERSEDED: "superseded",
    lease_pb2.FENCE_REASON_EXPIRED: "expired",
    lease_pb2.FENCE_REASON_RELEASED: "released",
    lease_pb2.FENCE_REASON_UNKNOWN: "unknown",
}


@dataclass(frozen=True)
class FenceCheck:
    """What a fencing token is for a lease, at the hub's clock. `valid` only for reason "current"
    (the live holder's current token). "superseded": a later grant exists; "expired": the current
    token of a lease that lapsed; "released": the current token of a released lease; "unknown":
    the hub never issued it for that lease of the project. `lease` is the lease as it stands when
    someone holds it (for "current", "expired", and "superseded" while it is held), else None.
    """

    valid: bool
    reason: str
    lease: lease_pb2.Lease | None = None


async def check_fence(
    leases: LeaseServiceClient,
    name: str,
    fencing_token: int,
    *,
    project: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> FenceCheck:
    """Asks the hub whether `fencing_token` is the live holder's current token for lease `name`:
    what a resource the lease protects checks before it accepts a write carrying the token. Accept
    the write only when `valid`. A resource is not an agent: give it a LeaseServiceClient of its
    own, the project's token in `headers` ({"authorization": "Bearer <token>"}) and the project in
    `project` (a Session's `check_fence` checks its own project). Raises HubError
    (lease_token_required, protocol_error, invalid_auth)."""
    if isinstance(fencing_token, bool) or not isinstance(fencing_token, int):
        raise HubError("protocol_error", "fencing_token must be an integer", {"field": "fencingToken"})
    try:
        req = lease_pb2.CheckFenceRequest(name=name, fencing_token=fencing_token)
    except ValueError as e:  # outside int64: the hub would refuse it too
        raise HubError("protocol_error", f"fencing_token is out of range: {e}", {"field": "fencingToken"}) from e
    if project:
        req.project = project
    try:
        res = await leases.check_fence(req, headers=headers)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - typed
        raise HubError.of(e) from e
    reason = _REASONS.get(res.reason)
    if reason is None:
        raise HubError("unknown", f"the hub answered an unknown fence reason {res.reason}")
    return FenceCheck(res.valid and reason == "current", reason, res.lease if res.HasField("lease") else None)
