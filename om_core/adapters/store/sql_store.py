"""The event store over SQLAlchemy Core: Postgres (psycopg 3) in production, SQLite embedded.

Postgres appends are one statement run in autocommit: the events insert (its compare-and-set on the stream
version), the inline projection upsert, the message projection and the outbox rows are data-modifying CTEs
of a single ``WITH ... SELECT``. One round trip, and atomic, because a statement is its own transaction.
Array parameters (``unnest``) keep the SQL text the same for any batch size, so psycopg prepares it once
per connection.

SQLite has a single writer: appends take a process-wide lock and ``BEGIN IMMEDIATE``, check the version,
then run the same writes as separate statements.
"""

from __future__ import annotations

import functools
import json
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine, Row, make_url
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.types import TypeEngine

from om_core.adapters.store import schema
from om_core.adapters.store.schema import events, messages, outbox, records
from om_core.application.ports import (
    ConcurrencyError,
    DuplicateEventError,
    DuplicateMessageError,
    EventStore,
    MessageConflictError,
    OutboxTask,
    StoredMessage,
    StoreUnavailableError,
)
from om_core.domain.envelope import (
    AppendResult,
    JSONDict,
    NewEvent,
    RecordedEvent,
    StateSnapshot,
    StoredMessageRef,
    TaskRequest,
)
from om_core.domain.upcasting import Upcasters

MESSAGE_APPENDED = "MessageAppended"

# Bounded so that an IN list stays far below SQLite's and Postgres' parameter limits.
_IN_CHUNK = 500
_STREAM_PAGE = 1000

json_dumps: Callable[[Any], str] = functools.partial(
    json.dumps, ensure_ascii=False, separators=(",", ":"), allow_nan=False
)
json_loads: Callable[[str | bytes], Any] = json.loads


