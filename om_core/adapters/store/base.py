"""The SQL event store's shared part: one abstract class over SQLAlchemy Core, one subclass per backend.

``SqlEventStore`` plays every role of the store's ports (``EventStore``, ``RecordProjection``,
``MessageQueries``, ``Outbox``, ``Leases``, ``VectorIndex``, ``ScanLocks``, ``ApiKeys``) and holds what both
backends do alike: the checks an append makes before it touches the database and the naming of the rule a
failed one broke, reading events, the record and message queries, the order of an erasure, the vector index,
the outbox, the leases and the API keys. Each backend overrides what differs: ``postgres.py`` (psycopg 3,
production) and ``sqlite.py`` (embedded) write appends, order ``read_all``, read a snapshot and its window,
search text, open transactions, erase a stream's events and take scan locks each its own way.
``create_event_store`` (``om_core.adapters.store``) picks the class from the URL.

Names with a leading underscore are private to this package: the backend modules share them.
"""

from __future__ import annotations

import abc
import functools
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter

from om_core.adapters.store import schema
from om_core.adapters.store.schema import api_keys, events, indexed_groups, leases, messages, outbox, records
from om_core.application.ports import (
    ALL_PROFILES,
    ApiKeys,
    ConcurrencyError,
    DuplicateEventError,
    DuplicateMessageError,
    EventStore,
    Lease,
    Leases,
    MessageConflictError,
    MessageHit,
    MessageQueries,
    Outbox,
    OutboxTask,
    RecordProjection,
    ScanLocks,
    StoreError,
    StoreUnavailableError,
    ThreadRow,
    VectorIndex,
)
from om_core.application.streams import thread_stream_id
from om_core.domain.envelope import (
    AppendResult,
    IndexedGroup,
    JSONDict,
    NewEvent,
    RecordedEvent,
    StateSnapshot,
    StoredMessage,
    StoredMessageRef,
    TaskRequest,
)
from om_core.domain.upcasting import Upcasters

MESSAGE_APPENDED = "MessageAppended"

# Bounded so that an IN list stays far below SQLite's and Postgres' parameter limits.
_IN_CHUNK = 500
# an erasure the database rolled back to break a deadlock is run again, this many times at most
_ERASE_ATTEMPTS = 5

_json_encode: Callable[[Any], str] = functools.partial(
    json.dumps, ensure_ascii=False, separators=(",", ":"), allow_nan=False
)
_json_decode = json.JSONDecoder().decode


