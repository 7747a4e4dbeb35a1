from google.api import field_behavior_pb2 as _field_behavior_pb2
from kxm.hub.v1 import options_pb2 as _options_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SyncEvent(_message.Message):
    __slots__ = ("schema", "source_event_id", "project_id", "run_id", "home_runtime_id", "memory_revision", "event_type", "sequence", "occurred_at", "config_revision", "executor_policy_revision", "tool_policy_revision", "sync_policy_revision", "redaction", "payload")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SOURCE_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    HOME_RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REVISION_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_REVISION_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    TOOL_POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    SYNC_POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    REDACTION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    schema: str
    source_event_id: str
    project_id: str
    run_id: str
    home_runtime_id: str
    memory_revision: str
    event_type: str
    sequence: int
    occurred_at: str
    config_revision: str
    executor_policy_revision: str
    tool_policy_revision: str
    sync_policy_revision: str
    redaction: Redaction
    payload: SyncPayload
    def __init__(self, schema: _Optional[str] = ..., source_event_id: _Optional[str] = ..., project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., home_runtime_id: _Optional[str] = ..., memory_revision: _Optional[str] = ..., event_type: _Optional[str] = ..., sequence: _Optional[int] = ..., occurred_at: _Optional[str] = ..., config_revision: _Optional[str] = ..., executor_policy_revision: _Optional[str] = ..., tool_policy_revision: _Optional[str] = ..., sync_policy_revision: _Optional[str] = ..., redaction: _Optional[_Union[Redaction, _Mapping]] = ..., payload: _Optional[_Union[SyncPayload, _Mapping]] = ...) -> None: ...

class Redaction(_message.Message):
    __slots__ = ("version", "fields_omitted", "values_replaced")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FIELDS_OMITTED_FIELD_NUMBER: _ClassVar[int]
    VALUES_REPLACED_FIELD_NUMBER: _ClassVar[int]
    version: str
    fields_omitted: _containers.RepeatedScalarFieldContainer[str]
    values_replaced: int
    def __init__(self, version: _Optional[str] = ..., fields_omitted: _Optional[_Iterable[str]] = ..., values_replaced: _Optional[int] = ...) -> None: ...

