"""The event store over SQLAlchemy Core: Postgres (psycopg 3) in production, SQLite embedded.

Postgres appends are one statement run in autocommit: the events insert (its compare-and-set on the stream
version), the inline projection upsert, the message projection and the outbox rows are data-modifying CTEs
of a single ``WITH ... SELECT``. One round trip, and atomic, because a statement is its own transaction.
A one-event append, the common case, passes every value as a parameter of its own; larger appends pass
their rows as JSON documents (``jsonb_to_recordset``), so the SQL text is the same for any batch size. Either
way there are a handful of statement texts, each prepared once per connection.

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
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine, Row, make_url
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter

from om_core.adapters.store import schema
from om_core.adapters.store.schema import events, indexed_groups, messages, outbox, records
from om_core.application.ports import (
    ConcurrencyError,
    DuplicateEventError,
    DuplicateMessageError,
    EventStore,
    MessageConflictError,
    OutboxTask,
    StoreError,
    StoreUnavailableError,
)
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
from om_core.domain.upcasting import Upcasters

MESSAGE_APPENDED = "MessageAppended"

# Bounded so that an IN list stays far below SQLite's and Postgres' parameter limits.
_IN_CHUNK = 500
_STREAM_PAGE = 1000
# The key of the append cursor in a pooled connection's ``info``.
_DRIVER_CURSOR = "om_driver_cursor"

json_dumps: Callable[[Any], str] = functools.partial(
    json.dumps, ensure_ascii=False, separators=(",", ":"), allow_nan=False
)
_json_decode = json.JSONDecoder().decode


def json_loads(document: str | bytes | bytearray | memoryview) -> Any:
    # psycopg hands over bytes; json.loads would sniff their encoding on every document.
    if not isinstance(document, str):
        document = bytes(document).decode()
    return _json_decode(document)


def create_event_store(
    url: str,
    *,
    upcasters: Upcasters | None = None,
    pool_size: int = 5,
    max_overflow: int = 10,
    pool_pre_ping: bool = False,
) -> SqlEventStore:
    """A store for a ``postgresql+psycopg://`` or ``sqlite:///`` URL. The schema must be migrated already.

    Without ``pool_pre_ping`` (a round trip on every checkout, about a third of a state read here) the first
    call after the database restarted fails with StoreUnavailableError and the pool reconnects.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database
        if not database or database == ":memory:":
            raise ValueError(
                "the SQLite store needs a database file; an in-memory database is per connection"
            )
        Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            parsed,
            connect_args={"check_same_thread": False, "timeout": 30},
            json_serializer=json_dumps,
            json_deserializer=json_loads,
        )
        _configure_sqlite(engine)
    elif backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        elif parsed.get_driver_name() != "psycopg":
            raise ValueError("the Postgres store runs on psycopg 3: use a postgresql+psycopg:// URL")
        engine = sa.create_engine(
            parsed,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=pool_pre_ping,
            isolation_level="AUTOCOMMIT",
            # A connection in autocommit holds no transaction to roll back when it goes back to the pool;
            # the rollback call cost about 5 % of an append's client CPU.
            pool_reset_on_return=None,
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


class _Precompiled:
    """A statement compiled once and run as driver SQL.

    SQLAlchemy 2.0 cannot build a cache key for ``ON CONFLICT`` clauses and would compile the append
    statement again on every call, which cost more than the database work. The statements compiled here
    take only plain text and integer parameters, so skipping SQLAlchemy's bind processing changes nothing.
    """

    def __init__(self, statement: sa.ClauseElement, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self._compiled = compiled
        self._sql = str(compiled)

    @property
    def sql(self) -> str:
        return self._sql

    def parameters(self, values: Mapping[str, Any]) -> Any:
        params = self._compiled.construct_params(dict(values))
        if self._compiled.positiontup is not None:
            return tuple(params[name] for name in self._compiled.positiontup)
        return params

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> sa.CursorResult[Any]:
        return conn.exec_driver_sql(self._sql, self.parameters(values))

    def executemany(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        conn.exec_driver_sql(self._sql, [self.parameters(row) for row in rows])


class SqlEventStore(EventStore):
    """The event store on one engine. Build it with ``create_event_store``.

    On Postgres every operation is a single statement and commits by itself, so the engine should run in
    AUTOCOMMIT isolation (``create_event_store`` sets it): that saves the BEGIN and COMMIT round trips. With
    another isolation level the store still commits what it writes, only slower.
    """

    def __init__(self, engine: Engine, *, upcasters: Upcasters | None = None) -> None:
        self._engine = engine
        self._upcasters = upcasters or Upcasters()
        self._postgres = engine.dialect.name == "postgresql"
        if self._postgres:
            self._write_lock: threading.Lock | None = None
        elif engine.dialect.name == "sqlite":
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
        expected_position: int | None = None,
        snapshot: StateSnapshot | None = None,
        tasks: Sequence[TaskRequest] = (),
    ) -> AppendResult:
        if not events:
            raise ValueError("append needs at least one event")
        if expected_version < 0:
            raise ValueError(f"expected_version must be >= 0, got {expected_version}")
        if len({e.event_id for e in events}) != len(events):
            raise ValueError("an event id appears twice in one append")
        if expected_version == 0:
            expected_position = None
        message_rows = _message_rows(stream_id, events, expected_version)
        expected = _Expected(expected_version, expected_position)
        with _unavailable_on_connection_errors():
            if self._postgres:
                positions = self._append_postgres(stream_id, events, expected, snapshot, tasks, message_rows)
            else:
                positions = self._append_sqlite(stream_id, events, expected, snapshot, tasks, message_rows)
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
        expected: _Expected,
        snapshot: StateSnapshot | None,
        tasks: Sequence[TaskRequest],
        message_rows: list[_MessageRow],
    ) -> list[int]:
        if len(new_events) == 1:
            sql, parameters = self._append_one_postgres(
                stream_id, new_events[0], expected, snapshot, tasks, message_rows
            )
        else:
            sql, parameters = self._append_many_postgres(
                stream_id, new_events, expected, snapshot, tasks, message_rows
            )
        try:
            rows = self._run_on_driver(sql, parameters)
        except psycopg.IntegrityError as error:
            failure: Exception | None = error
            rows = []
        else:
            failure = None
        if failure is not None or not rows:
            with self._engine.connect() as conn:
                if failure is None:
                    raise self._conflict(conn, stream_id, new_events, expected.version)
                raise self._append_failure(
                    conn, _violated_key(failure), stream_id, new_events, expected.version, message_rows
                ) from None
        if len(rows) == 1:
            return [rows[0][0]]
        return [position for position, _ in sorted(rows, key=lambda row: row[1])]

    def _run_on_driver(self, sql: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run one statement on the pooled driver connection (Postgres), committed; return its rows.

        The hot paths (append, state read) skip SQLAlchemy's Connection and result set-up: they took more
        client CPU than the statements themselves, and CPU is what 16 writers on 2 cores run out of. An
        IntegrityError propagates after a rollback; a lost connection is a StoreUnavailableError.
        """
        try:
            raw = self._engine.raw_connection()
        except psycopg.OperationalError as error:  # raw_connection passes connect errors on unwrapped
            raise StoreUnavailableError(str(error)) from error
        try:
            # One cursor per pooled connection, kept for its life: setting one up costs as much as
            # adapting the parameters.
            cursor = raw.info.get(_DRIVER_CURSOR)
            if cursor is None:
                driver = raw.driver_connection
                assert isinstance(driver, psycopg.Connection)
                cursor = raw.info[_DRIVER_CURSOR] = driver.cursor()
            # prepare=True: the statement texts are few and fixed, so prepare on first use, not the fifth.
            cursor.execute(sql, parameters, prepare=True)
            rows: list[tuple[Any, ...]] = cursor.fetchall()
            if not cursor.connection.autocommit:
                cursor.connection.commit()
            return rows
        except psycopg.IntegrityError:
            raw.rollback()
            raise
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            raw.invalidate(error)
            raise StoreUnavailableError(str(error)) from error
        finally:
            raw.close()

    def _append_one_postgres(
        self,
        stream_id: str,
        new_event: NewEvent,
        expected: _Expected,
        snapshot: StateSnapshot | None,
        tasks: Sequence[TaskRequest],
        message_rows: list[_MessageRow],
    ) -> tuple[str, tuple[Any, ...]]:
        """The statement and parameters of the commonest append, one event: every value is a parameter of
        its own, with no JSON document to build and unpack on either side."""
        parameters: list[Any] = [
            stream_id,
            expected.version + 1,
            new_event.event_id,
            new_event.event_type,
            new_event.schema_version,
            json_dumps(new_event.data),
            json_dumps(new_event.metadata) if new_event.metadata else "{}",
            expected.version,
            stream_id,
            expected.version,
            expected.position,
            expected.position,
        ]
        if snapshot is not None:
            parameters += (
                snapshot.tenant,
                snapshot.thread_id,
                snapshot.resource_id,
                _state_text(snapshot),
                snapshot.pending_work,
                snapshot.log,
                snapshot.observed_seq,
            )
        if message_rows:
            (m,) = message_rows
            parameters += (
                m.message_id,
                m.seq,
                _tenant(stream_id, snapshot),
                m.thread_id,
                m.resource_id or (snapshot.resource_id if snapshot is not None else None),
                m.role,
                m.created_at,
                m.tokens,
                m.content_hash,
                json_dumps(m.message),
                m.search,
            )
        if tasks:
            parameters.append(_tasks_document(tasks))
        sql = _postgres_append_one_sql(snapshot is not None, bool(message_rows), bool(tasks))
        return sql, tuple(parameters)

    def _append_many_postgres(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected: _Expected,
        snapshot: StateSnapshot | None,
        tasks: Sequence[TaskRequest],
        message_rows: list[_MessageRow],
    ) -> tuple[str, Any]:
        # Each group of rows travels as one JSON document: dumping Python lists as Postgres arrays
        # costs more client CPU than the whole statement costs the server.
        params: dict[str, Any] = {
            "stream_id": stream_id,
            "expected": expected.version,
            "expected_position": expected.position,
            "events": json_dumps(
                [
                    {
                        "version": version,
                        "id": str(e.event_id),
                        "type": e.event_type,
                        "schema": e.schema_version,
                        "data": e.data,
                        "meta": e.metadata,
                    }
                    for version, e in enumerate(new_events, start=expected.version + 1)
                ]
            ),
        }
        if snapshot is not None:
            params.update(_record_params(stream_id, snapshot, expected.version + len(new_events)))
        if message_rows:
            default_resource = snapshot.resource_id if snapshot is not None else None
            params["tenant_of_messages"] = _tenant(stream_id, snapshot)
            params["messages"] = json_dumps(
                [
                    {
                        "id": m.message_id,
                        "seq": m.seq,
                        "version": m.stream_version,
                        "thread": m.thread_id,
                        "resource": m.resource_id or default_resource,
                        "role": m.role,
                        "created": m.created_at.isoformat(),
                        "tokens": m.tokens,
                        "hash": m.content_hash,
                        "message": m.message,
                        "search": m.search,
                    }
                    for m in message_rows
                ]
            )
        if tasks:
            params["tasks"] = _tasks_document(tasks)
        statement = self._statement(
            _postgres_append_statement, snapshot is not None, bool(message_rows), bool(tasks)
        )
        return statement.sql, statement.parameters(params)

    def _append_sqlite(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected: _Expected,
        snapshot: StateSnapshot | None,
        tasks: Sequence[TaskRequest],
        message_rows: list[_MessageRow],
    ) -> list[int]:
        assert self._write_lock is not None
        with self._write_lock, self._engine.connect() as conn:
            conn.execution_options(om_write=True)
            try:
                with conn.begin():
                    if not _at_expected(conn, stream_id, expected):
                        raise _Conflict
                    result = conn.execute(
                        sa.insert(events).returning(events.c.global_position, sort_by_parameter_order=True),
                        [
                            {
                                "stream_id": stream_id,
                                "stream_version": expected.version + i,
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
                            conn, _record_params(stream_id, snapshot, expected.version + len(new_events))
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
                raise self._conflict(conn, stream_id, new_events, expected.version) from None
            except sa.exc.IntegrityError as error:
                raise self._append_failure(
                    conn, _violated_key(error.orig), stream_id, new_events, expected.version, message_rows
                ) from None
        return positions

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
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            if not self._postgres:
                query = (
                    sa.select(*_EVENT_COLUMNS)
                    .where(events.c.global_position > after_position)
                    .order_by(events.c.global_position)
                    .limit(limit)
                )
                return [self._recorded(row) for row in conn.execute(query).all()]
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
                    > sa.tuple_(
                        sa.cast(sa.literal(cursor_tx, sa.Text), schema.Xid8()), sa.literal(after_position)
                    )
                )
            elif after_position > 0:
                query = query.where(events.c.global_position > after_position)
            query = query.order_by(events.c.tx_id, events.c.global_position).limit(limit)
            return [self._recorded(row) for row in conn.execute(query).all()]

    def find_event(self, event_id: uuid.UUID) -> RecordedEvent | None:
        query = sa.select(*_EVENT_COLUMNS).where(events.c.event_id == event_id)
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._recorded(row)

    def stream_version(self, stream_id: str) -> int:
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return _current_version(conn, stream_id)

    def _recorded(self, row: Row[Any]) -> RecordedEvent:
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

    def load_snapshot(self, stream_id: str, *, known_position: int | None = None) -> StoredSnapshot | None:
        if self._postgres:
            found = self._run_on_driver(
                _POSTGRES_SNAPSHOT_SQL, (known_position, known_position, known_position, stream_id)
            )
            if not found:
                return None
            state, version, position, log, window = found[0]
            return StoredSnapshot(
                state, version, position, log, None if state is None else _window_from_json(stream_id, window)
            )

        def unless_known(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
            text = sa.cast(column, sa.Text())
            if known_position is None:
                return text
            return sa.case((records.c.position == known_position, None), else_=text)

        query = sa.select(
            unless_known(records.c.state).label("state"),
            records.c.version,
            records.c.position,
            unless_known(records.c.log).label("log"),
            records.c.observed_seq,
        ).where(records.c.stream_id == stream_id)
        # one read transaction: in WAL mode both reads see the same snapshot
        with _unavailable_on_connection_errors(), self._engine.connect() as conn, conn.begin():
            row = conn.execute(query).first()
            if row is None:
                return None
            window = None
            if row.state is not None:
                window = tuple(
                    stored_message(m) for m in conn.execute(_window_query(stream_id, row.observed_seq))
                )
        return StoredSnapshot(row.state, row.version, row.position, row.log, window)

    def replace_snapshot(self, stream_id: str, snapshot: StateSnapshot, version: int) -> None:
        params = _record_params(stream_id, snapshot, version)
        with _unavailable_on_connection_errors(), self._writing() as conn:
            upsert = _postgres_upsert_record if self._postgres else _sqlite_upsert_record
            self._statement(upsert).execute(conn, params)

    def find_messages(self, stream_id: str, message_ids: Iterable[str]) -> dict[str, StoredMessageRef]:
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
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
        query = sa.select(*MESSAGE_COLUMNS).where(messages.c.stream_id == stream_id)
        if thread_id is not None:
            query = query.where(messages.c.thread_id == thread_id)
        if cursor is not None:
            bound = sa.tuple_(sa.literal(cursor[0], schema.UtcDateTime()), sa.literal(cursor[1], sa.Text()))
            query = query.where(key < bound if backward else key > bound)
        if backward:
            query = query.order_by(messages.c.created_at.desc(), messages.c.message_id.desc())
        else:
            query = query.order_by(messages.c.created_at, messages.c.message_id)
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            rows = list(conn.execute(query.limit(limit)))
        if backward:
            rows.reverse()
        return [stored_message(row) for row in rows]

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
        """Erase the events first, then everything derived from them, in one transaction.

        SQLite has one writer at a time, so nothing can interleave. On Postgres (READ COMMITTED) a DELETE
        sees only what had committed when it started, and an append in flight may hold its predecessor
        locked (``FOR KEY SHARE``, see ``_postgres_append_one_sql``): the DELETE waits for it, and the event
        it then commits is newer than the DELETE's snapshot. So the events are deleted again, each time
        with a fresh snapshot, until a pass finds none: from then on every event of the stream is deleted
        and locked by this transaction, and any later append or index write waits for it and then finds
        its predecessor gone. Only then are the projections, the outbox and the index erased, from a
        snapshot that includes everything those appends wrote.
        """
        erase_events = sa.delete(events).where(events.c.stream_id == stream_id)
        erase_derived = [
            sa.delete(records).where(records.c.stream_id == stream_id),
            sa.delete(messages).where(messages.c.stream_id == stream_id),
            sa.delete(outbox).where(outbox.c.stream_id == stream_id),
            sa.delete(indexed_groups).where(indexed_groups.c.stream_id == stream_id),
        ]
        with _unavailable_on_connection_errors(), self._transaction() as conn:
            removed = 0
            while True:
                erased = int(conn.execute(erase_events).rowcount)
                removed += erased
                if erased == 0 or not self._postgres:
                    break
            for statement in erase_derived:
                conn.execute(statement)
            return removed

    # --- vector index of observation groups ----------------------------------------------------------

    def upsert_indexed_groups(self, groups: Sequence[IndexedGroup], *, source_event_id: uuid.UUID) -> int:
        if not groups:
            return 0
        upsert = self._statement(_upsert_indexed_groups, self._postgres)
        rows = [{**asdict(g), "embedding": json_dumps(g.embedding)} for g in groups]
        with _unavailable_on_connection_errors(), self._transaction() as conn:
            # the lock on the source event orders this write against an erasure, as an append's does
            if self._postgres:
                found = conn.execute(_LOCK_SOURCE_EVENT, {"source": source_event_id}).first()
            else:
                found = conn.execute(
                    sa.select(events.c.global_position).where(events.c.event_id == source_event_id)
                ).first()
            if found is None:
                return 0
            upsert.executemany(conn, rows)
            return len(rows)

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

    def list_streams_with_pending_work(self, *, after: str = "", limit: int = 500) -> list[str]:
        query = (
            sa.select(records.c.stream_id)
            .where(records.c.stream_id > after, records.c.pending_work)
            .order_by(records.c.stream_id)
            .limit(limit)
        )
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return list(conn.scalars(query))

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A connection in a transaction of several statements: on Postgres the engine's autocommit is
        switched off for this connection only (SQLAlchemy restores it when the connection goes back)."""
        if self._write_lock is not None:
            with self._writing() as conn:
                yield conn
            return
        with self._engine.connect() as conn:
            conn = conn.execution_options(isolation_level="READ COMMITTED")
            with conn.begin():
                yield conn

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A connection that commits on success. On Postgres one statement per use, since the connection
        is normally in autocommit; on SQLite a transaction under the process lock and ``BEGIN IMMEDIATE``."""
        if self._write_lock is None:
            with self._engine.connect() as conn:
                yield conn
                conn.commit()
            return
        with self._write_lock, self._engine.connect() as conn:
            conn.execution_options(om_write=True)
            with conn.begin():
                yield conn


class _Conflict(Exception):
    """Internal: the SQLite version check failed inside the write transaction."""


@dataclass(frozen=True, slots=True)
class _Expected:
    """Where an append expects the stream to be: its version, and the position of the event at it."""

    version: int
    position: int | None


def _at_expected(conn: Connection, stream_id: str, expected: _Expected) -> bool:
    head = conn.execute(
        sa.select(events.c.stream_version, events.c.global_position)
        .where(events.c.stream_id == stream_id)
        .order_by(events.c.stream_version.desc())
        .limit(1)
    ).first()
    if head is None:
        return expected.version == 0
    return head.stream_version == expected.version and expected.position in (None, head.global_position)


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


def _violated_key(error: BaseException | None) -> str | None:
    """The constraint a driver's integrity error names (psycopg), or infers from its text (sqlite3)."""
    diag = getattr(error, "diag", None)
    if diag is not None:
        name = getattr(diag, "constraint_name", None)
        return str(name) if name else None
    # SQLite names the columns, not the constraint: "UNIQUE constraint failed: om_events.event_id".
    text = str(error)
    if "om_events.event_id" in text:
        return schema.EVENTS_EVENT_ID_KEY
    if "om_events.stream_id" in text:
        return schema.EVENTS_STREAM_VERSION_KEY
    if "om_messages.stream_id" in text:
        return schema.MESSAGES_KEY
    return None


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


def _state_text(snapshot: StateSnapshot) -> str:
    return snapshot.state if isinstance(snapshot.state, str) else json_dumps(snapshot.state)


def _state_param() -> BindParameter[str]:
    return sa.bindparam("state", type_=sa.Text())


def _sqlite_json(text: BindParameter[str]) -> sa.ColumnElement[Any]:
    return sa.func.json(text)


def _postgres_json(text: BindParameter[str]) -> sa.ColumnElement[Any]:
    return sa.cast(text, postgresql.JSON())


def _sqlite_upsert_record() -> sa.Insert:
    # SQLite cannot tell an upsert's ON CONFLICT from a join constraint after INSERT ... SELECT unless the
    # SELECT has a WHERE clause, hence the WHERE true.
    return _upsert_record(sqlite.insert, _sqlite_json, sa.true())


def _postgres_upsert_record() -> sa.Insert:
    return _upsert_record(postgresql.insert, _postgres_json, sa.true())


def _sqlite_insert_tasks() -> sa.Insert:
    columns = ("key", "stream_id", "task_name", "queue", "payload")
    return (
        sqlite.insert(outbox)
        .values({name: sa.bindparam(name, type_=sa.Text()) for name in columns})
        .on_conflict_do_nothing(index_elements=[outbox.c.key])
    )


def _json_rows(name: str, *columns: sa.ColumnClause[Any]) -> sa.TableValuedAlias:
    """The rows of a JSON array parameter, typed: ``jsonb_to_recordset(:name) AS name(col type, ...)``."""
    return (
        sa.func.jsonb_to_recordset(sa.cast(sa.bindparam(name, type_=sa.Text()), postgresql.JSONB()))
        .table_valued(*columns, name=name)
        .render_derived(with_types=True)
    )


def _postgres_append_statement(with_snapshot: bool, with_messages: bool, with_tasks: bool) -> sa.Select[Any]:
    stream = sa.bindparam("stream_id", type_=sa.Text())
    expected = sa.bindparam("expected", type_=sa.BigInteger())
    jsonb = postgresql.JSONB()

    source = _json_rows(
        "events",
        sa.column("version", sa.BigInteger()),
        sa.column("id", postgresql.UUID()),
        sa.column("type", sa.Text()),
        sa.column("schema", sa.Integer()),
        sa.column("data", jsonb),
        sa.column("meta", jsonb),
    )
    expected_position = sa.bindparam("expected_position", type_=sa.BigInteger())
    # FOR KEY SHARE: the event built on must still exist at commit (see _postgres_append_one_sql)
    previous_exists = (
        sa.select(sa.literal(1))
        .where(
            events.c.stream_id == stream,
            events.c.stream_version == expected,
            sa.or_(expected_position.is_(None), events.c.global_position == expected_position),
        )
        .with_for_update(read=True, key_share=True)
        .exists()
    )
    inserted = (
        sa.insert(events)
        .from_select(
            ["stream_id", "stream_version", "event_id", "event_type", "schema_version", "data", "metadata"],
            sa.select(
                stream,
                source.c.version,
                source.c.id,
                source.c.type,
                source.c.schema,
                source.c.data,
                source.c.meta,
            )
            # The compare-and-set: version ``expected`` must exist (a gap is a conflict too), at the
            # expected position when one is given, and the unique (stream_id, stream_version) key refuses
            # ``expected + 1`` if someone else wrote it.
            .where(sa.or_(expected == 0, previous_exists))
            .order_by(source.c.version),
        )
        .returning(events.c.global_position, events.c.stream_version)
        .cte("ev")
    )
    appended = sa.select(inserted.c.global_position).exists()
    dependent: list[sa.CTE] = []

    if with_snapshot:
        dependent.append(
            _upsert_record(
                postgresql.insert,
                _postgres_json,
                appended,
                sa.select(sa.func.max(inserted.c.global_position)).scalar_subquery(),
            ).cte("rec")
        )

    if with_messages:
        rows = _json_rows(
            "messages",
            sa.column("id", sa.Text()),
            sa.column("seq", sa.BigInteger()),
            sa.column("version", sa.BigInteger()),
            sa.column("thread", sa.Text()),
            sa.column("resource", sa.Text()),
            sa.column("role", sa.Text()),
            sa.column("created", postgresql.TIMESTAMP(timezone=True)),
            sa.column("tokens", sa.Integer()),
            sa.column("hash", sa.Text()),
            sa.column("message", jsonb),
            sa.column("search", sa.Text()),
        )
        message_insert = sa.insert(messages).from_select(
            [
                "stream_id",
                "message_id",
                "seq",
                "stream_version",
                "tenant",
                "thread_id",
                "resource_id",
                "role",
                "created_at",
                "tokens",
                "content_hash",
                "message",
                "search",
            ],
            sa.select(
                stream,
                rows.c.id,
                rows.c.seq,
                rows.c.version,
                sa.bindparam("tenant_of_messages", type_=sa.Text()),
                rows.c.thread,
                rows.c.resource,
                rows.c.role,
                rows.c.created,
                rows.c.tokens,
                rows.c.hash,
                rows.c.message,
                rows.c.search,
            ).where(appended),
        )
        dependent.append(message_insert.cte("msg"))

    if with_tasks:
        task_rows = _json_rows(
            "tasks",
            sa.column("key", sa.Text()),
            sa.column("name", sa.Text()),
            sa.column("queue", sa.Text()),
            sa.column("payload", jsonb),
        )
        task_insert = (
            postgresql.insert(outbox)
            .from_select(
                ["key", "stream_id", "task_name", "queue", "payload"],
                sa.select(
                    task_rows.c.key, stream, task_rows.c.name, task_rows.c.queue, task_rows.c.payload
                ).where(appended),
            )
            .on_conflict_do_nothing(index_elements=[outbox.c.key])
        )
        dependent.append(task_insert.cte("box"))

    return sa.select(inserted.c.global_position, inserted.c.stream_version).add_cte(*dependent)


def _window_query(stream_id: str, observed_seq: int) -> sa.Select[Any]:
    return (
        sa.select(*MESSAGE_COLUMNS)
        .where(messages.c.stream_id == stream_id, messages.c.seq > observed_seq)
        .order_by(messages.c.seq)
    )


def _window_from_json(stream_id: str, document: str | None) -> tuple[StoredMessage, ...]:
    """The window's rows as ``_POSTGRES_SNAPSHOT_SQL`` aggregates them (NULL when there are none)."""
    if document is None:
        return ()
    return tuple(
        StoredMessage(
            stream_id=stream_id,
            message_id=row[0],
            seq=row[1],
            stream_version=row[2],
            thread_id=row[3],
            resource_id=row[4],
            role=row[5],
            created_at=datetime.fromisoformat(row[6]).replace(tzinfo=UTC),
            tokens=row[7],
            content_hash=row[8],
            message=row[9],
        )
        for row in json_loads(document)
    )


def _upsert_indexed_groups(postgres: bool) -> sa.Insert:
    insert = postgresql.insert if postgres else sqlite.insert
    columns = [c for c in indexed_groups.c]
    source = sa.select(
        *[
            sa.bindparam(c.name, type_=sa.Text()) if c.name != "embedding" else _as_json(postgres, c.name)
            for c in columns
        ]
    )
    if not postgres:
        # see _sqlite_upsert_record: SQLite needs a WHERE to parse ON CONFLICT after INSERT ... SELECT
        source = source.where(sa.true())
    statement = insert(indexed_groups).from_select([c.name for c in columns], source)
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[indexed_groups.c.stream_id, indexed_groups.c.group_id],
        set_={c.name: statement.excluded[c.name] for c in columns if not c.primary_key},
    )
    return upsert


def _as_json(postgres: bool, name: str) -> sa.ColumnElement[Any]:
    text = sa.bindparam(name, type_=sa.Text())
    return _postgres_json(text) if postgres else _sqlite_json(text)


_LOCK_SOURCE_EVENT = sa.text("SELECT 1 FROM om_events WHERE event_id = :source FOR KEY SHARE")


def _tasks_document(tasks: Sequence[TaskRequest]) -> str:
    return json_dumps(
        [{"key": t.key, "name": t.task_name, "queue": t.queue, "payload": t.payload} for t in tasks]
    )


# Read on every request: a position equal to the caller's means it holds that state already (a NULL
# position compares as unknown, so the document comes back).
# The window's rows come from the same statement, hence the same snapshot, as the row: a separate read
# could see an append the row does not, and the state would have to be folded from the events instead.
_POSTGRES_SNAPSHOT_SQL = (
    "SELECT CASE WHEN position = %s::bigint THEN NULL ELSE state::text END, version, position,"
    " CASE WHEN position = %s::bigint THEN NULL ELSE log::text END,"
    " CASE WHEN position = %s::bigint THEN NULL ELSE (SELECT json_agg(json_build_array(m.message_id, m.seq,"
    " m.stream_version, m.thread_id, m.resource_id, m.role, m.created_at AT TIME ZONE 'UTC', m.tokens,"
    " m.content_hash, m.message) ORDER BY m.seq)::text"
    " FROM om_messages m WHERE m.stream_id = r.stream_id AND m.seq > r.observed_seq) END"
    " FROM om_records r WHERE stream_id = %s::text"
)

_RECORD_UPSERT_SET = (
    "ON CONFLICT (stream_id) DO UPDATE SET tenant = excluded.tenant, thread_id = excluded.thread_id,"
    " resource_id = excluded.resource_id, version = excluded.version, state = excluded.state,"
    " updated_at = excluded.updated_at, position = excluded.position, pending_work = excluded.pending_work,"
    " log = coalesce(excluded.log, om_records.log), observed_seq = excluded.observed_seq"
)


@functools.cache
def _postgres_append_one_sql(with_snapshot: bool, with_message: bool, with_tasks: bool) -> str:
    """A one-event append as data-modifying CTEs of one statement, with positional (``%s``) parameters:

    stream id, new version, event id, type, schema version, data and metadata (JSON text), then expected
    version, stream id, expected version and expected position twice (NULL: any) for the check; then, with a
    snapshot, its tenant, thread id, resource id, state (JSON text), whether work is pending, the log (JSON
    text or NULL) and the observed seq;
    then, with a message row, its id, seq, tenant, thread id, resource id, role, created at, tokens, content
    hash, message (JSON text) and search text; then, with tasks, the JSON document of the outbox rows.
    Every parameter carries an explicit cast, so the statement is the same whatever Python type psycopg
    picks for a value (int2/int4/int8, NULL).

    The compare-and-set: version ``expected`` must exist (a gap is a conflict too), at the expected
    position when one is given (so a stream erased and re-created under the same id is never mistaken for
    the one the writer read), and the unique ``(stream_id, stream_version)`` key refuses ``expected + 1`` if
    someone else wrote it meanwhile. The check takes only parameters, never a column of the outer query:
    Postgres then runs it once, as an index probe (an InitPlan). Correlated, with the OR, the planner hashes
    the whole events table on every append.

    The check locks the event it found ``FOR KEY SHARE`` until commit. In READ COMMITTED the statement's
    snapshot may still show an event that a concurrent erasure has deleted but not yet committed; the lock
    waits for that erasure and then finds the row gone, so the append writes nothing. An erasure that comes
    second waits for the lock, and erases what the append wrote (``delete_stream``).
    """
    parts = [
        "WITH ev AS (INSERT INTO om_events"
        " (stream_id, stream_version, event_id, event_type, schema_version, data, metadata)"
        " SELECT %s::text, %s::bigint, %s::uuid, %s::text, %s::integer, %s::jsonb, %s::jsonb"
        " WHERE %s::bigint = 0 OR EXISTS (SELECT FROM om_events"
        " WHERE stream_id = %s::text AND stream_version = %s::bigint"
        " AND (%s::bigint IS NULL OR global_position = %s::bigint) FOR KEY SHARE)"
        " RETURNING global_position, stream_id, stream_version)"
    ]
    if with_snapshot:
        parts.append(
            ", rec AS (INSERT INTO om_records"
            " (stream_id, tenant, thread_id, resource_id, version, state, updated_at, position, pending_work,"
            " log, observed_seq) SELECT ev.stream_id, %s::text, %s::text, %s::text, ev.stream_version,"
            " %s::json, now(), ev.global_position, %s::boolean, %s::json, %s::bigint FROM ev "
            + _RECORD_UPSERT_SET
            + ")"
        )
    if with_message:
        parts.append(
            ", msg AS (INSERT INTO om_messages (stream_id, message_id, seq, stream_version, tenant,"
            " thread_id, resource_id, role, created_at, tokens, content_hash, message, search)"
            " SELECT ev.stream_id, %s::text, %s::bigint, ev.stream_version, %s::text, %s::text, %s::text,"
            " %s::text, %s::timestamptz, %s::integer, %s::text, %s::jsonb, %s::text FROM ev)"
        )
    if with_tasks:
        parts.append(
            ", box AS (INSERT INTO om_outbox (key, stream_id, task_name, queue, payload)"
            " SELECT t.key, ev.stream_id, t.name, t.queue, t.payload"
            " FROM ev, jsonb_to_recordset(%s::jsonb) AS t(key text, name text, queue text, payload jsonb)"
            " ON CONFLICT (key) DO NOTHING)"
        )
    parts.append(" SELECT global_position FROM ev")
    return "".join(parts)
