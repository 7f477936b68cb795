"""Ports: the abstract interfaces the use cases depend on. Adapters implement them."""

from __future__ import annotations

import abc
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime

from om_core.domain.envelope import (
    AppendResult,
    IndexedGroup,
    JSONDict,
    NewEvent,
    RecordedEvent,
    StateSnapshot,
    StoredMessage,
    StoredMessageRef,
    StoredSnapshot,
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


class DuplicateMessageError(StoreError):
    """Message ids already stored in the stream with the same content: the append was a repeat.

    Raised by the store's backstop (the message table's key) when a caller appended without filtering
    known ids through ``find_messages`` first; nothing was written. Re-read and drop the duplicates.
    """

    def __init__(self, stream_id: str, message_ids: Sequence[str]) -> None:
        self.stream_id = stream_id
        self.message_ids = list(message_ids)
        super().__init__(
            f"message id(s) already stored in stream {stream_id!r}: {', '.join(self.message_ids)}"
        )


# --- the store, by role --------------------------------------------------------------------------------
#
# One SQL adapter plays every role below (om_core/adapters/store), but each use case asks only for the
# role it uses: ``Deps.store`` is the event store proper, ``Deps.records``, ``.messages``, ``.outbox``,
# ``.index``, ``.locks`` and ``.keys`` the others (see om_core/bootstrap.py).


@dataclass(frozen=True, slots=True)
class OutboxTask:
    """A task request as the outbox holds it until the relay has published it."""

    id: int
    key: str
    stream_id: str
    task_name: str
    queue: str
    payload: JSONDict
    created_at: datetime
    attempts: int


# ``list_threads(profile=ALL_PROFILES)``: threads of every profile (no profile name can be "*")
ALL_PROFILES = "*"


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """A thread's record as the record projection holds it: what listing threads shows."""

    thread_id: str
    resource_id: str | None
    title: str | None
    metadata: JSONDict
    config: JSONDict
    version: int
    updated_at: datetime | None
    # when the thread's own stream began (its first event), what recall's ``before``/``after`` filter on
    created_at: datetime | None = None
    # the named memory profile it runs under (None: the default)
    profile: str | None = None


@dataclass(frozen=True, slots=True)
class MessageHit:
    """A message a full-text search found, with its rank (higher is better)."""

    message: StoredMessage
    score: float


# ``iter_streams`` fetches stream ids this many at a time.
STREAM_PAGE = 1000


class EventStore(abc.ABC):
    """An append-only store of event streams with compare-and-set appends.

    An append also writes the projections derived from its events (the record row, the message rows, the
    outbox rows) in its own transaction; the other roles below read them.
    """

    @abc.abstractmethod
    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent],
        expected_version: int,
        *,
        expected_position: int | None = None,
        snapshot: StateSnapshot | None = None,
        tasks: Sequence[TaskRequest] = (),
    ) -> AppendResult:
        """Append ``events`` if the stream is at ``expected_version`` (0 for a new stream).

        With ``expected_position``, the event at ``expected_version`` must also be the one at that global
        position: a writer that read a stream before it was erased can never append to the stream re-created
        under the same id, even once that one reaches the same version. The event built on must still exist
        when the append commits, so an append racing an erasure either lands before it (and is erased with
        the rest) or fails with ConcurrencyError.

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
        """Events of every stream after the event at ``after_position``, in the order they became readable.

        Never skips an event that commits later with a lower position than one already returned, and never
        returns one twice. Positions rise within a stream; across streams they may step back (on Postgres
        the order is commit-safe, not positional), so pass the position of the last event received, not the
        highest one seen.
        """

    @abc.abstractmethod
    def stream_version(self, stream_id: str) -> int:
        """The stream's current version, 0 when it has no events."""

    @abc.abstractmethod
    def find_event(self, event_id: uuid.UUID) -> RecordedEvent | None:
        """The stored event with this id, if any: how a task learns a cycle's recorded outcome."""

    @abc.abstractmethod
    def list_stream_ids(self, prefix: str = "", *, after: str = "", limit: int = 1000) -> list[str]:
        """Ids of streams that have events, starting with ``prefix``, in id order after ``after``."""

    def iter_streams(self, prefix: str = "") -> Iterator[str]:
        """Every stream id starting with ``prefix``, in id order, fetched page by page."""
        after = ""
        while True:
            page = self.list_stream_ids(prefix, after=after, limit=STREAM_PAGE)
            yield from page
            if len(page) < STREAM_PAGE:
                return
            after = page[-1]

    @abc.abstractmethod
    def delete_stream(self, stream_id: str) -> int:
        """Erase a stream: its events, projection, messages, indexed groups and outbox rows. Returns events
        removed.

        Final: an append or an index write in flight either commits before the erasure (and is erased with
        the rest) or writes nothing, so once this returns nothing of the stream exists or comes back.
        """