def create_event_store(
    url: str,
    *,
    upcasters: Upcasters | None = None,
    pool_size: int = 5,
    max_overflow: int = 10,
) -> SqlEventStore:
    """A store for a ``postgresql+psycopg://`` or ``sqlite:///`` URL. The schema must be migrated already."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database
        if not database or database == ":memory:":
            raise ValueError("the SQLite store needs a database file; an in-memory database is per connection")
        Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            parsed,
            connect_args={"check_same_thread": False, "timeout": 30},
            json_serializer=json_dumps,
            json_deserializer=json_loads,
        )
        _configure_sqlite(engine)
    elif backend == "postgresql":
        engine = sa.create_engine(
            parsed,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=True,
            json_serializer=json_dumps,
            json_deserializer=json_loads,
        )
    else:
        raise ValueError(f"unsupported database {backend!r}: use postgresql+psycopg:// or sqlite:///")
    return SqlEventStore(engine, upcasters=upcasters)


def _configure_sqlite(engine: Engine) -> None:
    @sa_event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # pysqlite's own transaction handling issues BEGIN lazily and never IMMEDIATE; take it over.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        # In WAL mode NORMAL survives an application crash; only an OS crash can lose the last commits.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @sa_event.listens_for(engine, "begin")
    def on_begin(connection: Connection) -> None:
        # IMMEDIATE takes the write lock up front, so a writer never fails halfway on a lock upgrade.
        immediate = connection.get_execution_options().get("om_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


_SQLITE_WRITE_LOCKS: dict[str, threading.Lock] = {}
_SQLITE_WRITE_LOCKS_GUARD = threading.Lock()


def _sqlite_write_lock(engine: Engine) -> threading.Lock:
    """One lock per database file in this process, shared by every store opened on it."""
    key = str(Path(str(engine.url.database)).expanduser().resolve())
    with _SQLITE_WRITE_LOCKS_GUARD:
        return _SQLITE_WRITE_LOCKS.setdefault(key, threading.Lock())


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

_MESSAGE_COLUMNS = (
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


class _Precompiled:
    """A statement compiled once and run as driver SQL.

    SQLAlchemy 2.0 cannot build a cache key for ``ON CONFLICT`` clauses and would compile the append
    statement again on every call, which cost more than the database work. The statements compiled here
    take only plain text and integer parameters, so skipping SQLAlchemy's bind processing changes nothing.
    """

    def __init__(self, statement: sa.ClauseElement, dialect: sa.Dialect) -> None:
        self._compiled = statement.compile(dialect=dialect)
        self._sql = str(self._compiled)

    def _parameters(self, values: Mapping[str, Any]) -> Any:
        params = self._compiled.construct_params(dict(values))
        if self._compiled.positiontup is not None:
            return tuple(params[name] for name in self._compiled.positiontup)
        return params

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> sa.CursorResult[Any]:
        return conn.exec_driver_sql(self._sql, self._parameters(values))

    def executemany(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        conn.exec_driver_sql(self._sql, [self._parameters(row) for row in rows])


class SqlEventStore(EventStore):
    def __init__(self, engine: Engine, *, upcasters: Upcasters | None = None) -> None:
        self._engine = engine
        self._upcasters = upcasters or Upcasters()
        self._postgres = engine.dialect.name == "postgresql"
        if self._postgres:
            # Single statements need no BEGIN/COMMIT round trips; multi-statement work uses ``engine``.
            self._autocommit: Engine = engine.execution_options(isolation_level="AUTOCOMMIT")
            self._write_lock: threading.Lock | None = None
        elif engine.dialect.name == "sqlite":
            self._autocommit = engine
            self._write_lock = _sqlite_write_lock(engine)
        else:
            raise ValueError(f"unsupported dialect {engine.dialect.name!r}")
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
        snapshot: StateSnapshot | None = None,
        tasks: Sequence[TaskRequest] = (),
    ) -> AppendResult:
        if not events:
            raise ValueError("append needs at least one event")
        if expected_version < 0:
            raise ValueError(f"expected_version must be >= 0, got {expected_version}")
        if len({e.event_id for e in events}) != len(events):
            raise ValueError("an event id appears twice in one append")
        message_rows = _message_rows(stream_id, events, expected_version)
        with _unavailable_on_connection_errors():
            if self._postgres:
                positions = self._append_postgres(
                    stream_id, events, expected_version, snapshot, tasks, message_rows
                )
            else:
                positions = self._append_sqlite(
                    stream_id, events, expected_version, snapshot, tasks, message_rows
                )
        return AppendResult(
            stream_id=stream_id,
            first_version=expected_version + 1,
            last_version=expected_version + len(events),
            global_positions=tuple(positions),
        )

    def _append_postgres(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected: int,
        snapshot: StateSnapshot | None,
        tasks: Sequence[TaskRequest],
        message_rows: list[_MessageRow],
    ) -> list[int]:
        params: dict[str, Any] = {
            "stream_id": stream_id,
            "expected": expected,
            "ev_version": [expected + i for i in range(1, len(new_events) + 1)],
            "ev_id": [str(e.event_id) for e in new_events],
            "ev_type": [e.event_type for e in new_events],
            "ev_schema": [e.schema_version for e in new_events],
            "ev_data": [json_dumps(e.data) for e in new_events],
            "ev_meta": [json_dumps(e.metadata) for e in new_events],
        }
        if snapshot is not None:
            params.update(
                tenant=snapshot.tenant,
                thread_id=snapshot.thread_id,
                resource_id=snapshot.resource_id,
                last_version=expected + len(new_events),
                state=json_dumps(snapshot.state),
            )
        if message_rows:
            default_resource = snapshot.resource_id if snapshot is not None else None
            params.update(
                m_tenant=_tenant(stream_id, snapshot),
                m_id=[m.message_id for m in message_rows],
                m_seq=[m.seq for m in message_rows],
                m_version=[m.stream_version for m in message_rows],
                m_thread=[m.thread_id for m in message_rows],
                m_resource=[m.resource_id or default_resource for m in message_rows],
                m_role=[m.role for m in message_rows],
                m_created=[m.created_at.isoformat() for m in message_rows],
                m_tokens=[m.tokens for m in message_rows],
                m_hash=[m.content_hash for m in message_rows],
                m_message=[json_dumps(m.message) for m in message_rows],
                m_search=[m.search for m in message_rows],
            )
        if tasks:
            params.update(
                t_key=[t.key for t in tasks],
                t_name=[t.task_name for t in tasks],
                t_queue=[t.queue for t in tasks],
                t_payload=[json_dumps(t.payload) for t in tasks],
            )
        statement = self._statement(
            _postgres_append_statement, snapshot is not None, bool(message_rows), bool(tasks)
        )
        with self._autocommit.connect() as conn:
            try:
                rows = statement.execute(conn, params).all()
            except sa.exc.IntegrityError as error:
                raise self._append_failure(conn, error, stream_id, new_events, expected, message_rows) from None
            if not rows:
                raise self._conflict(conn, stream_id, new_events, expected)
        return [position for position, _ in sorted(rows, key=lambda row: row[1])]

    def _append_sqlite(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected: int,
        snapshot: StateSnapshot | None,
        tasks: Sequence[TaskRequest],
        message_rows: list[_MessageRow],
    ) -> list[int]:
        assert self._write_lock is not None
        with self._write_lock, self._engine.connect() as conn:
            conn.execution_options(om_write=True)
            try:
                with conn.begin():
                    if _current_version(conn, stream_id) != expected:
                        raise _Conflict
                    result = conn.execute(
                        sa.insert(events).returning(events.c.global_position, sort_by_parameter_order=True),
                        [
                            {
                                "stream_id": stream_id,
                                "stream_version": expected + i,
                                "event_id": e.event_id,
                                "event_type": e.event_type,
                                "schema_version": e.schema_version,
                                "data": e.data,
                                "metadata": e.metadata,
                            }
                            for i, e in enumerate(new_events, start=1)
                        ],
                    )
                    positions = list(result.scalars())
                    if snapshot is not None:
                        self._statement(_sqlite_upsert_record).execute(
                            conn, _record_params(stream_id, snapshot, expected + len(new_events))
                        )
                    if message_rows:
                        tenant = _tenant(stream_id, snapshot)
                        default_resource = snapshot.resource_id if snapshot is not None else None
                        conn.execute(
                            sa.insert(messages),
                            [
                                {
                                    "stream_id": stream_id,
                                    "tenant": tenant,
                                    "message_id": m.message_id,
                                    "seq": m.seq,
                                    "stream_version": m.stream_version,
                                    "thread_id": m.thread_id,
                                    "resource_id": m.resource_id or default_resource,
                                    "role": m.role,
                                    "created_at": m.created_at,
                                    "tokens": m.tokens,
                                    "content_hash": m.content_hash,
                                    "message": m.message,
                                    "search": m.search,
                                }
                                for m in message_rows
                            ],
                        )
                    if tasks:
                        self._statement(_sqlite_insert_tasks).executemany(
                            conn,
                            [
                                {
                                    "key": t.key,
                                    "stream_id": stream_id,
                                    "task_name": t.task_name,
                                    "queue": t.queue,
                                    "payload": json_dumps(t.payload),
                                }
                                for t in tasks
                            ],
                        )
            except _Conflict:
                raise self._conflict(conn, stream_id, new_events, expected) from None
            except sa.exc.IntegrityError as error:
                raise self._append_failure(conn, error, stream_id, new_events, expected, message_rows) from None
        return positions

    def _append_failure(
        self,
        conn: Connection,
        error: sa.exc.IntegrityError,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected: int,
        message_rows: list[_MessageRow],
    ) -> Exception:
        """Name the rule an append broke, after its transaction has rolled back."""
        if conn.in_transaction():
            conn.rollback()
        violated = _violated_key(error)
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
        return error

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
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            return [self._recorded(row) for row in conn.execute(query)]

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """Events after ``after_position``, in the order they became safe to read.

        SQLite commits one writer at a time in position order, so this is position order there.
        Postgres hands out positions before commit, in no fixed relation to commit order: a reader that
        followed positions alone would step past a transaction still open with a lower position. Events are
        therefore delivered in ``(tx_id, global_position)`` order, and only from transactions older than the
        oldest one still open (``tx_id < pg_snapshot_xmin(pg_current_snapshot())``): every earlier transaction
        has finished, so nothing can appear behind the reader. Positions rise within a stream and within a
        transaction; across transactions they may step back. Pass the position of the last event received as
        ``after_position``. If that event has been erased meanwhile (``delete_stream``) the store can no
        longer place it and resumes with the events positioned after it.
        """
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            if not self._postgres:
                query = (
                    sa.select(*_EVENT_COLUMNS)
                    .where(events.c.global_position > after_position)
                    .order_by(events.c.global_position)
                    .limit(limit)
                )
                return [self._recorded(row) for row in conn.execute(query)]
            horizon = sa.func.pg_snapshot_xmin(sa.func.pg_current_snapshot())
            query = sa.select(*_EVENT_COLUMNS).where(events.c.tx_id < horizon)
            cursor_tx = None
            if after_position > 0:
                cursor_tx = conn.scalar(
                    sa.select(sa.cast(events.c.tx_id, sa.Text)).where(
                        events.c.global_position == after_position
                    )
                )
            if cursor_tx is not None:
                query = query.where(
                    sa.tuple_(events.c.tx_id, events.c.global_position)
                    > sa.tuple_(sa.cast(sa.literal(cursor_tx, sa.Text), schema.Xid8()), sa.literal(after_position))
                )
            elif after_position > 0:
                query = query.where(events.c.global_position > after_position)
            query = query.order_by(events.c.tx_id, events.c.global_position).limit(limit)
            return [self._recorded(row) for row in conn.execute(query)]

    def find_event(self, event_id: uuid.UUID) -> RecordedEvent | None:
        query = sa.select(*_EVENT_COLUMNS).where(events.c.event_id == event_id)
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._recorded(row)

    def stream_version(self, stream_id: str) -> int:
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            return _current_version(conn, stream_id)

    def _recorded(self, row: Row[Any]) -> RecordedEvent:
        schema_version, data = self._upcasters.upcast(row.event_type, row.schema_version, row.data)
        return RecordedEvent(
            global_position=row.global_position,
            stream_id=row.stream_id,
            stream_version=row.stream_version,
            event_id=row.event_id,
            event_type=row.event_type,
            schema_version=schema_version,
            data=data,
            metadata=row.metadata,
            recorded_at=row.recorded_at,
        )

    # --- projections ---------------------------------------------------------------------------------

    def load_snapshot(self, stream_id: str) -> tuple[JSONDict, int] | None:
        query = sa.select(records.c.state, records.c.version).where(records.c.stream_id == stream_id)
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else (row.state, row.version)

    def replace_snapshot(self, stream_id: str, snapshot: StateSnapshot, version: int) -> None:
        params = _record_params(stream_id, snapshot, version)
        with _unavailable_on_connection_errors(), self._writing() as conn:
            upsert = _postgres_upsert_record if self._postgres else _sqlite_upsert_record
            self._statement(upsert).execute(conn, params)

    def find_messages(self, stream_id: str, message_ids: Iterable[str]) -> dict[str, StoredMessageRef]:
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            return _find_messages(conn, stream_id, list(dict.fromkeys(message_ids)))

    def read_messages(
        self,
        stream_id: str,
        *,
        thread_id: str | None = None,
        cursor: tuple[datetime, str] | None = None,
        backward: bool = False,
        limit: int = 50,
    ) -> list[StoredMessage]:
        key = sa.tuple_(messages.c.created_at, messages.c.message_id)
        query = sa.select(*_MESSAGE_COLUMNS).where(messages.c.stream_id == stream_id)
        if thread_id is not None:
            query = query.where(messages.c.thread_id == thread_id)
        if cursor is not None:
            bound = sa.tuple_(
                sa.literal(cursor[0], schema.UtcDateTime()), sa.literal(cursor[1], sa.Text())
            )
            query = query.where(key < bound if backward else key > bound)
        if backward:
            query = query.order_by(messages.c.created_at.desc(), messages.c.message_id.desc())
        else:
            query = query.order_by(messages.c.created_at, messages.c.message_id)
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            rows = conn.execute(query.limit(limit)).all()
        if backward:
            rows.reverse()
        return [
            StoredMessage(
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
            for row in rows
        ]

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
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            return list(conn.scalars(query))

    def iter_streams(self, prefix: str = "") -> Iterator[str]:
        after = ""
        while True:
            page = self.list_stream_ids(prefix, after=after, limit=_STREAM_PAGE)
            yield from page
            if len(page) < _STREAM_PAGE:
                return
            after = page[-1]

    # --- erasing -------------------------------------------------------------------------------------

    def delete_stream(self, stream_id: str) -> int:
        with _unavailable_on_connection_errors(), self._writing() as conn:
            removed = conn.execute(sa.delete(events).where(events.c.stream_id == stream_id)).rowcount
            conn.execute(sa.delete(records).where(records.c.stream_id == stream_id))
            conn.execute(sa.delete(messages).where(messages.c.stream_id == stream_id))
            conn.execute(
                sa.delete(outbox).where(outbox.c.stream_id == stream_id, outbox.c.published_at.is_(None))
            )
        return int(removed)

    # --- outbox --------------------------------------------------------------------------------------

    def fetch_unpublished_tasks(self, limit: int = 100, older_than_seconds: float = 0.0) -> list[OutboxTask]:
        # The database clock wrote created_at; compare against it, not against this host's clock.
        with _unavailable_on_connection_errors(), self._autocommit.connect() as conn:
            now = conn.scalar(sa.select(sa.type_coerce(schema.UtcNow(), schema.UtcDateTime())))
            assert isinstance(now, datetime)
            query = (
                sa.select(outbox)
                .where(
                    outbox.c.published_at.is_(None),
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
        if not ids:
            return 0
        changed = 0
        with _unavailable_on_connection_errors(), self._writing() as conn:
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = list(ids[start : start + _IN_CHUNK])
                changed += conn.execute(
                    sa.update(outbox)
                    .where(outbox.c.id.in_(chunk), outbox.c.published_at.is_(None))
                    .values(published_at=schema.UtcNow())
                ).rowcount
        return changed

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A write transaction; on SQLite under the process lock and ``BEGIN IMMEDIATE``."""
        if self._write_lock is None:
            with self._engine.begin() as conn:
                yield conn
            return
        with self._write_lock, self._engine.connect() as conn:
            conn.execution_options(om_write=True)
            with conn.begin():
                yield conn