class SyncPayload(_message.Message):
    __slots__ = ("workflow_id", "display_title", "prompt_hash", "status", "previous_status", "outcome", "summary", "step_id", "from_step_id", "to_step_id", "agent_id", "step_attempt", "assignment_id", "attempt_id", "instance_no", "scope_epoch", "executor", "model", "timing", "usage", "file_changes", "evidence_refs", "supplied_refs", "artifacts", "receipts", "environment", "error", "effect", "lease", "actor", "resolved_by", "resolution_action", "reason", "candidate", "counts", "degraded")
    class CountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_TITLE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_HASH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_STEP_ID_FIELD_NUMBER: _ClassVar[int]
    TO_STEP_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_NO_FIELD_NUMBER: _ClassVar[int]
    SCOPE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FILE_CHANGES_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_REFS_FIELD_NUMBER: _ClassVar[int]
    SUPPLIED_REFS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    display_title: str
    prompt_hash: str
    status: str
    previous_status: str
    outcome: str
    summary: str
    step_id: str
    from_step_id: str
    to_step_id: str
    agent_id: str
    step_attempt: int
    assignment_id: str
    attempt_id: str
    instance_no: int
    scope_epoch: int
    executor: Executor
    model: ModelRef
    timing: Timing
    usage: Usage
    file_changes: _containers.RepeatedCompositeFieldContainer[FileChange]
    evidence_refs: _containers.RepeatedCompositeFieldContainer[EvidenceRef]
    supplied_refs: _containers.RepeatedCompositeFieldContainer[EvidenceRef]
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    receipts: _containers.RepeatedCompositeFieldContainer[Receipt]
    environment: _containers.RepeatedCompositeFieldContainer[EnvironmentEntry]
    error: RunError
    effect: Effect
    lease: LeaseRef
    actor: Actor
    resolved_by: Actor
    resolution_action: str
    reason: str
    candidate: Candidate
    counts: _containers.ScalarMap[str, int]
    degraded: bool
    def __init__(self, workflow_id: _Optional[str] = ..., display_title: _Optional[str] = ..., prompt_hash: _Optional[str] = ..., status: _Optional[str] = ..., previous_status: _Optional[str] = ..., outcome: _Optional[str] = ..., summary: _Optional[str] = ..., step_id: _Optional[str] = ..., from_step_id: _Optional[str] = ..., to_step_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., step_attempt: _Optional[int] = ..., assignment_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., instance_no: _Optional[int] = ..., scope_epoch: _Optional[int] = ..., executor: _Optional[_Union[Executor, _Mapping]] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., file_changes: _Optional[_Iterable[_Union[FileChange, _Mapping]]] = ..., evidence_refs: _Optional[_Iterable[_Union[EvidenceRef, _Mapping]]] = ..., supplied_refs: _Optional[_Iterable[_Union[EvidenceRef, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., receipts: _Optional[_Iterable[_Union[Receipt, _Mapping]]] = ..., environment: _Optional[_Iterable[_Union[EnvironmentEntry, _Mapping]]] = ..., error: _Optional[_Union[RunError, _Mapping]] = ..., effect: _Optional[_Union[Effect, _Mapping]] = ..., lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., actor: _Optional[_Union[Actor, _Mapping]] = ..., resolved_by: _Optional[_Union[Actor, _Mapping]] = ..., resolution_action: _Optional[str] = ..., reason: _Optional[str] = ..., candidate: _Optional[_Union[Candidate, _Mapping]] = ..., counts: _Optional[_Mapping[str, int]] = ..., degraded: _Optional[bool] = ...) -> None: ...

class Executor(_message.Message):
    __slots__ = ("id", "kind", "executor_version", "harness", "harness_version", "helper_generation")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    HARNESS_VERSION_FIELD_NUMBER: _ClassVar[int]
    HELPER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    executor_version: str
    harness: str
    harness_version: str
    helper_generation: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., executor_version: _Optional[str] = ..., harness: _Optional[str] = ..., harness_version: _Optional[str] = ..., helper_generation: _Optional[str] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ("provider", "model", "profile", "tags", "thinking")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    profile: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    thinking: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., profile: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., thinking: _Optional[str] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("duration_ms", "started_at", "finished_at", "queue_ms", "agent_ms")
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    AGENT_MS_FIELD_NUMBER: _ClassVar[int]
    duration_ms: int
    started_at: str
    finished_at: str
    queue_ms: int
    agent_ms: int
    def __init__(self, duration_ms: _Optional[int] = ..., started_at: _Optional[str] = ..., finished_at: _Optional[str] = ..., queue_ms: _Optional[int] = ..., agent_ms: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost", "currency", "cost_kind")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    CURRENCY_FIELD_NUMBER: _ClassVar[int]
    COST_KIND_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost: float
    currency: str
    cost_kind: str
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_read_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ..., cost: _Optional[float] = ..., currency: _Optional[str] = ..., cost_kind: _Optional[str] = ...) -> None: ...

class FileChange(_message.Message):
    __slots__ = ("repository_id", "added", "modified", "deleted", "redacted_path_count")
    REPOSITORY_ID_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    REDACTED_PATH_COUNT_FIELD_NUMBER: _ClassVar[int]
    repository_id: str
    added: _containers.RepeatedScalarFieldContainer[str]
    modified: _containers.RepeatedScalarFieldContainer[str]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    redacted_path_count: int
    def __init__(self, repository_id: _Optional[str] = ..., added: _Optional[_Iterable[str]] = ..., modified: _Optional[_Iterable[str]] = ..., deleted: _Optional[_Iterable[str]] = ..., redacted_path_count: _Optional[int] = ...) -> None: ...

class EvidenceRef(_message.Message):
    __slots__ = ("id", "kind", "hash", "status", "producer_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    hash: str
    status: str
    producer_id: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., hash: _Optional[str] = ..., status: _Optional[str] = ..., producer_id: _Optional[str] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("id", "kind", "hash", "size", "availability", "classification")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    CLASSIFICATION_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    hash: str
    size: int
    availability: str
    classification: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., hash: _Optional[str] = ..., size: _Optional[int] = ..., availability: _Optional[str] = ..., classification: _Optional[str] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("provider", "kind", "id", "hash", "observed_at")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    provider: str
    kind: str
    id: str
    hash: str
    observed_at: str
    def __init__(self, provider: _Optional[str] = ..., kind: _Optional[str] = ..., id: _Optional[str] = ..., hash: _Optional[str] = ..., observed_at: _Optional[str] = ...) -> None: ...

class EnvironmentEntry(_message.Message):
    __slots__ = ("name", "scope", "status", "source", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    scope: str
    status: str
    source: str
    version: str
    def __init__(self, name: _Optional[str] = ..., scope: _Optional[str] = ..., status: _Optional[str] = ..., source: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class RunError(_message.Message):
    __slots__ = ("error_class", "component", "retryable")
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    error_class: str
    component: str
    retryable: bool
    def __init__(self, error_class: _Optional[str] = ..., component: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class EffectPolicy(_message.Message):
    __slots__ = ("policy_class", "shared_mutable", "idempotency_key", "receipt_query")
    POLICY_CLASS_FIELD_NUMBER: _ClassVar[int]
    SHARED_MUTABLE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_QUERY_FIELD_NUMBER: _ClassVar[int]
    policy_class: str
    shared_mutable: bool
    idempotency_key: str
    receipt_query: str
    def __init__(self, policy_class: _Optional[str] = ..., shared_mutable: _Optional[bool] = ..., idempotency_key: _Optional[str] = ..., receipt_query: _Optional[str] = ...) -> None: ...

class Effect(_message.Message):
    __slots__ = ("id", "policy", "idempotency_key_hash")
    ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_HASH_FIELD_NUMBER: _ClassVar[int]
    id: str
    policy: EffectPolicy
    idempotency_key_hash: str
    def __init__(self, id: _Optional[str] = ..., policy: _Optional[_Union[EffectPolicy, _Mapping]] = ..., idempotency_key_hash: _Optional[str] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("id", "fencing_token", "acquired_at", "expires_at", "operation")
    ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    id: str
    fencing_token: str
    acquired_at: str
    expires_at: str
    operation: str
    def __init__(self, id: _Optional[str] = ..., fencing_token: _Optional[str] = ..., acquired_at: _Optional[str] = ..., expires_at: _Optional[str] = ..., operation: _Optional[str] = ...) -> None: ...

class Actor(_message.Message):
    __slots__ = ("kind", "id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    id: str
    def __init__(self, kind: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("id", "type", "summary", "confidence", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    summary: str
    confidence: float
    status: str
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., summary: _Optional[str] = ..., confidence: _Optional[float] = ..., status: _Optional[str] = ...) -> None: ...