# A snapshot that moved on by more events than this is read whole. An event folds in about the time a window
# message is parsed (most are messages), so folding more events than a window usually holds costs more than
# reading the document.
CATCH_UP_EVENTS = 16


class RecordProjection(abc.ABC):
    """The record projection: one row per stream, the record state as of the stream's last append."""

    @abc.abstractmethod
    def load_snapshot(
        self, stream_id: str, *, known_position: int | None = None, known_version: int | None = None
    ) -> StoredSnapshot | None:
        """The inline projection of a stream, the version it reflects, its last event's position and the
        window's message rows, all from one snapshot of the database: a concurrent append can never make the
        row and the messages disagree.

        When the snapshot is still the one of ``known_position``, its document and window are left out
        (``state`` is None): a caller that holds that state already pays for one small row.

        With ``known_version`` too (the version of the state held at ``known_position``), a snapshot that
        has moved on by at most ``CATCH_UP_EVENTS`` events comes with those events (``events``, in version
        order, through the snapshot's version) instead of its document and window, provided the stream's
        event of ``known_version`` is still the one at ``known_position`` (it is not when the stream was
        erased and created again): the caller folds them onto the state it holds, which costs a fraction of
        parsing the document and the window.
        """

    @abc.abstractmethod
    def replace_snapshot(self, stream_id: str, snapshot: StateSnapshot, version: int) -> None:
        """Overwrite the inline projection of a stream, as a projection rebuild does."""

    @abc.abstractmethod
    def list_streams_with_pending_work(self, *, after: str = "", limit: int = 500) -> list[str]:
        """Ids of records holding buffered chunks or a cycle in flight, in id order after ``after``.

        What the idle-TTL sweep and the stuck-cycle recovery scan; every other record has nothing to do.
        """

    @abc.abstractmethod
    def list_threads(
        self,
        tenant: str,
        *,
        resource_id: str | None = None,
        thread_ids: Sequence[str] | None = None,
        created_before: datetime | None = None,
        created_after: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
        profile: str | None = ALL_PROFILES,
    ) -> list[ThreadRow]:
        """The tenant's thread records (optionally of one resource, or these threads, created before/after a
        moment, running under one profile: None for the default), most recently updated first."""


class MessageQueries(abc.ABC):
    """The message projection: one row per appended message, what idempotency, paging and recall read."""

    @abc.abstractmethod
    def find_messages(self, stream_id: str, message_ids: Iterable[str]) -> dict[str, StoredMessageRef]:
        """Which of ``message_ids`` are already stored in the stream (idempotency keys)."""

    @abc.abstractmethod
    def read_messages(
        self,
        stream_id: str,
        *,
        thread_id: str | None = None,
        cursor: int | None = None,
        backward: bool = False,
        limit: int = 50,
    ) -> list[StoredMessage]:
        """A page of the stream's messages in stream order (``seq``), oldest first.

        Stream order, not creation time: the messages of one append share a moment, and their ids need not
        sort. Forward pages start after the message of seq ``cursor``; backward pages (``backward=True``)
        end right before it, so ``backward=True`` without a cursor is the latest ``limit`` messages.
        ``thread_id`` narrows a resource stream to one thread.
        """

    @abc.abstractmethod
    def messages_with_id(self, stream_ids: Sequence[str], message_id: str) -> list[StoredMessage]:
        """The message of that id in each of ``stream_ids`` that holds one (ids are unique per stream only).

        Recall resolves a cursor within the record's lineage this way, never across the tenant.
        """

    @abc.abstractmethod
    def search_messages(
        self,
        tenant: str,
        text: str,
        *,
        stream_ids: Sequence[str] | None = None,
        thread_ids: Sequence[str] | None = None,
        limit: int = 10,
    ) -> list[MessageHit]:
        """The tenant's messages (of ``stream_ids`` and ``thread_ids`` when given) whose text matches
        ``text``, best first."""