def json_dumps(value: Any) -> str:
    """A document as stored: compact, UTF-8 as it is. orjson writes it in a fraction of the standard
    encoder's time (every append writes several); what orjson refuses (an integer beyond 64 bits, a key
    that is not a string) goes through the standard encoder, which writes it as it came. Numbers are finite
    by the time they get here (messages are checked, the API refuses NaN and Infinity)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return _json_encode(value)


def json_loads(document: str | bytes | bytearray | memoryview) -> Any:
    # psycopg hands over bytes; json.loads would sniff their encoding on every document.
    if not isinstance(document, str):
        document = bytes(document).decode()
    return _json_decode(document)


@dataclass(frozen=True, slots=True)
class _MessageRow:
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
    search: str


_EVENT_COLUMNS = (
    events.c.global_position,
    events.c.stream_id,
    events.c.stream_version,
    events.c.event_id,
    events.c.event_type,
    events.c.schema_version,
    events.c.data,
    events.c["metadata"],
    events.c.recorded_at,
)

MESSAGE_COLUMNS = (
    messages.c.stream_id,
    messages.c.message_id,
    messages.c.seq,
    messages.c.stream_version,
    messages.c.thread_id,
    messages.c.resource_id,
    messages.c.role,
    messages.c.created_at,
    messages.c.tokens,
    messages.c.content_hash,
    messages.c.message,
)


def stored_message(row: Any) -> StoredMessage:
    """A row of ``om_messages`` selected with ``MESSAGE_COLUMNS``."""
    return StoredMessage(
        stream_id=row.stream_id,
        message_id=row.message_id,
        seq=row.seq,
        stream_version=row.stream_version,
        thread_id=row.thread_id,
        resource_id=row.resource_id,
        role=row.role,
        created_at=row.created_at,
        tokens=row.tokens,
        content_hash=row.content_hash,
        message=row.message,
    )


def event_row_of_text(
    position: int,
    stream_id: str,
    version: int,
    event_id: str,
    event_type: str,
    schema_version: int,
    data: Any,
    metadata: Any,
    recorded_at: str,
) -> tuple[Any, ...]:
    """An event read with its id and time as text (SQLite's columns, a Postgres JSON aggregate), as a row of
    ``_EVENT_COLUMNS``; a time without an offset is UTC."""
    recorded = datetime.fromisoformat(recorded_at)
    recorded = recorded.replace(tzinfo=UTC) if recorded.tzinfo is None else recorded.astimezone(UTC)
    return (
        position,
        stream_id,
        version,
        uuid.UUID(event_id),
        event_type,
        schema_version,
        data,
        metadata,
        recorded,
    )


def stored_message_of(row: Sequence[Any], created_at: datetime) -> StoredMessage:
    """A row of ``MESSAGE_COLUMNS`` as the driver returns it (a tuple, the message as JSON text), with its
    time already read the way its backend stores it."""
    return StoredMessage(
        stream_id=row[0],
        message_id=row[1],
        seq=row[2],
        stream_version=row[3],
        thread_id=row[4],
        resource_id=row[5],
        role=row[6],
        created_at=created_at,
        tokens=row[8],
        content_hash=row[9],
        message=json_loads(row[10]),
    )


class _Precompiled:
    """A statement compiled once and run as driver SQL.

    SQLAlchemy 2.0 cannot build a cache key for ``ON CONFLICT`` clauses and would compile the append
    statement again on every call, which cost more than the database work. The statements compiled here
    take only plain text and integer parameters, so skipping SQLAlchemy's bind processing changes nothing.
    """

    def __init__(self, statement: sa.ClauseElement, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self._sql = str(compiled)
        # the values SQLAlchemy bound itself (the 0 of a coalesce), by name
        self._literals = {
            name: bind.effective_value for name, bind in compiled.binds.items() if not bind.required
        }
        # a positional dialect (SQLite's qmark) binds by place, in the order the names occur in the SQL
        self._positions = None if compiled.positiontup is None else tuple(compiled.positiontup)

    @property
    def sql(self) -> str:
        return self._sql

    def parameters(self, values: Mapping[str, Any]) -> Any:
        if self._positions is not None:
            literals = self._literals
            return tuple(values[name] if name in values else literals[name] for name in self._positions)
        return {**self._literals, **values}

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> sa.CursorResult[Any]:
        return conn.exec_driver_sql(self._sql, self.parameters(values))

    def executemany(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        conn.exec_driver_sql(self._sql, [self.parameters(row) for row in rows])


class SqlEventStore(
    EventStore, RecordProjection, MessageQueries, Outbox, Leases, VectorIndex, ScanLocks, ApiKeys
):
    """The event store on one engine, in every role of the store's ports. Build it with
    ``create_event_store``; ``SqlEventStore(engine)`` is the store of the engine's dialect.

    A backend subclass names its dialect (``class PostgresEventStore(SqlEventStore, dialect="postgresql")``)
    and provides ``_append_rows``, ``read_all``, ``load_snapshot``, ``_text_match``, ``_erase_events``,
    ``_source_event_stored``, the two upsert statements, ``_transaction``, ``_writing`` and ``try_lock``.
    """

    _backends: ClassVar[dict[str, type[SqlEventStore]]] = {}

    def __init_subclass__(cls, *, dialect: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        SqlEventStore._backends[dialect] = cls

    def __new__(cls, engine: Engine, *, upcasters: Upcasters | None = None) -> SqlEventStore:
        # the base class stands for the backend of the engine's dialect: code holding an engine (a test
        # reading with other upcasters) needs no backend import
        backend = SqlEventStore._backends.get(engine.dialect.name) if cls is SqlEventStore else cls
        if backend is None:
            raise ValueError(f"unsupported dialect {engine.dialect.name!r}")
        store: SqlEventStore = object.__new__(backend)
        return store

    def __init__(self, engine: Engine, *, upcasters: Upcasters | None = None) -> None:
        self._engine = engine
        self._upcasters = upcasters or Upcasters()
        self._precompiled: dict[tuple[Any, ...], _Precompiled] = {}

    def _statement(self, *key: Any) -> _Precompiled:
        statement = self._precompiled.get(key)
        if statement is None:
            builder, *args = key
            statement = _Precompiled(builder(*args), self._engine.dialect)
            self._precompiled[key] = statement
        return statement

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    # --- appending -----------------------------------------------------------------------------------

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
        if not events:
            raise ValueError("append needs at least one event")
        if expected_version < 0:
            raise ValueError(f"expected_version must be >= 0, got {expected_version}")
        if len(events) > 1 and len({e.event_id for e in events}) != len(events):
            raise ValueError("an event id appears twice in one append")
        if expected_version == 0:
            expected_position = None
        message_rows = _message_rows(stream_id, events, expected_version)
        expected = _Expected(expected_version, expected_position)
        with _unavailable_on_connection_errors():
            positions = self._append_rows(stream_id, events, expected, snapshot, tasks, message_rows)
        return AppendResult(
            stream_id=stream_id,
            first_version=expected_version + 1,
            last_version=expected_version + len(events),
            global_positions=tuple(positions),
        )

    @abc.abstractmethod
    def _append_rows(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected: _Expected,
        snapshot: StateSnapshot | None,
        tasks: Sequence[TaskRequest],
        message_rows: list[_MessageRow],
    ) -> list[int]:
        """Write an append's events, snapshot, message rows and outbox rows in one transaction, if the stream
        is where ``expected`` says; the events' global positions, in order. Raises what ``_conflict`` or
        ``_append_failure`` name, with nothing written."""

    def _append_failure(
        self,
        conn: Connection,
        violated: str | None,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected: int,
        message_rows: list[_MessageRow],
    ) -> Exception:
        """Name the rule an append broke, after its transaction has rolled back."""
        if violated in (schema.EVENTS_STREAM_VERSION_KEY, schema.EVENTS_EVENT_ID_KEY):
            return self._conflict(conn, stream_id, new_events, expected)
        if violated == schema.MESSAGES_KEY:
            stored = _find_messages(conn, stream_id, [m.message_id for m in message_rows])
            for row in message_rows:
                known = stored.get(row.message_id)
                if known is not None and known.content_hash != row.content_hash:
                    return MessageConflictError(stream_id, row.message_id)
            if stored:
                return DuplicateMessageError(stream_id, sorted(stored))
            return ConcurrencyError(stream_id, expected, _current_version(conn, stream_id))
        return StoreError(f"append to {stream_id!r} broke an unexpected constraint {violated!r}")

    def _conflict(
        self, conn: Connection, stream_id: str, new_events: Sequence[NewEvent], expected: int
    ) -> Exception:
        """A lost compare-and-set, or a repeat of events already stored (for instance the retry of an
        append whose commit was acknowledged too late): the repeat is the more useful thing to report."""
        stored = _existing_event_ids(conn, [e.event_id for e in new_events])
        if stored:
            return DuplicateEventError([str(i) for i in stored])
        return ConcurrencyError(stream_id, expected, _current_version(conn, stream_id))

    # --- reading events ------------------------------------------------------------------------------

    def read_stream(
        self, stream_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[RecordedEvent]:
        query = (
            sa.select(*_EVENT_COLUMNS)
            .where(events.c.stream_id == stream_id, events.c.stream_version > after_version)
            .order_by(events.c.stream_version)
        )
        if limit is not None:
            query = query.limit(limit)
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return [self._recorded(row) for row in conn.execute(query).all()]

    def find_event(self, event_id: uuid.UUID) -> RecordedEvent | None:
        query = sa.select(*_EVENT_COLUMNS).where(events.c.event_id == event_id)
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._recorded(row)

    def stream_version(self, stream_id: str) -> int:
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return _current_version(conn, stream_id)

    def _recorded(self, row: Row[Any] | tuple[Any, ...]) -> RecordedEvent:
        position, stream_id, version, event_id, event_type, stored_schema, data, metadata, recorded_at = row
        schema_version, data = self._upcasters.upcast(event_type, stored_schema, data)
        return RecordedEvent(
            global_position=position,
            stream_id=stream_id,
            stream_version=version,
            event_id=event_id,
            event_type=event_type,
            schema_version=schema_version,
            data=data,
            metadata=metadata,
            recorded_at=recorded_at,
        )

    # --- projections ---------------------------------------------------------------------------------

    @staticmethod
    @abc.abstractmethod
    def _record_upsert() -> sa.Insert:
        """The statement writing a record row as of ``last_version`` (``_upsert_record``), on its own."""

    def replace_snapshot(self, stream_id: str, snapshot: StateSnapshot, version: int) -> None:
        params = _record_params(stream_id, snapshot, version)
        with _unavailable_on_connection_errors(), self._writing() as conn:
            self._statement(self._record_upsert).execute(conn, params)

    def find_messages(self, stream_id: str, message_ids: Iterable[str]) -> dict[str, StoredMessageRef]:
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return _find_messages(conn, stream_id, list(dict.fromkeys(message_ids)))

    def read_messages(
        self,
        stream_id: str,
        *,
        thread_id: str | None = None,
        cursor: int | None = None,
        backward: bool = False,
        limit: int = 50,
    ) -> list[StoredMessage]:
        query = sa.select(*MESSAGE_COLUMNS).where(messages.c.stream_id == stream_id)
        if thread_id is not None:
            query = query.where(messages.c.thread_id == thread_id)
        if cursor is not None:
            query = query.where(messages.c.seq < cursor if backward else messages.c.seq > cursor)
        query = query.order_by(messages.c.seq.desc() if backward else messages.c.seq)
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            rows = list(conn.execute(query.limit(limit)))
        if backward:
            rows.reverse()
        return [stored_message(row) for row in rows]

    def messages_with_id(self, stream_ids: Sequence[str], message_id: str) -> list[StoredMessage]:
        if not stream_ids:
            return []
        query = (
            sa.select(*MESSAGE_COLUMNS)
            .where(messages.c.stream_id.in_(list(stream_ids)), messages.c.message_id == message_id)
            .order_by(messages.c.stream_id)
        )
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return [stored_message(row) for row in conn.execute(query)]

    def search_messages(
        self,
        tenant: str,
        text: str,
        *,
        stream_ids: Sequence[str] | None = None,
        thread_ids: Sequence[str] | None = None,
        limit: int = 10,
    ) -> list[MessageHit]:
        """The tenant's messages that match ``text`` (in ``stream_ids`` and ``thread_ids`` when given), best
        score first and newest first among equals; each backend says what matches and how it scores
        (``_text_match``)."""
        match = self._text_match(text)
        if match is None:
            return []
        matches, score = match
        scope = [messages.c.tenant == tenant, matches]
        if stream_ids is not None:
            scope.append(messages.c.stream_id.in_(list(stream_ids)))
        if thread_ids is not None:
            scope.append(messages.c.thread_id.in_(list(thread_ids)))
        query = (
            sa.select(*MESSAGE_COLUMNS, score.label("score"))
            .where(*scope)
            .order_by(score.desc(), messages.c.created_at.desc(), messages.c.seq.desc())
            .limit(limit)
        )
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        return [MessageHit(message=stored_message(row), score=float(row.score)) for row in rows]

    @abc.abstractmethod
    def _text_match(self, text: str) -> tuple[sa.ColumnElement[bool], sa.ColumnElement[Any]] | None:
        """The condition a message must meet to match ``text`` and its score; None when nothing can."""

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
        # a thread was created with the first event of its own stream; the (stream_id, stream_version) key
        # finds it without a column of its own
        first = events.alias("first_event")
        created_at = first.c.recorded_at
        columns = (records.c.stream_id, records.c.resource_id, records.c.version, records.c.state)
        query = (
            sa.select(*columns, records.c.updated_at, created_at.label("created_at"))
            .select_from(
                records.outerjoin(
                    first, sa.and_(first.c.stream_id == records.c.stream_id, first.c.stream_version == 1)
                )
            )
            .where(
                records.c.tenant == tenant,
                records.c.stream_id.startswith(thread_stream_id(tenant, ""), autoescape=True),
            )
        )
        if resource_id is not None:
            query = query.where(records.c.resource_id == resource_id)
        if thread_ids is not None:
            query = query.where(records.c.stream_id.in_([thread_stream_id(tenant, t) for t in thread_ids]))
        if profile != ALL_PROFILES:
            named = records.c.state["profile"].as_string()
            query = query.where(named.is_(None) if profile is None else named == profile)
        if created_before is not None:
            query = query.where(created_at < created_before)
        if created_after is not None:
            query = query.where(created_at > created_after)
        query = query.order_by(records.c.updated_at.desc(), records.c.stream_id).limit(limit).offset(offset)
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        out = []
        for row in rows:
            state = row.state or {}
            out.append(
                ThreadRow(
                    thread_id=str(state.get("thread_id") or row.stream_id.split("/", 2)[-1]),
                    resource_id=row.resource_id,
                    title=state.get("title"),
                    metadata=dict(state.get("thread_metadata") or {}),
                    config=dict(state.get("config_overrides") or {}),
                    version=int(row.version),
                    updated_at=row.updated_at,
                    created_at=row.created_at,
                    profile=state.get("profile"),
                )
            )
        return out

    def list_stream_ids(self, prefix: str = "", *, after: str = "", limit: int = 1000) -> list[str]:
        query = (
            sa.select(events.c.stream_id)
            .distinct()
            .where(events.c.stream_id > after)
            .order_by(events.c.stream_id)
            .limit(limit)
        )
        if prefix:
            query = query.where(events.c.stream_id.startswith(prefix, autoescape=True))
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return list(conn.scalars(query))

    # --- erasing -------------------------------------------------------------------------------------

    def delete_stream(self, stream_id: str) -> int:
        """Erase the events first, then everything derived from them, in one transaction.

        ``_erase_events`` deletes the stream's events until none is left, so that every later append or index
        write waits for this transaction and then finds its predecessor gone (how that takes one pass or
        several is the backend's). Only then are the projections, the outbox and the index erased, from a
        snapshot that includes everything the appends before it wrote.
        """
        erase_events = sa.delete(events).where(events.c.stream_id == stream_id)
        erase_derived = [
            sa.delete(records).where(records.c.stream_id == stream_id),
            sa.delete(messages).where(messages.c.stream_id == stream_id),
            sa.delete(outbox).where(outbox.c.stream_id == stream_id),
            sa.delete(indexed_groups).where(indexed_groups.c.stream_id == stream_id),
            sa.delete(leases).where(leases.c.stream_id == stream_id),
        ]
        for attempt in range(_ERASE_ATTEMPTS):
            try:
                with _unavailable_on_connection_errors(), self._transaction() as conn:
                    removed = self._erase_events(conn, erase_events)
                    for statement in erase_derived:
                        conn.execute(statement)
                    return removed
            except StoreUnavailableError as error:
                # the database chose this transaction as a deadlock's victim (it locks every event of the
                # stream while appends lock their predecessors): it was rolled back whole, so run it again
                if attempt + 1 == _ERASE_ATTEMPTS or not self._rolled_back_by_conflict(error.__cause__):
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    def _rolled_back_by_conflict(self, error: BaseException | None) -> bool:
        """Whether ``error`` is the database undoing a transaction to break a deadlock or a serialisation
        conflict (nothing was written; running it again is safe). Only Postgres does."""
        return False

    @abc.abstractmethod
    def _erase_events(self, conn: Connection, erase_events: sa.Delete) -> int:
        """Run ``erase_events`` in the erasure's transaction until no event of the stream is left; how many
        it deleted."""

    # --- vector index of observation groups ----------------------------------------------------------

    @staticmethod
    @abc.abstractmethod
    def _indexed_groups_upsert() -> sa.Insert:
        """The statement writing one indexed group, replacing the one with the same (stream, group id)."""

    def upsert_indexed_groups(self, groups: Sequence[IndexedGroup], *, source_event_id: uuid.UUID) -> int:
        if not groups:
            return 0
        upsert = self._statement(self._indexed_groups_upsert)
        rows = [{**asdict(g), "embedding": json_dumps(g.embedding)} for g in groups]
        with _unavailable_on_connection_errors(), self._transaction() as conn:
            if not self._source_event_stored(conn, source_event_id):
                return 0
            upsert.executemany(conn, rows)
            return len(rows)

    @abc.abstractmethod
    def _source_event_stored(self, conn: Connection, event_id: uuid.UUID) -> bool:
        """Whether the event indexed groups were written from is stored, checked in the write's transaction
        so that the write is ordered against an erasure, as an append's is."""

    def load_indexed_groups(
        self, tenant: str, *, stream_ids: Sequence[str] = (), resource_id: str | None = None
    ) -> list[IndexedGroup]:
        which: list[sa.ColumnElement[bool]] = []
        if stream_ids:
            which.append(indexed_groups.c.stream_id.in_(list(dict.fromkeys(stream_ids))))
        if resource_id is not None:
            which.append(indexed_groups.c.resource_id == resource_id)
        if not which:
            return []
        query = (
            sa.select(indexed_groups)
            .where(indexed_groups.c.tenant == tenant, sa.or_(*which))
            .order_by(indexed_groups.c.observed_at, indexed_groups.c.stream_id, indexed_groups.c.group_id)
        )
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        # the columns are the fields; embeddings come back as JSON numbers, integral ones as ints
        return [
            IndexedGroup(**{**row._mapping, "embedding": [float(v) for v in row.embedding]}) for row in rows
        ]

    # --- outbox --------------------------------------------------------------------------------------

    def fetch_unpublished_tasks(self, limit: int = 100, older_than_seconds: float = 0.0) -> list[OutboxTask]:
        # The database clock wrote created_at; compare against it, not against this host's clock.
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            now = conn.scalar(sa.select(sa.type_coerce(schema.UtcNow(), schema.UtcDateTime())))
            assert isinstance(now, datetime)
            query = (
                sa.select(outbox)
                .where(
                    outbox.c.published_at.is_(None),
                    outbox.c.completed_at.is_(None),
                    outbox.c.created_at <= now - timedelta(seconds=older_than_seconds),
                )
                .order_by(outbox.c.created_at, outbox.c.id)
                .limit(limit)
            )
            rows = conn.execute(query).all()
        return [
            OutboxTask(
                id=row.id,
                key=row.key,
                stream_id=row.stream_id,
                task_name=row.task_name,
                queue=row.queue,
                payload=row.payload,
                created_at=row.created_at,
                attempts=row.attempts,
            )
            for row in rows
        ]

    def mark_tasks_published(self, ids: Sequence[int]) -> int:
        return self._mark_published(outbox.c.id, ids)

    def mark_keys_published(self, keys: Sequence[str]) -> int:
        return self._mark_published(outbox.c.key, keys)

    def _mark_published(self, column: sa.Column[Any], values: Sequence[Any]) -> int:
        changed = 0
        with _unavailable_on_connection_errors(), self._writing() as conn:
            for start in range(0, len(values), _IN_CHUNK):
                chunk = list(values[start : start + _IN_CHUNK])
                changed += conn.execute(
                    sa.update(outbox)
                    .where(column.in_(chunk), outbox.c.published_at.is_(None))
                    .values(published_at=schema.UtcNow())
                ).rowcount
        return changed

    def mark_tasks_completed(self, keys: Sequence[str]) -> int:
        changed = 0
        with _unavailable_on_connection_errors(), self._writing() as conn:
            for start in range(0, len(keys), _IN_CHUNK):
                chunk = list(keys[start : start + _IN_CHUNK])
                changed += conn.execute(
                    sa.update(outbox)
                    .where(outbox.c.key.in_(chunk), outbox.c.completed_at.is_(None))
                    # a task run before it was published (inline, or by a reader's fallback) is never
                    # published afterwards
                    .values(
                        completed_at=schema.UtcNow(),
                        published_at=sa.func.coalesce(outbox.c.published_at, schema.UtcNow()),
                    )
                ).rowcount
        return changed

    def postpone_task(self, key: str, seconds: float) -> None:
        due = schema.UtcNowPlus(sa.literal(seconds, sa.Float()))
        with _unavailable_on_connection_errors(), self._writing() as conn:
            conn.execute(
                sa.update(outbox)
                .where(outbox.c.key == key, outbox.c.completed_at.is_(None))
                .values(published_at=due)
            )

    def requeue_lost_tasks(self, older_than_seconds: float, limit: int = 500) -> int:
        leased = sa.select(leases.c.key).where(leases.c.key == outbox.c.key).exists()
        lost = (
            sa.select(outbox.c.id)
            .where(
                outbox.c.published_at.is_not(None),
                outbox.c.completed_at.is_(None),
                outbox.c.published_at < schema.UtcNowPlus(sa.literal(-older_than_seconds, sa.Float())),
                ~leased,
            )
            .order_by(outbox.c.published_at)
            .limit(limit)
        )
        with _unavailable_on_connection_errors(), self._writing() as conn:
            ids = list(conn.scalars(lost))
            if not ids:
                return 0
            return int(
                conn.execute(
                    sa.update(outbox)
                    .where(outbox.c.id.in_(ids), outbox.c.completed_at.is_(None))
                    .values(published_at=None)
                ).rowcount
            )

    # --- leases on work in flight --------------------------------------------------------------------

    @staticmethod
    @abc.abstractmethod
    def _insert(table: sa.Table) -> Any:
        """The backend's INSERT, which knows ON CONFLICT."""

    def acquire_lease(
        self, key: str, stream_id: str, holder: str, seconds: float, *, replacing: str | None = None
    ) -> str | None:
        insert = self._insert(leases).values(
            key=key,
            stream_id=stream_id,
            holder=holder,
            expires_at=schema.UtcNowPlus(sa.literal(seconds, sa.Float())),
        )
        # never the holder's own live lease: two threads of one process must not both run the work
        takeable = [leases.c.expires_at < schema.UtcNow()]
        if replacing is not None:
            takeable.append(leases.c.holder == replacing)
        upsert = insert.on_conflict_do_update(
            index_elements=[leases.c.key],
            set_={
                "holder": insert.excluded.holder,
                "stream_id": insert.excluded.stream_id,
                "expires_at": insert.excluded.expires_at,
                "acquired_at": schema.UtcNow(),
            },
            where=sa.or_(*takeable),
        ).returning(leases.c.holder)
        with _unavailable_on_connection_errors(), self._writing() as conn:
            if conn.execute(upsert).first() is not None:
                return None
            current = conn.scalar(sa.select(leases.c.holder).where(leases.c.key == key))
        # released between the two statements: nobody holds it, but this caller does not either
        return str(current) if current is not None else ""

    def renew_leases(self, keys: Sequence[str], holder: str, seconds: float) -> set[str]:
        renewed: set[str] = set()
        with _unavailable_on_connection_errors(), self._writing() as conn:
            for start in range(0, len(keys), _IN_CHUNK):
                chunk = list(keys[start : start + _IN_CHUNK])
                renewed.update(
                    conn.scalars(
                        sa.update(leases)
                        .where(leases.c.key.in_(chunk), leases.c.holder == holder)
                        .values(expires_at=schema.UtcNowPlus(sa.literal(seconds, sa.Float())))
                        .returning(leases.c.key)
                    )
                )
        return renewed

    def release_lease(self, key: str, holder: str) -> None:
        with _unavailable_on_connection_errors(), self._writing() as conn:
            conn.execute(sa.delete(leases).where(leases.c.key == key, leases.c.holder == holder))

    def live_holder(self, key: str) -> str | None:
        query = sa.select(leases.c.holder).where(leases.c.key == key, leases.c.expires_at >= schema.UtcNow())
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            holder = conn.scalar(query)
        return None if holder is None else str(holder)

    def lapsed_leases(self, limit: int = 100) -> list[Lease]:
        query = (
            sa.select(leases.c.key, leases.c.stream_id, leases.c.holder, leases.c.expires_at)
            .where(leases.c.expires_at < schema.UtcNow())
            .order_by(leases.c.expires_at)
            .limit(limit)
        )
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return [Lease(r.key, r.stream_id, r.holder, r.expires_at) for r in conn.execute(query)]

    def remove_lapsed_lease(self, lease: Lease) -> bool:
        with _unavailable_on_connection_errors(), self._writing() as conn:
            removed = conn.execute(
                sa.delete(leases).where(
                    leases.c.key == lease.key,
                    leases.c.holder == lease.holder,
                    leases.c.expires_at < schema.UtcNow(),
                )
            ).rowcount
        return bool(removed)

    def list_streams_with_pending_work(self, *, after: str = "", limit: int = 500) -> list[str]:
        query = (
            sa.select(records.c.stream_id)
            .where(records.c.stream_id > after, records.c.pending_work)
            .order_by(records.c.stream_id)
            .limit(limit)
        )
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return list(conn.scalars(query))

    # --- API keys ------------------------------------------------------------------------------------

    def tenant_of_key(self, key_hash: str) -> str | None:
        query = sa.select(api_keys.c.tenant).where(api_keys.c.key_hash == key_hash)
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            stored = conn.scalar(query)
        return None if stored is None else str(stored)

    def add_key(self, key_hash: str, tenant: str, label: str | None = None) -> None:
        with _unavailable_on_connection_errors(), self._writing() as conn:
            conn.execute(sa.insert(api_keys).values(key_hash=key_hash, tenant=tenant, label=label))

    # --- connections ---------------------------------------------------------------------------------

    @abc.abstractmethod
    def _transaction(self) -> AbstractContextManager[Connection]:
        """A connection in a transaction of several statements, committed on success."""

    @abc.abstractmethod
    def _writing(self) -> AbstractContextManager[Connection]:
        """A connection that commits what it wrote on success."""


@dataclass(frozen=True, slots=True)
class _Expected:
    """Where an append expects the stream to be: its version, and the position of the event at it."""

    version: int
    position: int | None


@contextmanager
def _unavailable_on_connection_errors() -> Iterator[None]:
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:
        raise StoreUnavailableError(str(error.orig or error)) from error
    except sa.exc.TimeoutError as error:
        raise StoreUnavailableError(f"no database connection available: {error}") from error
    except sa.exc.DBAPIError as error:
        if error.connection_invalidated:
            raise StoreUnavailableError(str(error.orig or error)) from error
        raise


def _current_version(conn: Connection, stream_id: str) -> int:
    version = conn.scalar(
        sa.select(sa.func.max(events.c.stream_version)).where(events.c.stream_id == stream_id)
    )
    return int(version or 0)


def _existing_event_ids(conn: Connection, event_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    found: list[uuid.UUID] = []
    for start in range(0, len(event_ids), _IN_CHUNK):
        chunk = list(event_ids[start : start + _IN_CHUNK])
        found.extend(conn.scalars(sa.select(events.c.event_id).where(events.c.event_id.in_(chunk))))
    return found


def _find_messages(
    conn: Connection, stream_id: str, message_ids: Sequence[str]
) -> dict[str, StoredMessageRef]:
    found: dict[str, StoredMessageRef] = {}
    for start in range(0, len(message_ids), _IN_CHUNK):
        chunk = list(message_ids[start : start + _IN_CHUNK])
        query = sa.select(
            messages.c.message_id, messages.c.content_hash, messages.c.stream_version, messages.c.thread_id
        ).where(messages.c.stream_id == stream_id, messages.c.message_id.in_(chunk))
        for row in conn.execute(query):
            found[row.message_id] = StoredMessageRef(
                message_id=row.message_id,
                content_hash=row.content_hash,
                stream_version=row.stream_version,
                thread_id=row.thread_id,
            )
    return found


def _tenant(stream_id: str, snapshot: StateSnapshot | None) -> str:
    """Streams are named ``<tenant>/<kind>/<id>``; the snapshot, when there is one, says it outright."""
    if snapshot is not None:
        return snapshot.tenant
    return stream_id.split("/", 1)[0]


def _message_rows(stream_id: str, new_events: Sequence[NewEvent], expected: int) -> list[_MessageRow]:
    """The message projection rows of an append, checked against each other before anything is written."""
    rows: list[_MessageRow] = []
    seen: dict[str, str] = {}
    for version, new_event in enumerate(new_events, start=expected + 1):
        if new_event.event_type != MESSAGE_APPENDED:
            continue
        row = _message_row(new_event.data, version)
        previous = seen.get(row.message_id)
        if previous is not None:
            if previous != row.content_hash:
                raise MessageConflictError(stream_id, row.message_id)
            raise DuplicateMessageError(stream_id, [row.message_id])
        seen[row.message_id] = row.content_hash
        rows.append(row)
    return rows


def _message_row(data: Mapping[str, Any], version: int) -> _MessageRow:
    try:
        return _MessageRow(
            message_id=str(data["message_id"]),
            seq=int(data["seq"]),
            stream_version=version,
            thread_id=data.get("thread_id"),
            resource_id=data.get("resource_id"),
            role=str(data["role"]),
            created_at=_parse_time(str(data["created_at"])),
            tokens=int(data["tokens"]),
            content_hash=str(data["content_hash"]),
            message=dict(data["message"]),
            search=str(data.get("text") or ""),
        )
    except KeyError as missing:
        raise ValueError(f"{MESSAGE_APPENDED} data lacks {missing.args[0]!r}") from None


def _parse_time(value: str) -> datetime:
    """ISO-8601 as the domain writes it; a timestamp without an offset is UTC, as in the domain."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _record_params(stream_id: str, snapshot: StateSnapshot, version: int) -> dict[str, Any]:
    return {
        "stream_id": stream_id,
        "tenant": snapshot.tenant,
        "thread_id": snapshot.thread_id,
        "resource_id": snapshot.resource_id,
        "last_version": version,
        "state": _state_text(snapshot),
        "pending_work": snapshot.pending_work,
        "log": snapshot.log,
        "observed_seq": snapshot.observed_seq,
    }


_RECORD_COLUMNS = (
    "stream_id",
    "tenant",
    "thread_id",
    "resource_id",
    "version",
    "state",
    "updated_at",
    "position",
    "pending_work",
    "log",
    "observed_seq",
)
_RECORD_UPDATED = _RECORD_COLUMNS[1:]


def _upsert_record(
    insert: Callable[[sa.Table], Any],
    as_json: Callable[[BindParameter[str]], sa.ColumnElement[Any]],
    condition: sa.ColumnElement[bool],
    position: sa.ColumnElement[int] | None = None,
) -> sa.Insert:
    """The inline projection written as of ``last_version``; replaces whatever the row held, except a log
    the write leaves out (NULL), which keeps the stored one.

    ``position`` defaults to the stream's last stored event, which is right once the events are in.
    """
    if position is None:
        position = (
            sa.select(sa.func.coalesce(sa.func.max(events.c.global_position), 0))
            .where(events.c.stream_id == sa.bindparam("stream_id", type_=sa.Text()))
            .scalar_subquery()
        )
    source = sa.select(
        sa.bindparam("stream_id", type_=sa.Text()),
        sa.bindparam("tenant", type_=sa.Text()),
        sa.bindparam("thread_id", type_=sa.Text()),
        sa.bindparam("resource_id", type_=sa.Text()),
        sa.bindparam("last_version", type_=sa.BigInteger()),
        as_json(_state_param()),
        schema.UtcNow(),
        position,
        sa.bindparam("pending_work", type_=sa.Boolean()),
        as_json(sa.bindparam("log", type_=sa.Text())),
        sa.bindparam("observed_seq", type_=sa.BigInteger()),
    ).where(condition)
    statement = insert(records).from_select(list(_RECORD_COLUMNS), source)
    updated: dict[str, Any] = {name: statement.excluded[name] for name in _RECORD_UPDATED}
    updated["log"] = sa.func.coalesce(statement.excluded.log, records.c.log)
    upsert: sa.Insert = statement.on_conflict_do_update(index_elements=[records.c.stream_id], set_=updated)
    return upsert


def _upsert_indexed_groups(
    insert: Callable[[sa.Table], Any],
    as_json: Callable[[BindParameter[str]], sa.ColumnElement[Any]],
    *condition: sa.ColumnElement[bool],
) -> sa.Insert:
    """An indexed group written from parameters named as its columns, the embedding as JSON text."""
    columns = [c for c in indexed_groups.c]
    source = sa.select(
        *[
            sa.bindparam(c.name, type_=sa.Text())
            if c.name != "embedding"
            else as_json(sa.bindparam(c.name, type_=sa.Text()))
            for c in columns
        ]
    ).where(*condition)
    statement = insert(indexed_groups).from_select([c.name for c in columns], source)
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[indexed_groups.c.stream_id, indexed_groups.c.group_id],
        set_={c.name: statement.excluded[c.name] for c in columns if not c.primary_key},
    )
    return upsert


def _state_text(snapshot: StateSnapshot) -> str:
    return snapshot.state if isinstance(snapshot.state, str) else json_dumps(snapshot.state)


def _state_param() -> BindParameter[str]:
    return sa.bindparam("state", type_=sa.Text())


def _tasks_document(tasks: Sequence[TaskRequest]) -> str:
    return json_dumps(
        [{"key": t.key, "name": t.task_name, "queue": t.queue, "payload": t.payload} for t in tasks]
    )
