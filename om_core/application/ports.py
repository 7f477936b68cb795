"""Ports: the abstract interfaces the use cases depend on. Adapters implement them."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from om_core.domain.envelope import (
    AppendResult,
    JSONDict,
    NewEvent,
    RecordedEvent,
    StateSnapshot,
    StoredMessageRef,
    TaskRequest,
)


class StoreError(Exception):
    """Base of every error the event store raises on purpose."""


class ConcurrencyError(StoreError):
    """The stream moved past ``expected_version``: re-read and retry."""

    def __init__(self, stream_id: str, expected_version: int, actual_version: int | None = None) -> None:
        self.stream_id = stream_id
        self.expected_version = expected_version
        self.actual_version = actual_version
        super().__init__(f"stream {stream_id!r}: expected version {expected_version}, found {actual_version}")


class DuplicateEventError(StoreError):
    """An event id is already stored: the same effect was applied before."""

    def __init__(self, event_ids: Sequence[str]) -> None:
        self.event_ids = list(event_ids)
        super().__init__(f"event id(s) already stored: {', '.join(self.event_ids)}")


class MessageConflictError(StoreError):
    """A message id is already stored in the stream with different content."""

    def __init__(self, stream_id: str, message_id: str) -> None:
        self.stream_id = stream_id
        self.message_id = message_id
        super().__init__(
            f"message id {message_id!r} already exists in stream {stream_id!r} with different content"
        )


class StoreUnavailableError(StoreError):
    """The database could not be reached; nothing was written."""


class EventStore(abc.ABC):
    """An append-only store of event streams with compare-and-set appends and an inline projection."""

    @abc.abstractmethod
    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent],
        expected_version: int,
        *,
        snapshot: StateSnapshot | None = None,
        tasks: Sequence[TaskRequest] = (),
    ) -> AppendResult:
        """Append ``events`` if the stream is at ``expected_version`` (0 for a new stream).

        The snapshot, the message projection and the outbox rows are written in the same transaction.
        Raises ConcurrencyError, DuplicateEventError or MessageConflictError; on any error nothing is written.
        """

    @abc.abstractmethod
    def read_stream(
        self, stream_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Events of one stream with version > ``after_version``, in version order."""

    @abc.abstractmethod
    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """Events of every stream with global position > ``after_position`` in position order.

        Never skips an event that commits later with a lower position than one already returned.
        """

    @abc.abstractmethod
    def stream_version(self, stream_id: str) -> int:
        """The stream's current version, 0 when it has no events."""

    @abc.abstractmethod
    def load_snapshot(self, stream_id: str) -> tuple[JSONDict, int] | None:
        """The inline projection of a stream and the version it reflects."""

    @abc.abstractmethod
    def find_messages(self, stream_id: str, message_ids: Iterable[str]) -> dict[str, StoredMessageRef]:
        """Which of ``message_ids`` are already stored in the stream (idempotency keys)."""

    @abc.abstractmethod
    def delete_stream(self, stream_id: str) -> int:
        """Erase a stream: its events, projection, messages and queued work. Returns events removed."""


# --- model gateway -------------------------------------------------------------------------------------


class ModelError(Exception):
    """A model call failed."""

    def __init__(self, message: str, *, model: str, attempts: int = 1) -> None:
        self.model = model
        self.attempts = attempts
        super().__init__(message)


class TransientModelError(ModelError):
    """Worth retrying: rate limits, 5xx, timeouts, dropped connections."""


class PermanentModelError(ModelError):
    """Retrying cannot help: other 4xx, malformed requests, refused content."""


class ModelConfigurationError(Exception):
    """A configured model cannot be used at all (unknown provider, missing API key)."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    messages: list[JSONDict]
    purpose: str
    settings: JSONDict = field(default_factory=dict)
    provider_options: JSONDict = field(default_factory=dict)
    response_schema: JSONDict | None = None


@dataclass(frozen=True, slots=True)
class ModelUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class ModelResponse:
    text: str
    model: str
    usage: ModelUsage
    latency_ms: float
    attempts: int


class ModelGateway(abc.ABC):
    @abc.abstractmethod
    def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one model call, retrying transient failures within the configured bound."""
