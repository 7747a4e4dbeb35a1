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

class Delivery(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_UNSPECIFIED: _ClassVar[Delivery]
    DELIVERY_FOLLOW_UP: _ClassVar[Delivery]
    DELIVERY_STEER: _ClassVar[Delivery]
    DELIVERY_NEXT_TURN: _ClassVar[Delivery]

class MessageStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_STATUS_UNSPECIFIED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_QUEUED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_DELIVERED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_REPLIED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_CANCELLED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_EXPIRED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_ERROR: _ClassVar[MessageStatus]

class MessageBox(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_BOX_UNSPECIFIED: _ClassVar[MessageBox]
    MESSAGE_BOX_INBOX: _ClassVar[MessageBox]
    MESSAGE_BOX_OUTBOX: _ClassVar[MessageBox]
DELIVERY_UNSPECIFIED: Delivery
DELIVERY_FOLLOW_UP: Delivery
DELIVERY_STEER: Delivery
DELIVERY_NEXT_TURN: Delivery
MESSAGE_STATUS_UNSPECIFIED: MessageStatus
MESSAGE_STATUS_QUEUED: MessageStatus
MESSAGE_STATUS_DELIVERED: MessageStatus
MESSAGE_STATUS_REPLIED: MessageStatus
MESSAGE_STATUS_CANCELLED: MessageStatus
MESSAGE_STATUS_EXPIRED: MessageStatus
MESSAGE_STATUS_ERROR: MessageStatus
MESSAGE_BOX_UNSPECIFIED: MessageBox
MESSAGE_BOX_INBOX: MessageBox
MESSAGE_BOX_OUTBOX: MessageBox

class ReadInboxRequest(_message.Message):
    __slots__ = ("after_cursor", "limit", "wait_ms")
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    after_cursor: int
    limit: int
    wait_ms: int
    def __init__(self, after_cursor: _Optional[int] = ..., limit: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class InboxItem(_message.Message):
    __slots__ = ("cursor", "message", "reply", "cancelled", "expired")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    message: Message
    reply: Message
    cancelled: Message
    expired: Message
    def __init__(self, cursor: _Optional[int] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., reply: _Optional[_Union[Message, _Mapping]] = ..., cancelled: _Optional[_Union[Message, _Mapping]] = ..., expired: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class ReadInboxResponse(_message.Message):
    __slots__ = ("events", "next_cursor")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[InboxItem]
    next_cursor: int
    def __init__(self, events: _Optional[_Iterable[_Union[InboxItem, _Mapping]]] = ..., next_cursor: _Optional[int] = ...) -> None: ...

class Reply(_message.Message):
    __slots__ = ("content", "created_at")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    content: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, content: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("id", "project", "from_agent_id", "from_name", "to_agent_id", "to_name", "content", "delivery", "hops", "max_hops", "seq", "correlation_id", "reply_to", "idempotency_key", "created_at", "expires_at", "delivered_at", "replied_at", "cancelled_at", "status", "reply", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    FROM_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_NAME_FIELD_NUMBER: _ClassVar[int]
    TO_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TO_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    MAX_HOPS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_TO_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    REPLIED_AT_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    project: str
    from_agent_id: str
    from_name: str
    to_agent_id: str
    to_name: str
    content: str
    delivery: Delivery
    hops: int
    max_hops: int
    seq: int
    correlation_id: str
    reply_to: str
    idempotency_key: str
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    delivered_at: _timestamp_pb2.Timestamp
    replied_at: _timestamp_pb2.Timestamp
    cancelled_at: _timestamp_pb2.Timestamp
    status: MessageStatus
    reply: Reply
    error: str
    def __init__(self, id: _Optional[str] = ..., project: _Optional[str] = ..., from_agent_id: _Optional[str] = ..., from_name: _Optional[str] = ..., to_agent_id: _Optional[str] = ..., to_name: _Optional[str] = ..., content: _Optional[str] = ..., delivery: _Optional[_Union[Delivery, str]] = ..., hops: _Optional[int] = ..., max_hops: _Optional[int] = ..., seq: _Optional[int] = ..., correlation_id: _Optional[str] = ..., reply_to: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., replied_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancelled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[MessageStatus, str]] = ..., reply: _Optional[_Union[Reply, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("target", "content", "delivery", "correlation_id", "reply_to", "hops", "max_hops", "ttl_ms", "allow_offline", "idempotency_key")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_TO_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    MAX_HOPS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_OFFLINE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    target: str
    content: str
    delivery: Delivery
    correlation_id: str
    reply_to: str
    hops: int
    max_hops: int
    ttl_ms: int
    allow_offline: bool
    idempotency_key: str
    def __init__(self, target: _Optional[str] = ..., content: _Optional[str] = ..., delivery: _Optional[_Union[Delivery, str]] = ..., correlation_id: _Optional[str] = ..., reply_to: _Optional[str] = ..., hops: _Optional[int] = ..., max_hops: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., allow_offline: _Optional[bool] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("message", "idempotent")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    message: Message
    idempotent: bool
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., idempotent: _Optional[bool] = ...) -> None: ...

class AckMessageRequest(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class AckMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class ReplyMessageRequest(_message.Message):
    __slots__ = ("message_id", "content")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    content: str
    def __init__(self, message_id: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ReplyMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class CancelMessageRequest(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class CancelMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class GetMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class ListMessagesRequest(_message.Message):
    __slots__ = ("box", "status", "page_size", "page_token")
    BOX_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    box: MessageBox
    status: _containers.RepeatedScalarFieldContainer[MessageStatus]
    page_size: int
    page_token: str
    def __init__(self, box: _Optional[_Union[MessageBox, str]] = ..., status: _Optional[_Iterable[_Union[MessageStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("after_seq",)
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    def __init__(self, after_seq: _Optional[int] = ...) -> None: ...

class SubscribeReady(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: _presence_pb2.Agent
    def __init__(self, agent: _Optional[_Union[_presence_pb2.Agent, _Mapping]] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("cursor", "ready", "message", "reply", "cancelled", "expired", "presence", "keep_alive", "forgotten")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    ready: SubscribeReady
    message: Message
    reply: Message
    cancelled: Message
    expired: Message
    presence: _presence_pb2.Agent
    keep_alive: _presence_pb2.KeepAlive
    forgotten: _presence_pb2.AgentForgotten
    def __init__(self, cursor: _Optional[int] = ..., ready: _Optional[_Union[SubscribeReady, _Mapping]] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., reply: _Optional[_Union[Message, _Mapping]] = ..., cancelled: _Optional[_Union[Message, _Mapping]] = ..., expired: _Optional[_Union[Message, _Mapping]] = ..., presence: _Optional[_Union[_presence_pb2.Agent, _Mapping]] = ..., keep_alive: _Optional[_Union[_presence_pb2.KeepAlive, _Mapping]] = ..., forgotten: _Optional[_Union[_presence_pb2.AgentForgotten, _Mapping]] = ...) -> None: ...