class _Conflict(Exception):
    """Internal: the SQLite version check failed inside the write transaction."""


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


def _violated_key(error: sa.exc.IntegrityError) -> str | None:
    diag = getattr(error.orig, "diag", None)
    if diag is not None:
        name = getattr(diag, "constraint_name", None)
        return str(name) if name else None
    # SQLite names the columns, not the constraint: "UNIQUE constraint failed: om_events.event_id".
    text = str(error.orig)
    if "om_events.event_id" in text:
        return schema.EVENTS_EVENT_ID_KEY
    if "om_events.stream_id" in text:
        return schema.EVENTS_STREAM_VERSION_KEY
    if "om_messages.stream_id" in text:
        return schema.MESSAGES_KEY
    return None


def _current_version(conn: Connection, stream_id: str) -> int:
    version = conn.scalar(sa.select(sa.func.max(events.c.stream_version)).where(events.c.stream_id == stream_id))
    return int(version or 0)


def _existing_event_ids(conn: Connection, event_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    found: list[uuid.UUID] = []
    for start in range(0, len(event_ids), _IN_CHUNK):
        chunk = list(event_ids[start : start + _IN_CHUNK])
        found.extend(conn.scalars(sa.select(events.c.event_id).where(events.c.event_id.in_(chunk))))
    return found


def _find_messages(conn: Connection, stream_id: str, message_ids: Sequence[str]) -> dict[str, StoredMessageRef]:
    found: dict[str, StoredMessageRef] = {}
    for start in range(0, len(message_ids), _IN_CHUNK):
        chunk = list(message_ids[start : start + _IN_CHUNK])
        query = sa.select(messages.c.message_id, messages.c.content_hash, messages.c.stream_version).where(
            messages.c.stream_id == stream_id, messages.c.message_id.in_(chunk)
        )
        for row in conn.execute(query):
            found[row.message_id] = StoredMessageRef(
                message_id=row.message_id, content_hash=row.content_hash, stream_version=row.stream_version
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
        "state": json_dumps(snapshot.state),
    }


_RECORD_COLUMNS = ("stream_id", "tenant", "thread_id", "resource_id", "version", "state", "updated_at")
_RECORD_UPDATED = _RECORD_COLUMNS[1:]


def _upsert_record(
    insert: Callable[[sa.Table], Any], state: sa.ColumnElement[Any], condition: sa.ColumnElement[bool]
) -> sa.Insert:
    """The inline projection written as of ``last_version``; replaces whatever the row held."""
    source = sa.select(
        sa.bindparam("stream_id", type_=sa.Text()),
        sa.bindparam("tenant", type_=sa.Text()),
        sa.bindparam("thread_id", type_=sa.Text()),
        sa.bindparam("resource_id", type_=sa.Text()),
        sa.bindparam("last_version", type_=sa.BigInteger()),
        state,
        schema.UtcNow(),
    ).where(condition)
    statement = insert(records).from_select(list(_RECORD_COLUMNS), source)
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[records.c.stream_id], set_={name: statement.excluded[name] for name in _RECORD_UPDATED}
    )
    return upsert


