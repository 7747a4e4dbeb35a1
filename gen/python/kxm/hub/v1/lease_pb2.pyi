import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kxm.hub.v1 import options_pb2 as _options_pb2
from kxm.hub.v1 import presence_pb2 as _presence_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FenceReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FENCE_REASON_UNSPECIFIED: _ClassVar[FenceReason]
    FENCE_REASON_CURRENT: _ClassVar[FenceReason]
    FENCE_REASON_SUPERSEDED: _ClassVar[FenceReason]
    FENCE_REASON_EXPIRED: _ClassVar[FenceReason]
    FENCE_REASON_RELEASED: _ClassVar[FenceReason]
    FENCE_REASON_UNKNOWN: _ClassVar[FenceReason]

class LeaseEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_EVENT_KIND_UNSPECIFIED: _ClassVar[LeaseEventKind]
    LEASE_EVENT_KIND_GRANTED: _ClassVar[LeaseEventKind]
    LEASE_EVENT_KIND_RENEWED: _ClassVar[LeaseEventKind]
    LEASE_EVENT_KIND_RELEASED: _ClassVar[LeaseEventKind]
    LEASE_EVENT_KIND_TAKEN_OVER: _ClassVar[LeaseEventKind]
    LEASE_EVENT_KIND_QUEUE_CHANGED: _ClassVar[LeaseEventKind]
    LEASE_EVENT_KIND_FORCE_RELEASED: _ClassVar[LeaseEventKind]
FENCE_REASON_UNSPECIFIED: FenceReason
FENCE_REASON_CURRENT: FenceReason
FENCE_REASON_SUPERSEDED: FenceReason
FENCE_REASON_EXPIRED: FenceReason
FENCE_REASON_RELEASED: FenceReason
FENCE_REASON_UNKNOWN: FenceReason
LEASE_EVENT_KIND_UNSPECIFIED: LeaseEventKind
LEASE_EVENT_KIND_GRANTED: LeaseEventKind
LEASE_EVENT_KIND_RENEWED: LeaseEventKind
LEASE_EVENT_KIND_RELEASED: LeaseEventKind
LEASE_EVENT_KIND_TAKEN_OVER: LeaseEventKind
LEASE_EVENT_KIND_QUEUE_CHANGED: LeaseEventKind
LEASE_EVENT_KIND_FORCE_RELEASED: LeaseEventKind

class Lease(_message.Message):
    __slots__ = ("resource", "project", "name", "holder_agent_id", "holder_agent_name", "fencing_token", "acquired_at", "expires_at", "waiters")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    resource: str
    project: str
    name: str
    holder_agent_id: str
    holder_agent_name: str
    fencing_token: int
    acquired_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    waiters: _containers.RepeatedCompositeFieldContainer[LeaseWaiter]
    def __init__(self, resource: _Optional[str] = ..., project: _Optional[str] = ..., name: _Optional[str] = ..., holder_agent_id: _Optional[str] = ..., holder_agent_name: _Optional[str] = ..., fencing_token: _Optional[int] = ..., acquired_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., waiters: _Optional[_Iterable[_Union[LeaseWaiter, _Mapping]]] = ...) -> None: ...

class LeaseWaiter(_message.Message):
    __slots__ = ("agent_id", "agent_name", "since", "wait_until")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    WAIT_UNTIL_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    agent_name: str
    since: _timestamp_pb2.Timestamp
    wait_until: _timestamp_pb2.Timestamp
    def __init__(self, agent_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., wait_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AcquireLeaseRequest(_message.Message):
    __slots__ = ("name", "ttl_ms", "wait_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    ttl_ms: int
    wait_ms: int
    def __init__(self, name: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class AcquireLeaseResponse(_message.Message):
    __slots__ = ("lease", "renewed", "waited_ms")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    renewed: bool
    waited_ms: int
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., renewed: _Optional[bool] = ..., waited_ms: _Optional[int] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("name", "fencing_token", "ttl_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    fencing_token: int
    ttl_ms: int
    def __init__(self, name: _Optional[str] = ..., fencing_token: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("lease", "renewed")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    renewed: bool
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., renewed: _Optional[bool] = ...) -> None: ...

class ReleaseLeaseRequest(_message.Message):
    __slots__ = ("name", "fencing_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    fencing_token: int
    def __init__(self, name: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class ReleaseLeaseResponse(_message.Message):
    __slots__ = ("released", "lease")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    released: bool
    lease: Lease
    def __init__(self, released: _Optional[bool] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class GetLeaseRequest(_message.Message):
    __slots__ = ("name", "project")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    name: str
    project: str
    def __init__(self, name: _Optional[str] = ..., project: _Optional[str] = ...) -> None: ...

class GetLeaseResponse(_message.Message):
    __slots__ = ("lease", "expired")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    expired: bool
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., expired: _Optional[bool] = ...) -> None: ...

class CheckFenceRequest(_message.Message):
    __slots__ = ("name", "fencing_token", "project")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    name: str
    fencing_token: int
    project: str
    def __init__(self, name: _Optional[str] = ..., fencing_token: _Optional[int] = ..., project: _Optional[str] = ...) -> None: ...

class CheckFenceResponse(_message.Message):
    __slots__ = ("valid", "reason", "lease")
    VALID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    valid: bool
    reason: FenceReason
    lease: Lease
    def __init__(self, valid: _Optional[bool] = ..., reason: _Optional[_Union[FenceReason, str]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class ListLeasesRequest(_message.Message):
    __slots__ = ("include_expired", "page_size", "page_token", "project")
    INCLUDE_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    include_expired: bool
    page_size: int
    page_token: str
    project: str
    def __init__(self, include_expired: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., project: _Optional[str] = ...) -> None: ...

class ListLeasesResponse(_message.Message):
    __slots__ = ("leases", "next_page_token")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    next_page_token: str
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchLeasesRequest(_message.Message):
    __slots__ = ("project", "after_cursor")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    project: str
    after_cursor: int
    def __init__(self, project: _Optional[str] = ..., after_cursor: _Optional[int] = ...) -> None: ...

class LeaseEvent(_message.Message):
    __slots__ = ("kind", "lease")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    kind: LeaseEventKind
    lease: Lease
    def __init__(self, kind: _Optional[_Union[LeaseEventKind, str]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class LeaseSnapshot(_message.Message):
    __slots__ = ("leases", "at")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    at: _timestamp_pb2.Timestamp
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WatchLeasesResponse(_message.Message):
    __slots__ = ("cursor", "snapshot", "change", "keep_alive")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    snapshot: LeaseSnapshot
    change: LeaseEvent
    keep_alive: _presence_pb2.KeepAlive
    def __init__(self, cursor: _Optional[int] = ..., snapshot: _Optional[_Union[LeaseSnapshot, _Mapping]] = ..., change: _Optional[_Union[LeaseEvent, _Mapping]] = ..., keep_alive: _Optional[_Union[_presence_pb2.KeepAlive, _Mapping]] = ...) -> None: ...
