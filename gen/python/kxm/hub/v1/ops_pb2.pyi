import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kxm.hub.v1 import lease_pb2 as _lease_pb2
from kxm.hub.v1 import options_pb2 as _options_pb2
from kxm.hub.v1 import peer_pb2 as _peer_pb2
from kxm.hub.v1 import presence_pb2 as _presence_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenMessageChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPEN_MESSAGE_CHANGE_KIND_UNSPECIFIED: _ClassVar[OpenMessageChangeKind]
    OPEN_MESSAGE_CHANGE_KIND_SENT: _ClassVar[OpenMessageChangeKind]
    OPEN_MESSAGE_CHANGE_KIND_DELIVERED: _ClassVar[OpenMessageChangeKind]
    OPEN_MESSAGE_CHANGE_KIND_ENDED: _ClassVar[OpenMessageChangeKind]

class TokenScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKEN_SCOPE_UNSPECIFIED: _ClassVar[TokenScope]
    TOKEN_SCOPE_AGENT: _ClassVar[TokenScope]
    TOKEN_SCOPE_READ: _ClassVar[TokenScope]
    TOKEN_SCOPE_CHECK: _ClassVar[TokenScope]

class TokenState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKEN_STATE_UNSPECIFIED: _ClassVar[TokenState]
    TOKEN_STATE_LIVE: _ClassVar[TokenState]
    TOKEN_STATE_EXPIRED: _ClassVar[TokenState]
    TOKEN_STATE_REVOKED: _ClassVar[TokenState]

class AuditKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIT_KIND_UNSPECIFIED: _ClassVar[AuditKind]
    AUDIT_KIND_TOKEN_CREATED: _ClassVar[AuditKind]
    AUDIT_KIND_TOKEN_REVOKED: _ClassVar[AuditKind]
    AUDIT_KIND_TOKEN_EXPIRED: _ClassVar[AuditKind]
    AUDIT_KIND_RESTORE: _ClassVar[AuditKind]
    AUDIT_KIND_FENCE_RAISED: _ClassVar[AuditKind]
    AUDIT_KIND_SYNC_CONFLICT: _ClassVar[AuditKind]
    AUDIT_KIND_AUTH_REFUSALS: _ClassVar[AuditKind]
OPEN_MESSAGE_CHANGE_KIND_UNSPECIFIED: OpenMessageChangeKind
OPEN_MESSAGE_CHANGE_KIND_SENT: OpenMessageChangeKind
OPEN_MESSAGE_CHANGE_KIND_DELIVERED: OpenMessageChangeKind
OPEN_MESSAGE_CHANGE_KIND_ENDED: OpenMessageChangeKind
TOKEN_SCOPE_UNSPECIFIED: TokenScope
TOKEN_SCOPE_AGENT: TokenScope
TOKEN_SCOPE_READ: TokenScope
TOKEN_SCOPE_CHECK: TokenScope
TOKEN_STATE_UNSPECIFIED: TokenState
TOKEN_STATE_LIVE: TokenState
TOKEN_STATE_EXPIRED: TokenState
TOKEN_STATE_REVOKED: TokenState
AUDIT_KIND_UNSPECIFIED: AuditKind
AUDIT_KIND_TOKEN_CREATED: AuditKind
AUDIT_KIND_TOKEN_REVOKED: AuditKind
AUDIT_KIND_TOKEN_EXPIRED: AuditKind
AUDIT_KIND_RESTORE: AuditKind
AUDIT_KIND_FENCE_RAISED: AuditKind
AUDIT_KIND_SYNC_CONFLICT: AuditKind
AUDIT_KIND_AUTH_REFUSALS: AuditKind

