"""The storage envelope of an event: what the event store reads and writes.

Domain events (``om_core.domain.events``) are serialised into ``NewEvent`` before an append and come back
as ``RecordedEvent``; the store never interprets ``data`` beyond the message projection.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

JSONDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class NewEvent:
    event_type: str
    data: JSONDict
    metadata: JSONDict = field(default_factory=dict)
    event_id: uuid.UUID = field(default_factory=uuid.uuid4)
    schema_version: int = 1


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    global_position: int
    stream_id: str
    stream_version: int
    event_id: uuid.UUID
    event_type: str
    schema_version: int
    data: JSONDict
    metadata: JSONDict
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """A unit of model work written to the transactional outbox in the same transaction as its cause.

    ``key`` is unique across the outbox: writing the same key twice is a no-op, which is what makes a
    retried append or a duplicate policy decision harmless.
    """

    key: str
    task_name: str
    queue: str
    payload: JSONDict


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """The inline projection of a stream (the record state), written in the append transaction.

    ``state`` is a JSON object, or that object already serialised to JSON text (the application serialises
    its state in one pass, which is several times cheaper than building a dict and encoding it again).
    """

    state: JSONDict | str
    tenant: str
    thread_id: str | None
    resource_id: str | None
    # chunks waiting or a cycle in flight: the idle sweep and the stuck-cycle recovery look only at these
    pending_work: bool = False
    # the observation log's segments as JSON text when this write changed them; None keeps what is stored
    log: str | None = None
    # the seq of the last observed message: the window is the message rows after it
    observed_seq: int = 0


@dataclass(frozen=True, slots=True)
class IndexedGroup:
    """One observation group in the vector index (retrieval ``vector: true``): what recall's search ranks.

    ``range_start``/``range_end`` are the ids of the first and last messages it was written from, the cursor
    a model passes to recall to read them back. Keyed by (stream, group id): indexing again replaces it.
    """

    stream_id: str
    group_id: str
    tenant: str
    thread_id: str | None
    resource_id: str | None
    range_start: str
    range_end: str
    text: str
    observed_at: str
    model: str
    embedding: list[float]


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A row of the message projection."""

    stream_id: str
    message_id: str
    seq: int
    stream_version: int
    thread_id: str | None
    resource_id: str | None
    role: str
    created_at: datetime
    tokens: int
    content_hash: str
    message: JSONDict


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """A stream's inline projection as stored.

    ``position`` is the global position of the last event the snapshot covers. No other stream or version
    ever has it (an erased and re-created stream gets new positions), so it names this exact state: a
    reader that already holds the state of that position can skip the document. ``state`` is the JSON
    text, or None when the reader said it holds the state of ``position``.
    """

    state: str | None
    version: int
    position: int
    # the log's segments when stored apart from ``state`` (None: inside it, or left out with ``state``)
    log: str | None = None
    # the message rows after the row's ``observed_seq``, in seq order, read in the same snapshot as the row;
    # None when ``state`` is left out
    window: tuple[StoredMessage, ...] | None = None
    # the events since the state the reader holds, when the row came without its document for that reason
    # (``RecordProjection.load_snapshot``'s ``known_version``)
    events: tuple[RecordedEvent, ...] | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    stream_id: str
    first_version: int
    last_version: int
    global_positions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StoredMessageRef:
    message_id: str
    content_hash: str
    stream_version: int
    thread_id: str | None = None
