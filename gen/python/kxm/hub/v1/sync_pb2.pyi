from google.api import annotations_pb2 as _annotations_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from kxm.hub.v1 import options_pb2 as _options_pb2
from kxm.hub.v1 import sync_event_pb2 as _sync_event_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SyncOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SYNC_OUTCOME_UNSPECIFIED: _ClassVar[SyncOutcome]
    SYNC_OUTCOME_ACCEPTED: _ClassVar[SyncOutcome]
    SYNC_OUTCOME_DUPLICATE: _ClassVar[SyncOutcome]
    SYNC_OUTCOME_CONFLICT: _ClassVar[SyncOutcome]
    SYNC_OUTCOME_REJECTED: _ClassVar[SyncOutcome]
SYNC_OUTCOME_UNSPECIFIED: SyncOutcome
SYNC_OUTCOME_ACCEPTED: SyncOutcome
SYNC_OUTCOME_DUPLICATE: SyncOutcome
SYNC_OUTCOME_CONFLICT: SyncOutcome
SYNC_OUTCOME_REJECTED: SyncOutcome

class PushEventsRequest(_message.Message):
    __slots__ = ("project", "runtime_id", "events")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    project: str
    runtime_id: str
    events: _containers.RepeatedCompositeFieldContainer[_sync_event_pb2.SyncEvent]
    def __init__(self, project: _Optional[str] = ..., runtime_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[_sync_event_pb2.SyncEvent, _Mapping]]] = ...) -> None: ...

class SyncEventResult(_message.Message):
    __slots__ = ("project_id", "run_id", "sequence", "outcome", "code")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    sequence: int
    outcome: SyncOutcome
    code: str
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., sequence: _Optional[int] = ..., outcome: _Optional[_Union[SyncOutcome, str]] = ..., code: _Optional[str] = ...) -> None: ...

class RunCursor(_message.Message):
    __slots__ = ("project_id", "run_id", "cursor")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    cursor: int
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., cursor: _Optional[int] = ...) -> None: ...

class PushEventsResponse(_message.Message):
    __slots__ = ("results", "cursors")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CURSORS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SyncEventResult]
    cursors: _containers.RepeatedCompositeFieldContainer[RunCursor]
    def __init__(self, results: _Optional[_Iterable[_Union[SyncEventResult, _Mapping]]] = ..., cursors: _Optional[_Iterable[_Union[RunCursor, _Mapping]]] = ...) -> None: ...

class GetCursorRequest(_message.Message):
    __slots__ = ("project", "project_id", "run_id")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    project: str
    project_id: str
    run_id: str
    def __init__(self, project: _Optional[str] = ..., project_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class GetCursorResponse(_message.Message):
    __slots__ = ("cursor",)
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    cursor: RunCursor
    def __init__(self, cursor: _Optional[_Union[RunCursor, _Mapping]] = ...) -> None: ...
