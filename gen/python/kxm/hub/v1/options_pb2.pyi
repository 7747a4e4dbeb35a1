from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor
REST_NAME_FIELD_NUMBER: _ClassVar[int]
rest_name: _descriptor.FieldDescriptor
CLOSED_FIELD_NUMBER: _ClassVar[int]
closed: _descriptor.FieldDescriptor
MCP_TOOL_FIELD_NUMBER: _ClassVar[int]
mcp_tool: _descriptor.FieldDescriptor

class McpTool(_message.Message):
    __slots__ = ("name", "read_only", "destructive", "idempotent", "session_fields", "hidden_fields", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    DESTRUCTIVE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELDS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELDS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_only: bool
    destructive: bool
    idempotent: bool
    session_fields: _containers.RepeatedScalarFieldContainer[str]
    hidden_fields: _containers.RepeatedScalarFieldContainer[str]
    description: str
    def __init__(self, name: _Optional[str] = ..., read_only: _Optional[bool] = ..., destructive: _Optional[bool] = ..., idempotent: _Optional[bool] = ..., session_fields: _Optional[_Iterable[str]] = ..., hidden_fields: _Optional[_Iterable[str]] = ..., description: _Optional[str] = ...) -> None: ...