class Outbox(abc.ABC):
    """Task requests an append wrote, until they are handed to the broker, and until their run ended."""

    @abc.abstractmethod
    def fetch_unpublished_tasks(self, limit: int = 100, older_than_seconds: float = 0.0) -> list[OutboxTask]:
        """Outbox rows not yet published and created at least ``older_than_seconds`` ago, oldest first."""

    @abc.abstractmethod
    def mark_tasks_published(self, ids: Sequence[int]) -> int:
        """Record that outbox rows were handed to the broker. Returns how many rows changed."""

    @abc.abstractmethod
    def mark_keys_published(self, keys: Sequence[str]) -> int:
        """Record that the outbox rows with these task keys were handed to the broker.

        The dispatcher publishes right after commit and knows the keys, not the row ids.
        """

    @abc.abstractmethod
    def mark_tasks_completed(self, keys: Sequence[str]) -> int:
        """Record that the runs of these tasks ended (whatever their outcome): they need no publishing again.
        Returns how many rows changed."""

    @abc.abstractmethod
    def postpone_task(self, key: str, seconds: float) -> None:
        """Record that the task is due again only ``seconds`` from now (a retry waiting in a worker): until
        then its lateness is not counted."""

    @abc.abstractmethod
    def requeue_lost_tasks(self, older_than_seconds: float, limit: int = 500) -> int:
        """Mark unpublished, for the relay to publish again, the tasks published at least
        ``older_than_seconds`` ago (or due that long ago) whose run never completed and whose work nobody
        holds a lease on: the broker lost them (it restarted without its data, or the worker that took one
        died with it). Returns how many."""


class VectorIndex(abc.ABC):
    """Observation groups with their embeddings, for recall by meaning."""

    @abc.abstractmethod
    def upsert_indexed_groups(self, groups: Sequence[IndexedGroup], *, source_event_id: uuid.UUID) -> int:
        """Store observation groups in the vector index, replacing any with the same (stream, group id).

        Only while the event they were written from (``source_event_id``) is stored: groups of an erased
        stream are never written back. Returns how many were stored (0 when that event is gone).
        """

    @abc.abstractmethod
    def load_indexed_groups(
        self, tenant: str, *, stream_ids: Sequence[str] = (), resource_id: str | None = None
    ) -> list[IndexedGroup]:
        """The tenant's indexed groups of the streams ``stream_ids`` or of the resource, oldest first."""


@dataclass(frozen=True, slots=True)
class Lease:
    """Who holds a piece of work in flight, and until when (the database's clock) unless renewed."""

    key: str
    stream_id: str
    holder: str
    expires_at: datetime


