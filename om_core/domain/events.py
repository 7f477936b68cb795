"""The event catalogue of the OM lifecycle.

Every change to a record is one of these events appended to the record's stream. Payloads are pydantic
models so that what is stored is validated on the way in and on the way out; the storage envelope
(``NewEvent``/``RecordedEvent``) only sees their JSON.

Sequence numbers (``seq``) number the messages of a stream 1, 2, 3...; ranges are inclusive. The observation
cursor of a record is the highest ``seq`` covered by its observation log.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from om_core.domain.envelope import JSONDict, NewEvent, RecordedEvent

TriggeredBy = Literal["threshold", "ttl", "provider_change", "block_after", "manual"]
# What the parser made of one Observer or Reflector answer: in the output format; not, but observations
# were recovered from it; a repetition loop, rejected; nothing usable in it.
AnswerVerdict = Literal["parsed", "repaired", "degenerate", "empty"]


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0
    calls: int = 1
    # one per Observer/Reflector answer, in order (schema extractors' JSON answers are not judged)
    verdicts: tuple[AnswerVerdict, ...] = ()


class DomainEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    event_type: ClassVar[str]
    schema_version: ClassVar[int] = 1


# --- threads and messages ---------------------------------------------------------------------------------


class ThreadConfigured(DomainEvent):
    """A thread was created or its title, metadata or memory configuration changed."""

    event_type: ClassVar[str] = "ThreadConfigured"

    thread_id: str
    resource_id: str | None = None
    title: str | None = None
    metadata: JSONDict | None = None
    # per-thread overrides of the server profile, camelCase as the client sent them; None = unchanged
    config: JSONDict | None = None
    # the named memory profile the thread runs under; None = unchanged (a new thread: the default)
    profile: str | None = None
    at: str


class MessageAppended(DomainEvent):
    event_type: ClassVar[str] = "MessageAppended"

    seq: int
    message_id: str
    thread_id: str | None
    resource_id: str | None = None
    role: str
    created_at: str
    model: str | None = None
    tokens: int
    content_hash: str
    message: JSONDict
    text: str


class TemporalMarkerInserted(DomainEvent):
    """A gap line placed before a user message that followed ≥ 10 minutes of silence."""

    event_type: ClassVar[str] = "TemporalMarkerInserted"

    seq: int
    marker_id: str
    thread_id: str | None
    before_message_id: str
    text: str
    tokens: int
    created_at: str


# --- observation buffering --------------------------------------------------------------------------------


class ObservationBufferRequested(DomainEvent):
    event_type: ClassVar[str] = "ObservationBufferRequested"

    cycle_id: str
    from_seq: int
    to_seq: int
    message_tokens: int
    pending_tokens: int
    trigger: Literal["interval", "idle", "manual"]
    requested_at: str


class ObservationBufferStarted(DomainEvent):
    event_type: ClassVar[str] = "ObservationBufferStarted"

    cycle_id: str
    attempt: int
    started_at: str


class ObservationOutcome(DomainEvent):
    """Observations of exactly the messages ``from_seq..to_seq`` of a cycle, with what was extracted."""

    cycle_id: str
    from_seq: int
    to_seq: int
    message_ids: list[str]
    message_tokens: int
    observations: str
    observation_tokens: int
    last_observed_at: str
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    extracted: JSONDict = {}
    extraction_failures: JSONDict = {}
    usage: Usage = Usage()
    completed_at: str
    duration_ms: float = 0.0
    # the whole updated working-memory document (observation.manageWorkingMemory); None: unchanged, and in
    # every event stored before om kept working memory
    working_memory: str | None = None


# The usage of a failure stored before failures recorded it, or of one no model call led to (a cycle found
# stuck): nothing known, no call counted.
UNRECORDED_USAGE = Usage(calls=0)


# Why a cycle failed when it was not its model: its worker was lost (its lease lapsed), or no outcome came in
# time (the stuck-cycle sweep). Such a cycle's work is requested again at once.
FailureReason = Literal["worker_lost", "timeout"]


class ObservationFailure(DomainEvent):
    """An observation cycle failed for good: its model work (after the gateway's retries), or, with a
    ``reason``, the work itself was lost."""

    cycle_id: str
    error: str
    attempts: int = 1
    # every model call the cycle made before it failed: failed calls cost time, and often tokens too
    usage: Usage = UNRECORDED_USAGE
    failed_at: str
    # None: the model failed. Left out of the stored event then, which stays what it was before reasons
    reason: FailureReason | None = Field(default=None, exclude_if=lambda value: value is None)


class StaleOutcome(DomainEvent):
    """A cycle's result arrived after the cycle stopped being the one in flight: recorded, never applied."""

    cycle_id: str
    reason: str
    # what the discarded answer's calls cost; None when no model was called (the cycle was already over),
    # and then left out of the stored event, which stays what it was before stale results had usage
    usage: Usage | None = Field(default=None, exclude_if=lambda value: value is None)
    at: str


class ObservationBufferCompleted(ObservationOutcome):
    """A chunk: waits in the buffer until an activation appends it to the log."""

    event_type: ClassVar[str] = "ObservationBufferCompleted"


class ObservationBufferFailed(ObservationFailure):
    event_type: ClassVar[str] = "ObservationBufferFailed"


class ObservationBufferStale(StaleOutcome):
    """A buffer result for messages that were observed meanwhile."""

    event_type: ClassVar[str] = "ObservationBufferStale"


class ChunksActivated(DomainEvent):
    event_type: ClassVar[str] = "ChunksActivated"

    cycle_ids: list[str]
    through_seq: int
    message_tokens: int
    observation_tokens: int
    triggered_by: TriggeredBy
    activated_at: str
    last_activity_at: str | None = None
    ttl_expired_ms: int | None = None
    previous_model: str | None = None
    current_model: str | None = None


# --- synchronous observation ------------------------------------------------------------------------------


class SyncObservationStarted(DomainEvent):
    event_type: ClassVar[str] = "SyncObservationStarted"

    cycle_id: str
    from_seq: int
    to_seq: int
    message_tokens: int
    trigger: Literal["threshold", "block_after", "manual"]
    started_at: str
    # buffered chunks that reached into the newest turn, dropped unactivated (docs/semantics.md)
    discarded_chunks: list[str] = []


class SyncObservationCompleted(ObservationOutcome):
    """Observed while a reader waited: appended to the log at once."""

    event_type: ClassVar[str] = "SyncObservationCompleted"


class SyncObservationFailed(ObservationFailure):
    event_type: ClassVar[str] = "SyncObservationFailed"


class SyncObservationStale(StaleOutcome):
    event_type: ClassVar[str] = "SyncObservationStale"


# --- reflection -------------------------------------------------------------------------------------------


class ReflectionRequested(DomainEvent):
    """Reflection of the first ``line_count`` lines of generation ``generation``'s log."""

    event_type: ClassVar[str] = "ReflectionRequested"

    cycle_id: str
    mode: Literal["buffered", "sync"]
    generation: int
    line_count: int
    input_tokens: int
    target_tokens: int
    requested_at: str


class ReflectionBuffered(DomainEvent):
    """A background reflection waiting for activation; its extracted values apply at once, as Mastra's."""

    event_type: ClassVar[str] = "ReflectionBuffered"

    cycle_id: str
    generation: int
    line_count: int
    input_tokens: int
    text: str
    tokens: int
    levels_tried: list[int] = []
    # reflection.extract; empty in events stored before reflection extractors ran
    extracted: JSONDict = {}
    extraction_failures: JSONDict = {}
    usage: Usage = Usage()
    completed_at: str
    duration_ms: float = 0.0


class ReflectionActivated(DomainEvent):
    """A buffered reflection became the new generation; log lines written after its slice are kept."""

    event_type: ClassVar[str] = "ReflectionActivated"

    cycle_id: str
    new_generation: int
    observation_tokens_before: int
    observation_tokens: int
    triggered_by: TriggeredBy
    activated_at: str


class ReflectionCompleted(DomainEvent):
    """A synchronous reflection committed as the new generation."""

    event_type: ClassVar[str] = "ReflectionCompleted"

    cycle_id: str
    new_generation: int
    line_count: int
    input_tokens: int
    text: str
    tokens: int
    # the new generation's size: the reflection plus the log lines written after its slice
    observation_tokens: int
    over_target: bool
    levels_tried: list[int] = []
    extracted: JSONDict = {}
    extraction_failures: JSONDict = {}
    # the suggested response a synchronous reflection gave (reflection.continuationHints); none: the record
    # keeps its own
    suggested_response: str | None = None
    usage: Usage = Usage()
    completed_at: str
    duration_ms: float = 0.0


class ReflectionFailed(DomainEvent):
    event_type: ClassVar[str] = "ReflectionFailed"

    cycle_id: str
    mode: Literal["buffered", "sync"]
    error: str
    observation_tokens: int
    levels_tried: list[int] = []
    usage: Usage = UNRECORDED_USAGE
    failed_at: str
    reason: FailureReason | None = Field(default=None, exclude_if=lambda value: value is None)


class ReflectionStale(StaleOutcome):
    event_type: ClassVar[str] = "ReflectionStale"


# --- metadata ---------------------------------------------------------------------------------------------


class ThreadTitleChanged(DomainEvent):
    event_type: ClassVar[str] = "ThreadTitleChanged"

    thread_id: str
    old_title: str | None
    new_title: str
    cycle_id: str
    at: str


class ValuesExtracted(DomainEvent):
    event_type: ClassVar[str] = "ValuesExtracted"

    cycle_id: str
    values: JSONDict
    failures: JSONDict = {}
    at: str


class ContextReturnedOverBudget(DomainEvent):
    """failurePolicy ``continue``: a context was returned over blockAfter because observation failed."""

    event_type: ClassVar[str] = "ContextReturnedOverBudget"

    pending_tokens: int
    block_after_tokens: int
    reason: str
    at: str


# --- a tenant's named profiles (their own streams, folded by om_core/domain/profiles.py) ---------------


class ProfileSet(DomainEvent):
    """A tenant's named profile was created or replaced: ``options`` is the whole configuration."""

    event_type: ClassVar[str] = "ProfileSet"

    name: str
    options: JSONDict
    # who: the API key's label (or the tenant) that made the change
    by: str
    at: str


class ProfileDeleted(DomainEvent):
    event_type: ClassVar[str] = "ProfileDeleted"

    name: str
    by: str
    at: str


# the events of a record's stream; a profile's stream holds only PROFILE_EVENT_CLASSES
EVENT_CLASSES: dict[str, type[DomainEvent]] = {
    cls.event_type: cls
    for cls in (
        ThreadConfigured,
        MessageAppended,
        TemporalMarkerInserted,
        ObservationBufferRequested,
        ObservationBufferStarted,
        ObservationBufferCompleted,
        ObservationBufferFailed,
        ObservationBufferStale,
        ChunksActivated,
        SyncObservationStarted,
        SyncObservationCompleted,
        SyncObservationFailed,
        SyncObservationStale,
        ReflectionRequested,
        ReflectionBuffered,
        ReflectionActivated,
        ReflectionCompleted,
        ReflectionFailed,
        ReflectionStale,
        ThreadTitleChanged,
        ValuesExtracted,
        ContextReturnedOverBudget,
    )
}
PROFILE_EVENT_CLASSES: dict[str, type[DomainEvent]] = {
    cls.event_type: cls for cls in (ProfileSet, ProfileDeleted)
}


class UnknownEventTypeError(ValueError):
    def __init__(self, event_type: str) -> None:
        super().__init__(f"unknown event type {event_type!r}")
        self.event_type = event_type


def to_new_event(
    event: DomainEvent, *, metadata: JSONDict | None = None, event_id: uuid.UUID | None = None
) -> NewEvent:
    return NewEvent(
        event_type=event.event_type,
        data=event.model_dump(mode="json"),
        metadata=dict(metadata or {}),
        event_id=event_id or uuid.uuid4(),
        schema_version=event.schema_version,
    )


def from_recorded(recorded: RecordedEvent) -> DomainEvent:
    return decode_event(recorded.event_type, recorded.data)


def decode_event(event_type: str, data: dict[str, Any]) -> DomainEvent:
    cls = EVENT_CLASSES.get(event_type) or PROFILE_EVENT_CLASSES.get(event_type)
    if cls is None:
        raise UnknownEventTypeError(event_type)
    return cls.model_validate(data)


def effect_event_id(stream_id: str, cycle_id: str, effect: str) -> uuid.UUID:
    """A deterministic event id for the outcome of a cycle.

    Two deliveries of the same task compute the same id, so the store rejects the second outcome as a
    duplicate instead of applying it twice.
    """
    return uuid.uuid5(uuid.NAMESPACE_URL, f"om:{stream_id}:{cycle_id}:{effect}")
