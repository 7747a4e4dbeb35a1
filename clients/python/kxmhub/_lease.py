from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

from kxm.hub.v1 import lease_pb2

from ._errors import HubError

if TYPE_CHECKING:
    from ._session import Session


class Lease:
    """A lease this process holds, renewed about every third of its TTL until released or lost.

    `lost` is set (and `error` says why) when the hub says the lease is gone (lease_superseded,
    lease_expired, lease_not_found), and also when renewals have failed for so long that the lease
    may lapse on the hub: a fifth of the TTL before the TTL counted from when the last successful
    renewal was sent, so the work it guards stops before anyone else can be granted it. The first
    TTL counts from when the acquire was sent plus the time the hub says it waited in the queue
    (the grant came no earlier), so a lease granted after a long wait is not taken for lapsed.
    """

    def __init__(self, session: Session, lease: lease_pb2.Lease, ttl: float, granted_from: float) -> None:
        self.name = lease.name
        self.token: int = lease.fencing_token  # present it with every write to the guarded resource
        self.lease = lease
        self.lost = asyncio.Event()
        self.error: HubError | None = None
        self._session = session
        self._ttl = ttl
        self._keeper = asyncio.create_task(self._keep(granted_from))

    def check(self) -> None:
        """Raises the loss, if the lease is lost: call it before an irreversible step."""
        if self.error is not None:
            raise self.error

    def _lose(self, err: HubError) -> bool:
        if self.error is not None:
            return False
        self.error = err
        self.lost.set()
        self._session._held.discard(self)
        return True

    async def release(self) -> None:
        """Stops renewing and releases the lease (one already lost is not released)."""
        self._keeper.cancel()
        await asyncio.gather(self._keeper, return_exceptions=True)
        if not self._lose(HubError("released", f"lease {self.name} was released")):
            return
        try:
            await self._session.leases.release_lease(lease_pb2.ReleaseLeaseRequest(name=self.name, fencing_token=self.token), headers=self._session._headers())
        except Exception as e:  # noqa: BLE001 - typed below
            err = HubError.of(e)
            if err.code not in ("lease_superseded", "lease_not_found"):
                raise err from e

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    async def _keep(self, granted_from: float) -> None:
        # Validity and renewals count from the earliest the hub can have granted (or last renewed)
        # the lease, on this process's clock: never later than the hub's own count.
        clock, ttl = self._session.clock, self._ttl
        margin = ttl / 5
        valid_until, next_renew = granted_from + ttl, granted_from + ttl / 3
        while self.error is None:
            lost_at = valid_until - margin
            await clock.sleep(min(next_renew, lost_at) - clock.now())
            if clock.now() >= lost_at:
                self._lose(HubError("lease_unconfirmed", f"lease {self.name} could not be renewed before it may lapse", lease=self.lease, transient=True))
                return
            sent = clock.now()
            try:
                res = await asyncio.wait_for(
                    self._session.leases.renew_lease(
                        lease_pb2.RenewLeaseRequest(name=self.name, fencing_token=self.token, ttl_ms=round(ttl * 1000)), headers=self._session._headers()
                    ),
                    timeout=max(0.001, lost_at - sent),
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - typed below
                err = HubError.of(e)
                if not err.transient and err.code != "rate_limited":
                    self._lose(err)
                    return
                # The hub is away: try again soon, while the lease can still be valid. Over the
                # rate limit: not before its window ends (an earlier try is refused too).
                next_renew = clock.now() + max(min(1.0, ttl / 10), _retry_after(err, ttl))
                continue
            self.lease = res.lease
            valid_until = sent + ttl
            next_renew = sent + ttl / 3


def _retry_after(err: HubError, ttl: float) -> float:
    """A rate_limited refusal's retryAfterMs in seconds (at most `ttl`), else 0."""
    if err.code != "rate_limited":
        return 0.0
    try:
        ms = int(err.metadata.get("retryAfterMs", ""))
    except ValueError:
        return 0.0
    return min(max(ms, 0) / 1000, ttl)


# What the hub accepts (src/lease/leases.ts), in the seconds the library takes.
TTL_RANGE = (5, 600)
WAIT_RANGE = (0, 600)


def millis(label: str, seconds: float, low: int, high: int) -> int:
    """`seconds` as the hub's milliseconds, refused here (HubError protocol_error, `field` the
    argument's name) when out of range, so the refusal speaks of what the caller passed."""
    ms = round(seconds * 1000) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds) else None
    if ms is None or not low * 1000 <= ms <= high * 1000:
        raise HubError("protocol_error", f"{label} must be between {low} and {high} seconds (got {seconds!r})", {"field": label})
    return ms