class Leases(abc.ABC):
    """Leases on work in flight: a cycle a worker runs, a model call the proxy makes. The holder renews its
    leases while the work runs; one that stops renewing has died, and its work can be taken back."""

    @abc.abstractmethod
    def acquire_lease(
        self, key: str, stream_id: str, holder: str, seconds: float, *, replacing: str | None = None
    ) -> str | None:
        """Hold ``key`` for ``seconds`` if nobody does, its lease lapsed, or ``replacing`` holds it (a holder
        known dead). Returns None when held now, else the live holder (perhaps ``holder`` itself, in another
        thread)."""

    @abc.abstractmethod
    def renew_leases(self, keys: Sequence[str], holder: str, seconds: float) -> set[str]:
        """Extend ``holder``'s leases on ``keys`` to ``seconds`` from now. Returns the keys it still held."""

    @abc.abstractmethod
    def release_lease(self, key: str, holder: str) -> None:
        """Drop ``holder``'s lease on ``key`` (nothing if another holds it now)."""

    @abc.abstractmethod
    def live_holder(self, key: str) -> str | None:
        """Who holds a lease on ``key`` that has not lapsed; None when nobody does."""

    @abc.abstractmethod
    def lapsed_leases(self, limit: int = 100) -> list[Lease]:
        """Leases past their expiry, oldest first: their holders stopped renewing them."""

    @abc.abstractmethod
    def remove_lapsed_lease(self, lease: Lease) -> bool:
        """Delete ``lease`` if it is still lapsed and still ``lease.holder``'s. Returns whether it did."""


class ScanLocks(abc.ABC):
    """Locks that keep a maintenance scan from running twice at once, in any process on the database."""

    @abc.abstractmethod
    def try_lock(self, key: int) -> AbstractContextManager[bool]:
        """Yields whether this process now holds the lock ``key`` (released on exit); never waits for it."""


class ApiKeys(abc.ABC):
    """API keys stored by their SHA-256 (``om keys create``), each acting for one tenant."""

    @abc.abstractmethod
    def tenant_of_key(self, key_hash: str) -> str | None:
        """The tenant of the stored key with this hash, if any."""

    @abc.abstractmethod
    def add_key(self, key_hash: str, tenant: str, label: str | None = None) -> None:
        """Store a key's hash for ``tenant``."""


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


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    texts: list[str]


@dataclass(frozen=True, slots=True)
class EmbeddingResponse:
    vectors: list[list[float]]
    model: str
    usage: ModelUsage
    latency_ms: float
    attempts: int


class ModelGateway(abc.ABC):
    @abc.abstractmethod
    def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one model call, retrying transient failures within the configured bound."""

    @abc.abstractmethod
    def embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        """Embed texts (one vector each, in order), retrying transient failures within the same bound."""


# --- chat models (the OpenAI-compatible proxy) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatCall:
    """One chat-completions call made for an app: om's prompt, and the app's own request parameters
    (``tools``, ``tool_choice``, ``temperature``, ``stream_options``…), passed through unchanged."""

    model: str
    messages: list[JSONDict]
    options: JSONDict = field(default_factory=dict)
    # the provider key the request brought, when the server forwards such keys; else the server's own
    api_key: str | None = None


class ChatModelError(Exception):
    """A chat call the model or its provider refused or failed: what to answer the app with, as OpenAI's
    error object (``type``, ``code``, ``param``) and an HTTP status."""

    def __init__(
        self, status: int, message: str, *, kind: str, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.param = param


class ChatModels(abc.ABC):
    """Chat completions in OpenAI's shape, for the proxy. No retries: the app's own client retries what is
    worth retrying, on the status this answers with."""

    @abc.abstractmethod
    def chat(self, call: ChatCall) -> JSONDict:
        """A ``chat.completion`` object; raises ChatModelError."""

    @abc.abstractmethod
    def chat_stream(self, call: ChatCall) -> Iterator[JSONDict]:
        """``chat.completion.chunk`` objects. The call is made before this returns, so a refusal raises
        ChatModelError here; one during the stream raises it from the iterator."""


# --- work dispatch -------------------------------------------------------------------------------------


class WorkDispatcher(abc.ABC):
    """Hands committed task requests to whatever runs them.

    Called after the commit that wrote them to the outbox. Best effort: if it fails, the outbox still holds
    the request and the relay publishes it later, so a dispatcher must never raise into the caller.
    """

    # True when dispatch runs the work before it returns: nobody else will deliver it, so don't wait
    runs_inline: bool = False

    @abc.abstractmethod
    def dispatch(self, tasks: Sequence[TaskRequest]) -> None: ...
