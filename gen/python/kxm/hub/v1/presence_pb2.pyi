import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from kxm.hub.v1 import options_pb2 as _options_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PresenceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRESENCE_STATE_UNSPECIFIED: _ClassVar[PresenceState]
    PRESENCE_STATE_ONLINE: _ClassVar[PresenceState]
    PRESENCE_STATE_STALE: _ClassVar[PresenceState]
    PRESENCE_STATE_OFFLINE: _ClassVar[PresenceState]

class RuntimePresenceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUNTIME_PRESENCE_STATE_UNSPECIFIED: _ClassVar[RuntimePresenceState]
    RUNTIME_PRESENCE_STATE_ONLINE: _ClassVar[RuntimePresenceState]
    RUNTIME_PRESENCE_STATE_EXPIRED: _ClassVar[RuntimePresenceState]
    RUNTIME_PRESENCE_STATE_UNKNOWN: _ClassVar[RuntimePresenceState]
PRESENCE_STATE_UNSPECIFIED: PresenceState
PRESENCE_STATE_ONLINE: PresenceState
PRESENCE_STATE_STALE: PresenceState
PRESENCE_STATE_OFFLINE: PresenceState
RUNTIME_PRESENCE_STATE_UNSPECIFIED: RuntimePresenceState
RUNTIME_PRESENCE_STATE_ONLINE: RuntimePresenceState
RUNTIME_PRESENCE_STATE_EXPIRED: RuntimePresenceState
RUNTIME_PRESENCE_STATE_UNKNOWN: RuntimePresenceState

class Agent(_message.Message):
    __slots__ = ("id", "name", "purpose", "project", "model", "host", "connected_at", "last_seen_at", "online", "presence", "lease_expires_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_AT_FIELD_NUMBER: _ClassVar[int]
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    purpose: str
    project: str
    model: str
    host: str
    connected_at: _timestamp_pb2.Timestamp
    last_seen_at: _timestamp_pb2.Timestamp
    online: bool
    presence: PresenceState
    lease_expires_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., purpose: _Optional[str] = ..., project: _Optional[str] = ..., model: _Optional[str] = ..., host: _Optional[str] = ..., connected_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_seen_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., online: _Optional[bool] = ..., presence: _Optional[_Union[PresenceState, str]] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RuntimePresence(_message.Message):
    __slots__ = ("runtime_id", "host", "registered_at", "heartbeat_at", "lease_expires_at", "presence")
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    runtime_id: str
    host: str
    registered_at: _timestamp_pb2.Timestamp
    heartbeat_at: _timestamp_pb2.Timestamp
    lease_expires_at: _timestamp_pb2.Timestamp
    presence: RuntimePresenceState
    def __init__(self, runtime_id: _Optional[str] = ..., host: _Optional[str] = ..., registered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., heartbeat_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., presence: _Optional[_Union[RuntimePresenceState, str]] = ...) -> None: ...

class RegisterAgentRequest(_message.Message):
    __slots__ = ("name", "purpose", "project", "model", "host", "takeover")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    TAKEOVER_FIELD_NUMBER: _ClassVar[int]
    name: str
    purpose: str
    project: str
    model: str
    host: str
    takeover: bool
    def __init__(self, name: _Optional[str] = ..., purpose: _Optional[str] = ..., project: _Optional[str] = ..., model: _Optional[str] = ..., host: _Optional[str] = ..., takeover: _Optional[bool] = ...) -> None: ...

class RegisterAgentResponse(_message.Message):
    __slots__ = ("agent", "agent_key", "resumed", "taken_over", "released_leases")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_KEY_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    TAKEN_OVER_FIELD_NUMBER: _ClassVar[int]
    RELEASED_LEASES_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    agent_key: str
    resumed: bool
    taken_over: bool
    released_leases: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ..., agent_key: _Optional[str] = ..., resumed: _Optional[bool] = ..., taken_over: _Optional[bool] = ..., released_leases: _Optional[_Iterable[str]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class UnregisterAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class UnregisterAgentResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("include_offline", "project")
    INCLUDE_OFFLINE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    include_offline: bool
    project: str
    def __init__(self, include_offline: _Optional[bool] = ..., project: _Optional[str] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ...) -> None: ...

class ReportRuntimePresenceRequest(_message.Message):
    __slots__ = ("project", "runtime_id", "host")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    project: str
    runtime_id: str
    host: str
    def __init__(self, project: _Optional[str] = ..., runtime_id: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class ReportRuntimePresenceResponse(_message.Message):
    __slots__ = ("presence",)
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    presence: RuntimePresence
    def __init__(self, presence: _Optional[_Union[RuntimePresence, _Mapping]] = ...) -> None: ...

class WatchPresenceRequest(_message.Message):
    __slots__ = ("project", "after_cursor")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    project: str
    after_cursor: int
    def __init__(self, project: _Optional[str] = ..., after_cursor: _Optional[int] = ...) -> None: ...

class PresenceSnapshot(_message.Message):
    __slots__ = ("agents", "runtimes", "at")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    runtimes: _containers.RepeatedCompositeFieldContainer[RuntimePresence]
    at: _timestamp_pb2.Timestamp
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ..., runtimes: _Optional[_Iterable[_Union[RuntimePresence, _Mapping]]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class KeepAlive(_message.Message):
    __slots__ = ("at",)
    AT_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WatchPresenceResponse(_message.Message):
    __slots__ = ("cursor", "snapshot", "agent", "runtime", "keep_alive", "forgotten")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    snapshot: PresenceSnapshot
    agent: Agent
    runtime: RuntimePresence
    keep_alive: KeepAlive
    forgotten: AgentForgotten
    def __init__(self, cursor: _Optional[int] = ..., snapshot: _Optional[_Union[PresenceSnapshot, _Mapping]] = ..., agent: _Optional[_Union[Agent, _Mapping]] = ..., runtime: _Optional[_Union[RuntimePresence, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAlive, _Mapping]] = ..., forgotten: _Optional[_Union[AgentForgotten, _Mapping]] = ...) -> None: ...

class AgentForgotten(_message.Message):
    __slots__ = ("id", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...