def _state_param() -> BindParameter[str]:
    return sa.bindparam("state", type_=sa.Text())


def _sqlite_upsert_record() -> sa.Insert:
    # SQLite cannot tell an upsert's ON CONFLICT from a join constraint after INSERT ... SELECT unless the
    # SELECT has a WHERE clause, hence the WHERE true.
    return _upsert_record(sqlite.insert, sa.func.json(_state_param()), sa.true())


def _postgres_upsert_record() -> sa.Insert:
    return _upsert_record(postgresql.insert, sa.cast(_state_param(), postgresql.JSONB()), sa.true())


def _array(name: str, item: TypeEngine[Any]) -> BindParameter[Any]:
    return sa.bindparam(name, type_=postgresql.ARRAY(item))


def _sqlite_insert_tasks() -> sa.Insert:
    columns = ("key", "stream_id", "task_name", "queue", "payload")
    return (
        sqlite.insert(outbox)
        .values({name: sa.bindparam(name, type_=sa.Text()) for name in columns})
        .on_conflict_do_nothing(index_elements=[outbox.c.key])
    )


def _postgres_append_statement(with_snapshot: bool, with_messages: bool, with_tasks: bool) -> sa.Select[Any]:
    stream = sa.bindparam("stream_id", type_=sa.Text())
    expected = sa.bindparam("expected", type_=sa.BigInteger())
    jsonb = postgresql.JSONB()

    source = (
        sa.func.unnest(
            _array("ev_version", sa.BigInteger()),
            _array("ev_id", sa.Text()),
            _array("ev_type", sa.Text()),
            _array("ev_schema", sa.Integer()),
            _array("ev_data", sa.Text()),
            _array("ev_meta", sa.Text()),
        )
        .table_valued("version", "id", "type", "schema", "data", "meta", name="src")
        .render_derived()
    )
    previous_exists = (
        sa.select(sa.literal(1))
        .where(events.c.stream_id == stream, events.c.stream_version == expected)
        .exists()
    )
    inserted = (
        sa.insert(events)
        .from_select(
            ["stream_id", "stream_version", "event_id", "event_type", "schema_version", "data", "metadata"],
            sa.select(
                stream,
                source.c.version,
                sa.cast(source.c.id, postgresql.UUID()),
                source.c.type,
                source.c.schema,
                sa.cast(source.c.data, jsonb),
                sa.cast(source.c.meta, jsonb),
            )
            # The compare-and-set: version ``expected`` must exist (a gap is a conflict too), and the
            # unique (stream_id, stream_version) key refuses ``expected + 1`` if someone else wrote it.
            .where(sa.or_(expected == 0, previous_exists))
            .order_by(source.c.version),
        )
        .returning(events.c.global_position, events.c.stream_version)
        .cte("ev")
    )
    appended = sa.select(inserted.c.global_position).exists()
    dependent: list[sa.CTE] = []

    if with_snapshot:
        dependent.append(_upsert_record(postgresql.insert, sa.cast(_state_param(), jsonb), appended).cte("rec"))

    if with_messages:
        rows = (
            sa.func.unnest(
                _array("m_id", sa.Text()),
                _array("m_seq", sa.BigInteger()),
                _array("m_version", sa.BigInteger()),
                _array("m_thread", sa.Text()),
                _array("m_resource", sa.Text()),
                _array("m_role", sa.Text()),
                _array("m_created", sa.Text()),
                _array("m_tokens", sa.Integer()),
                _array("m_hash", sa.Text()),
                _array("m_message", sa.Text()),
                _array("m_search", sa.Text()),
            )
            .table_valued(
                "id", "seq", "version", "thread", "resource", "role", "created", "tokens", "hash", "message",
                "search", name="msg_src",
            )
            .render_derived()
        )
        message_insert = sa.insert(messages).from_select(
            [
                "stream_id", "message_id", "seq", "stream_version", "tenant", "thread_id", "resource_id", "role",
                "created_at", "tokens", "content_hash", "message", "search",
            ],
            sa.select(
                stream,
                rows.c.id,
                rows.c.seq,
                rows.c.version,
                sa.bindparam("m_tenant", type_=sa.Text()),
                rows.c.thread,
                rows.c.resource,
                rows.c.role,
                sa.cast(rows.c.created, postgresql.TIMESTAMP(timezone=True)),
                rows.c.tokens,
                rows.c.hash,
                sa.cast(rows.c.message, jsonb),
                rows.c.search,
            ).where(appended),
        )
        dependent.append(message_insert.cte("msg"))

    if with_tasks:
        task_rows = (
            sa.func.unnest(
                _array("t_key", sa.Text()),
                _array("t_name", sa.Text()),
                _array("t_queue", sa.Text()),
                _array("t_payload", sa.Text()),
            )
            .table_valued("key", "name", "queue", "payload", name="task_src")
            .render_derived()
        )
        task_insert = (
            postgresql.insert(outbox)
            .from_select(
                ["key", "stream_id", "task_name", "queue", "payload"],
                sa.select(
                    task_rows.c.key,
                    stream,
                    task_rows.c.name,
                    task_rows.c.queue,
                    sa.cast(task_rows.c.payload, jsonb),
                ).where(appended),
            )
            .on_conflict_do_nothing(index_elements=[outbox.c.key])
        )
        dependent.append(task_insert.cte("box"))

    return sa.select(inserted.c.global_position, inserted.c.stream_version).add_cte(*dependent)