class ForceReleaseLeaseRequest(_message.Message):
    __slots__ = ("project", "name", "fencing_token")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    project: str
    name: str
    fencing_token: int
    def __init__(self, project: _Optional[str] = ..., name: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class ForceReleaseLeaseResponse(_message.Message):
    __slots__ = ("lease", "next")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    lease: _lease_pb2.Lease
    next: _lease_pb2.Lease
    def __init__(self, lease: _Optional[_Union[_lease_pb2.Lease, _Mapping]] = ..., next: _Optional[_Union[_lease_pb2.Lease, _Mapping]] = ...) -> None: ...

class EvictAgentRequest(_message.Message):
    __slots__ = ("project", "agent_id")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    project: str
    agent_id: str
    def __init__(self, project: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class EvictAgentResponse(_message.Message):
    __slots__ = ("agent", "released_leases")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    RELEASED_LEASES_FIELD_NUMBER: _ClassVar[int]
    agent: _presence_pb2.Agent
    released_leases: _containers.RepeatedCompositeFieldContainer[_lease_pb2.Lease]
    def __init__(self, agent: _Optional[_Union[_presence_pb2.Agent, _Mapping]] = ..., released_leases: _Optional[_Iterable[_Union[_lease_pb2.Lease, _Mapping]]] = ...) -> None: ...

class WatchProjectRequest(_message.Message):
    __slots__ = ("project", "presence_after_cursor", "leases_after_cursor", "messages_after_cursor", "runs_after_cursor")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LEASES_AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    RUNS_AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    project: str
    presence_after_cursor: int
    leases_after_cursor: int
    messages_after_cursor: int
    runs_after_cursor: int
    def __init__(self, project: _Optional[str] = ..., presence_after_cursor: _Optional[int] = ..., leases_after_cursor: _Optional[int] = ..., messages_after_cursor: _Optional[int] = ..., runs_after_cursor: _Optional[int] = ...) -> None: ...

class WatchProjectResponse(_message.Message):
    __slots__ = ("presence", "leases", "messages", "runs")
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    presence: _presence_pb2.WatchPresenceResponse
    leases: _lease_pb2.WatchLeasesResponse
    messages: WatchOpenMessagesResponse
    runs: WatchRunsResponse
    def __init__(self, presence: _Optional[_Union[_presence_pb2.WatchPresenceResponse, _Mapping]] = ..., leases: _Optional[_Union[_lease_pb2.WatchLeasesResponse, _Mapping]] = ..., messages: _Optional[_Union[WatchOpenMessagesResponse, _Mapping]] = ..., runs: _Optional[_Union[WatchRunsResponse, _Mapping]] = ...) -> None: ...

class WatchProjectsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchProjectsResponse(_message.Message):
    __slots__ = ("projects", "keep_alive")
    PROJECTS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    projects: ListProjectsResponse
    keep_alive: _presence_pb2.KeepAlive
    def __init__(self, projects: _Optional[_Union[ListProjectsResponse, _Mapping]] = ..., keep_alive: _Optional[_Union[_presence_pb2.KeepAlive, _Mapping]] = ...) -> None: ...

class WatchOpenMessagesRequest(_message.Message):
    __slots__ = ("project", "after_cursor")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    project: str
    after_cursor: int
    def __init__(self, project: _Optional[str] = ..., after_cursor: _Optional[int] = ...) -> None: ...

class OpenMessagesSnapshot(_message.Message):
    __slots__ = ("messages", "total", "at")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[OpenMessage]
    total: int
    at: _timestamp_pb2.Timestamp
    def __init__(self, messages: _Optional[_Iterable[_Union[OpenMessage, _Mapping]]] = ..., total: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class OpenMessageChange(_message.Message):
    __slots__ = ("kind", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: OpenMessageChangeKind
    message: OpenMessage
    def __init__(self, kind: _Optional[_Union[OpenMessageChangeKind, str]] = ..., message: _Optional[_Union[OpenMessage, _Mapping]] = ...) -> None: ...

class WatchOpenMessagesResponse(_message.Message):
    __slots__ = ("cursor", "snapshot", "change", "keep_alive")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    snapshot: OpenMessagesSnapshot
    change: OpenMessageChange
    keep_alive: _presence_pb2.KeepAlive
    def __init__(self, cursor: _Optional[int] = ..., snapshot: _Optional[_Union[OpenMessagesSnapshot, _Mapping]] = ..., change: _Optional[_Union[OpenMessageChange, _Mapping]] = ..., keep_alive: _Optional[_Union[_presence_pb2.KeepAlive, _Mapping]] = ...) -> None: ...

class WatchRunsRequest(_message.Message):
    __slots__ = ("project", "after_cursor")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    project: str
    after_cursor: int
    def __init__(self, project: _Optional[str] = ..., after_cursor: _Optional[int] = ...) -> None: ...

class RunsSnapshot(_message.Message):
    __slots__ = ("home_runtimes", "at")
    HOME_RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    home_runtimes: _containers.RepeatedCompositeFieldContainer[HomeRuntime]
    at: _timestamp_pb2.Timestamp
    def __init__(self, home_runtimes: _Optional[_Iterable[_Union[HomeRuntime, _Mapping]]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunChange(_message.Message):
    __slots__ = ("home_runtime_id", "run")
    HOME_RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    home_runtime_id: str
    run: HomeRuntimeRun
    def __init__(self, home_runtime_id: _Optional[str] = ..., run: _Optional[_Union[HomeRuntimeRun, _Mapping]] = ...) -> None: ...

class SyncAlert(_message.Message):
    __slots__ = ("code", "runtime_id", "project_id", "run_id", "sequence", "at")
    CODE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    code: str
    runtime_id: str
    project_id: str
    run_id: str
    sequence: int
    at: _timestamp_pb2.Timestamp
    def __init__(self, code: _Optional[str] = ..., runtime_id: _Optional[str] = ..., project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., sequence: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WatchRunsResponse(_message.Message):
    __slots__ = ("cursor", "snapshot", "change", "keep_alive", "alert")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    ALERT_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    snapshot: RunsSnapshot
    change: RunChange
    keep_alive: _presence_pb2.KeepAlive
    alert: SyncAlert
    def __init__(self, cursor: _Optional[int] = ..., snapshot: _Optional[_Union[RunsSnapshot, _Mapping]] = ..., change: _Optional[_Union[RunChange, _Mapping]] = ..., keep_alive: _Optional[_Union[_presence_pb2.KeepAlive, _Mapping]] = ..., alert: _Optional[_Union[SyncAlert, _Mapping]] = ...) -> None: ...

class ListProjectsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProjectSummary(_message.Message):
    __slots__ = ("project", "agents", "online_agents", "held_leases", "has_token", "open_messages")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    ONLINE_AGENTS_FIELD_NUMBER: _ClassVar[int]
    HELD_LEASES_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OPEN_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    project: str
    agents: int
    online_agents: int
    held_leases: int
    has_token: bool
    open_messages: int
    def __init__(self, project: _Optional[str] = ..., agents: _Optional[int] = ..., online_agents: _Optional[int] = ..., held_leases: _Optional[int] = ..., has_token: _Optional[bool] = ..., open_messages: _Optional[int] = ...) -> None: ...

class ListProjectsResponse(_message.Message):
    __slots__ = ("projects",)
    PROJECTS_FIELD_NUMBER: _ClassVar[int]
    projects: _containers.RepeatedCompositeFieldContainer[ProjectSummary]
    def __init__(self, projects: _Optional[_Iterable[_Union[ProjectSummary, _Mapping]]] = ...) -> None: ...

class GetSnapshotRequest(_message.Message):
    __slots__ = ("project",)
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    project: str
    def __init__(self, project: _Optional[str] = ...) -> None: ...

class OpenMessage(_message.Message):
    __slots__ = ("id", "status", "from_name", "to_name", "delivery", "created_at", "correlation_id", "expires_at", "delivered_at", "ended_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FROM_NAME_FIELD_NUMBER: _ClassVar[int]
    TO_NAME_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: _peer_pb2.MessageStatus
    from_name: str
    to_name: str
    delivery: _peer_pb2.Delivery
    created_at: _timestamp_pb2.Timestamp
    correlation_id: str
    expires_at: _timestamp_pb2.Timestamp
    delivered_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[_peer_pb2.MessageStatus, str]] = ..., from_name: _Optional[str] = ..., to_name: _Optional[str] = ..., delivery: _Optional[_Union[_peer_pb2.Delivery, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., correlation_id: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class HomeRuntimeRun(_message.Message):
    __slots__ = ("project_id", "run_id", "workflow_id", "display_title", "status", "last_sequence", "pending_gap", "updated_at", "orphaned")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_TITLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PENDING_GAP_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    ORPHANED_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    workflow_id: str
    display_title: str
    status: str
    last_sequence: int
    pending_gap: bool
    updated_at: str
    orphaned: bool
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., workflow_id: _Optional[str] = ..., display_title: _Optional[str] = ..., status: _Optional[str] = ..., last_sequence: _Optional[int] = ..., pending_gap: _Optional[bool] = ..., updated_at: _Optional[str] = ..., orphaned: _Optional[bool] = ...) -> None: ...

class HomeRuntime(_message.Message):
    __slots__ = ("runtime_id", "host", "heartbeat_at", "lease_expires_at", "presence", "orphaned", "runs", "run_total")
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    ORPHANED_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    RUN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    runtime_id: str
    host: str
    heartbeat_at: _timestamp_pb2.Timestamp
    lease_expires_at: _timestamp_pb2.Timestamp
    presence: _presence_pb2.RuntimePresenceState
    orphaned: bool
    runs: _containers.RepeatedCompositeFieldContainer[HomeRuntimeRun]
    run_total: int
    def __init__(self, runtime_id: _Optional[str] = ..., host: _Optional[str] = ..., heartbeat_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., presence: _Optional[_Union[_presence_pb2.RuntimePresenceState, str]] = ..., orphaned: _Optional[bool] = ..., runs: _Optional[_Iterable[_Union[HomeRuntimeRun, _Mapping]]] = ..., run_total: _Optional[int] = ...) -> None: ...

class GetSnapshotResponse(_message.Message):
    __slots__ = ("project", "fetched_at", "agents", "open_messages", "open_message_total", "home_runtimes", "leases")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    FETCHED_AT_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    OPEN_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    OPEN_MESSAGE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    HOME_RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    project: str
    fetched_at: _timestamp_pb2.Timestamp
    agents: _containers.RepeatedCompositeFieldContainer[_presence_pb2.Agent]
    open_messages: _containers.RepeatedCompositeFieldContainer[OpenMessage]
    open_message_total: int
    home_runtimes: _containers.RepeatedCompositeFieldContainer[HomeRuntime]
    leases: _containers.RepeatedCompositeFieldContainer[_lease_pb2.Lease]
    def __init__(self, project: _Optional[str] = ..., fetched_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agents: _Optional[_Iterable[_Union[_presence_pb2.Agent, _Mapping]]] = ..., open_messages: _Optional[_Iterable[_Union[OpenMessage, _Mapping]]] = ..., open_message_total: _Optional[int] = ..., home_runtimes: _Optional[_Iterable[_Union[HomeRuntime, _Mapping]]] = ..., leases: _Optional[_Iterable[_Union[_lease_pb2.Lease, _Mapping]]] = ...) -> None: ...

class ProjectToken(_message.Message):
    __slots__ = ("token_id", "project", "scope", "label", "created_at", "expires_at", "revoked_at", "state")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    project: str
    scope: TokenScope
    label: str
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    revoked_at: _timestamp_pb2.Timestamp
    state: TokenState
    def __init__(self, token_id: _Optional[str] = ..., project: _Optional[str] = ..., scope: _Optional[_Union[TokenScope, str]] = ..., label: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[TokenState, str]] = ...) -> None: ...

class CreateProjectTokenRequest(_message.Message):
    __slots__ = ("project", "scope", "label", "ttl_ms")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    project: str
    scope: TokenScope
    label: str
    ttl_ms: int
    def __init__(self, project: _Optional[str] = ..., scope: _Optional[_Union[TokenScope, str]] = ..., label: _Optional[str] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class CreateProjectTokenResponse(_message.Message):
    __slots__ = ("token", "secret")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    token: ProjectToken
    secret: str
    def __init__(self, token: _Optional[_Union[ProjectToken, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListProjectTokensRequest(_message.Message):
    __slots__ = ("project",)
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    project: str
    def __init__(self, project: _Optional[str] = ...) -> None: ...

class ListProjectTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[ProjectToken]
    def __init__(self, tokens: _Optional[_Iterable[_Union[ProjectToken, _Mapping]]] = ...) -> None: ...

class RevokeProjectTokenRequest(_message.Message):
    __slots__ = ("project", "token_id")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    project: str
    token_id: str
    def __init__(self, project: _Optional[str] = ..., token_id: _Optional[str] = ...) -> None: ...

class RevokeProjectTokenResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: ProjectToken
    def __init__(self, token: _Optional[_Union[ProjectToken, _Mapping]] = ...) -> None: ...

class AuditEvent(_message.Message):
    __slots__ = ("seq", "at", "project", "kind", "detail")
    class DetailEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    seq: int
    at: _timestamp_pb2.Timestamp
    project: str
    kind: AuditKind
    detail: _containers.ScalarMap[str, str]
    def __init__(self, seq: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., project: _Optional[str] = ..., kind: _Optional[_Union[AuditKind, str]] = ..., detail: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListAuditEventsRequest(_message.Message):
    __slots__ = ("project", "page_size", "page_token")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    project: str
    page_size: int
    page_token: str
    def __init__(self, project: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAuditEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
