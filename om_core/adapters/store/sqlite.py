"""The event store on SQLite, the embedded mode's (``om serve --embedded``, ``om demo``).

SQLite has a single writer: appends take a process-wide lock and ``BEGIN IMMEDIATE``, check the version,
then run the same writes as Postgres does, as separate statements.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.sql.elements import BindParameter

from om_core.adapters.store import schema
from om_core.adapters.store.base import (
    _EVENT_COLUMNS,
    SqlEventStore,
    _Expected,
    _MessageRow,
    _Precompiled,
    _record_params,
    _tenant,
    _unavailable_on_connection_errors,
    _upsert_indexed_groups,
    _upsert_record,
    event_row_of_text,
    json_dumps,
    json_loads,
    stored_message_of,
)
from om_core.adapters.store.schema import SQLITE_UTC_NOW, events, messages, outbox
from om_core.application.ports import CATCH_UP_EVENTS, StoreUnavailableError
from om_core.domain.envelope import (
    NewEvent,
    RecordedEvent,
    StateSnapshot,
    StoredMessage,
    StoredSnapshot,
    TaskRequest,
)
from om_core.domain.upcasting import Upcasters


def create_sqlite_engine(url: URL) -> Engine:
    database = url.database
    if not database or database == ":memory:":
        raise ValueError("the SQLite store needs a database file; an in-memory database is per connection")
    Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        # the connection used last serves next: its page cache is current (another connection's commit
        # invalidates it), so a quiet process re-reads no pages; in turn order every checkout read ~20
        pool_use_lifo=True,
        json_serializer=json_dumps,
        json_deserializer=json_loads,
    )
    _configure_sqlite(engine)
    return engine


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


_PROCESS_LOCKS: dict[tuple[str, int | None], threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_lock(engine: Engine, key: int | None = None) -> threading.Lock:
    """One lock per database file (and key) in this process, shared by every store opened on it: the write
    lock (no key) and each scan lock."""
    database = str(Path(str(engine.url.database)).expanduser().resolve())
    with _PROCESS_LOCKS_GUARD:
        return _PROCESS_LOCKS.setdefault((database, key), threading.Lock())


class SqliteEventStore(SqlEventStore, dialect="sqlite"):
    """The event store on a SQLite file: one writer at a time, under a process-wide lock."""

    def __init__(self, engine: Engine, *, upcasters: Upcasters | None = None) -> None:
        super().__init__(engine, upcasters=upcasters)
        self._write_lock = _process_lock(engine)

    # --- appending -----------------------------------------------------------------------------------

    def _append_rows(
        self,
        stream_id: str,
        new_events: Sequence[NewEvent],
        expected: _Expected,
        snapshot: StateSnapshot | None,
        tasks: Sequence[TaskRequest],
        message_rows: list[_MessageRow],
    ) -> list[int]:
        # On the driver's connection, as on Postgres: building, compiling and binding these statements
        # through SQLAlchemy cost several times what SQLite takes to run them.
        failure: Exception | None
        with self._write_lock:
            try:
                raw = self._engine.raw_connection()
            except sqlite3.OperationalError as error:  # raw_connection passes connect errors on unwrapped
                raise StoreUnavailableError(str(error)) from error
            try:
                driver = raw.driver_connection
                assert isinstance(driver, sqlite3.Connection)
                statements = (self._statement(self._record_upsert), self._statement(_sqlite_insert_tasks))
                try:
                    return _write_append(
                        driver, statements, stream_id, new_events, expected, snapshot, tasks, message_rows
                    )
                except BaseException:
                    if driver.in_transaction:
                        driver.execute("ROLLBACK")
                    raise
            except _Conflict:
                failure = None
            except sqlite3.IntegrityError as error:
                failure = error
            except (sqlite3.OperationalError, sqlite3.InterfaceError) as error:
                raw.invalidate(error)
                raise StoreUnavailableError(str(error)) from error
            finally:
                raw.close()
            with self._engine.connect() as conn:
                if failure is None:
                    raise self._conflict(conn, stream_id, new_events, expected.version)
                raise self._append_failure(
                    conn, _violated_key(failure), stream_id, new_events, expected.version, message_rows
                ) from None

    # --- reading events ------------------------------------------------------------------------------

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """Events after ``after_position`` in position order: SQLite commits one writer at a time, in
        position order, so that is the order they became safe to read."""
        query = (
            sa.select(*_EVENT_COLUMNS)
            .where(events.c.global_position > after_position)
            .order_by(events.c.global_position)
            .limit(limit)
        )
        with _unavailable_on_connection_errors(), self._engine.connect() as conn:
            return [self._recorded(row) for row in conn.execute(query).all()]

    # --- projections ---------------------------------------------------------------------------------

    @staticmethod
    def _caught_up(
        driver: sqlite3.Connection,
        stream_id: str,
        known_position: int | None,
        known_version: int | None,
        version: int,
    ) -> bool:
        """Whether a reader holding the state of ``known_version`` at ``known_position`` gets the events
        since instead of the document (RecordProjection.load_snapshot)."""
        if known_version is None or not known_version < version <= known_version + CATCH_UP_EVENTS:
            return False
        found: tuple[int] | None = driver.execute(_EVENT_AT_SQL, (stream_id, known_version)).fetchone()
        return found == (known_position,)

    def load_snapshot(
        self, stream_id: str, *, known_position: int | None = None, known_version: int | None = None
    ) -> StoredSnapshot | None:
        # On the driver's connection, as the append: every request reads its record, and building and
        # compiling these two selects through SQLAlchemy cost more than SQLite takes to run them.
        try:
            raw = self._engine.raw_connection()
        except sqlite3.OperationalError as error:
            raise StoreUnavailableError(str(error)) from error
        try:
            driver = raw.driver_connection
            assert isinstance(driver, sqlite3.Connection)
            # one read transaction: in WAL mode both reads see the same snapshot
            driver.execute("BEGIN")
            try:
                row = driver.execute(_LOAD_RECORD_SQL, (known_position, known_position, stream_id)).fetchone()
                if row is None:
                    return None
                state, version, position, log, observed_seq = row
                behind = (known_position, known_version, version)
                if state is not None and self._caught_up(driver, stream_id, *behind):
                    since = driver.execute(_EVENTS_SINCE_SQL, (stream_id, known_version, version)).fetchall()
                    events = tuple(self._recorded(_event_row(e)) for e in since)
                    return StoredSnapshot(None, version, position, events=events)
                window = None
                if state is not None:
                    window = tuple(
                        _stored_message(m) for m in driver.execute(_WINDOW_SQL, (stream_id, observed_seq))
                    )
            finally:
                driver.execute("COMMIT")
            return StoredSnapshot(state, version, position, log, window)
        except (sqlite3.OperationalError, sqlite3.InterfaceError) as error:
            raw.invalidate(error)
            raise StoreUnavailableError(str(error)) from error
        finally:
            raw.close()

    @staticmethod
    def _insert(table: sa.Table) -> Any:
        return sqlite.insert(table)

    @staticmethod
    def _record_upsert() -> sa.Insert:
        # SQLite cannot tell an upsert's ON CONFLICT from a join constraint after INSERT ... SELECT unless the
        # SELECT has a WHERE clause, hence the WHERE true.
        return _upsert_record(sqlite.insert, _sqlite_json, sa.true())

    def _text_match(self, text: str) -> tuple[sa.ColumnElement[bool], sa.ColumnElement[Any]] | None:
        """Scored by how many of the query's words (up to 16) the text holds as substrings."""
        words = [w for w in text.lower().split() if w][:16]
        if not words:
            return None
        found = [sa.func.instr(sa.func.lower(messages.c.search), w) > 0 for w in words]
        hits = [sa.case((f, 1), else_=0) for f in found]
        return sa.or_(*found), sum(hits[1:], hits[0])

    # --- erasing -------------------------------------------------------------------------------------

    def _erase_events(self, conn: Connection, erase_events: sa.Delete) -> int:
        """One pass: SQLite has one writer at a time, so nothing can interleave."""
        return int(conn.execute(erase_events).rowcount)

    # --- vector index of observation groups ----------------------------------------------------------

    @staticmethod
    def _indexed_groups_upsert() -> sa.Insert:
        # see _record_upsert: SQLite needs a WHERE to parse ON CONFLICT after INSERT ... SELECT
        return _upsert_indexed_groups(sqlite.insert, _sqlite_json, sa.true())

    def _source_event_stored(self, conn: Connection, event_id: uuid.UUID) -> bool:
        found = conn.execute(sa.select(events.c.global_position).where(events.c.event_id == event_id)).first()
        return found is not None

    # --- scan locks ----------------------------------------------------------------------------------

    @contextmanager
    def try_lock(self, key: int) -> Iterator[bool]:
        """The embedded store is one process, so a process-wide lock is the whole story."""
        lock = _process_lock(self._engine, key)
        got = lock.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                lock.release()

    # --- connections ---------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self._writing() as conn:
            yield conn

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A transaction under the process lock and ``BEGIN IMMEDIATE``."""
        with self._write_lock, self._engine.connect() as conn:
            conn.execution_options(om_write=True)
            with conn.begin():
                yield conn


class _Conflict(Exception):
    """Internal: the SQLite version check failed inside the write transaction."""


_HEAD_SQL = (
    "SELECT stream_version, global_position FROM om_events WHERE stream_id = ? "
    "ORDER BY stream_version DESC LIMIT 1"
)
_INSERT_EVENT_SQL = (
    "INSERT INTO om_events (stream_id, stream_version, event_id, event_type, schema_version, data, metadata) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING global_position"
)
_INSERT_MESSAGE_SQL = (
    "INSERT INTO om_messages (stream_id, message_id, seq, stream_version, tenant, thread_id, resource_id, "
    "role, created_at, tokens, content_hash, message, search) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_UPDATE_RECORD_SQL = (
    f"UPDATE om_records SET version = ?, state = ?, updated_at = {SQLITE_UTC_NOW}, position = ?,"
    " log = coalesce(?, log), observed_seq = ? WHERE stream_id = ? AND tenant = ? AND thread_id IS ?"
    " AND resource_id IS ? AND pending_work = ?"
)

# ``position = NULL`` is never true: without a known position the documents are always read
_LOAD_RECORD_SQL = (
    "SELECT CASE WHEN position = ? THEN NULL ELSE CAST(state AS TEXT) END, version, position,"
    " CASE WHEN position = ? THEN NULL ELSE CAST(log AS TEXT) END, observed_seq"
    " FROM om_records WHERE stream_id = ?"
)
_WINDOW_SQL = (
    "SELECT stream_id, message_id, seq, stream_version, thread_id, resource_id, role, created_at, tokens,"
    " content_hash, message FROM om_messages WHERE stream_id = ? AND seq > ? ORDER BY seq"
)


_EVENT_AT_SQL = "SELECT global_position FROM om_events WHERE stream_id = ? AND stream_version = ?"
_EVENTS_SINCE_SQL = (
    "SELECT global_position, stream_id, stream_version, event_id, event_type, schema_version, data, metadata,"
    " recorded_at FROM om_events WHERE stream_id = ? AND stream_version > ? AND stream_version <= ?"
    " ORDER BY stream_version"
)


def _event_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of ``_EVENTS_SINCE_SQL`` as ``_EVENT_COLUMNS`` read it: SQLite keeps documents as text."""
    position, stream_id, version, event_id, event_type, schema_version, data, metadata, recorded_at = row
    return event_row_of_text(
        position,
        stream_id,
        version,
        event_id,
        event_type,
        schema_version,
        json_loads(data),
        json_loads(metadata),
        recorded_at,
    )


def _stored_message(row: tuple[Any, ...]) -> StoredMessage:
    """A row of ``_WINDOW_SQL``: SQLite keeps the time as ISO text (schema.py, UtcDateTime)."""
    created_at = datetime.fromisoformat(row[7])
    return stored_message_of(
        row, created_at.replace(tzinfo=UTC) if created_at.tzinfo is None else created_at.astimezone(UTC)
    )


def _write_append(
    driver: sqlite3.Connection,
    statements: tuple[_Precompiled, _Precompiled],
    stream_id: str,
    new_events: Sequence[NewEvent],
    expected: _Expected,
    snapshot: StateSnapshot | None,
    tasks: Sequence[TaskRequest],
    message_rows: list[_MessageRow],
) -> list[int]:
    """An append's statements (with the record upsert and outbox insert compiled for the engine) in one
    ``BEGIN IMMEDIATE`` transaction, committed; raises _Conflict when the stream is not where ``expected``
    says, an IntegrityError when a row breaks a key.

    Values are bound as the tables' types bind them (schema.py): uuids and times as text, documents as
    JSON text.
    """
    record_upsert, insert_tasks = statements
    driver.execute("BEGIN IMMEDIATE")
    head = driver.execute(_HEAD_SQL, (stream_id,)).fetchone()
    if head is None:
        at_expected = expected.version == 0
    else:
        at_expected = head[0] == expected.version and expected.position in (None, head[1])
    if not at_expected:
        raise _Conflict
    positions = [
        int(
            driver.execute(
                _INSERT_EVENT_SQL,
                (
                    stream_id,
                    version,
                    str(e.event_id),
                    e.event_type,
                    e.schema_version,
                    json_dumps(e.data),
                    json_dumps(e.metadata),
                ),
            ).fetchone()[0]
        )
        for version, e in enumerate(new_events, start=expected.version + 1)
    ]
    if snapshot is not None:
        record = _record_params(stream_id, snapshot, expected.version + len(new_events))
        if expected.version == 0 or not _update_record(driver, record, positions[-1]):
            driver.execute(record_upsert.sql, record_upsert.parameters(record))
    if message_rows:
        tenant = _tenant(stream_id, snapshot)
        default_resource = snapshot.resource_id if snapshot is not None else None
        driver.executemany(
            _INSERT_MESSAGE_SQL,
            [
                (
                    stream_id,
                    m.message_id,
                    m.seq,
                    m.stream_version,
                    tenant,
                    m.thread_id,
                    m.resource_id or default_resource,
                    m.role,
                    m.created_at.astimezone(UTC).isoformat(timespec="microseconds"),
                    m.tokens,
                    m.content_hash,
                    json_dumps(m.message),
                    m.search,
                )
                for m in message_rows
            ],
        )
    if tasks:
        driver.executemany(
            insert_tasks.sql,
            [
                insert_tasks.parameters(
                    {
                        "key": t.key,
                        "stream_id": stream_id,
                        "task_name": t.task_name,
                        "queue": t.queue,
                        "payload": json_dumps(t.payload),
                    }
                )
                for t in tasks
            ],
        )
    driver.execute("COMMIT")
    return positions


def _update_record(driver: sqlite3.Connection, record: dict[str, Any], position: int) -> bool:
    """Write the record row's columns that change on every append, if the row's tenant, thread, resource
    and pending-work flag are still those of ``record``; False when they are not (or there is no row),
    and the full upsert must run.

    SQLite rewrites the entry of every index on a column an UPDATE assigns, even to the value it holds, so
    the upsert, which assigns them all, wrote one more page to the WAL on every append."""
    changed = driver.execute(
        _UPDATE_RECORD_SQL,
        (
            record["last_version"],
            record["state"],
            position,
            record["log"],
            record["observed_seq"],
            record["stream_id"],
            record["tenant"],
            record["thread_id"],
            record["resource_id"],
            record["pending_work"],
        ),
    )
    return changed.rowcount == 1


def _violated_key(error: BaseException | None) -> str | None:
    """The constraint a sqlite3 integrity error breaks, inferred from its text: SQLite names the columns,
    not the constraint ("UNIQUE constraint failed: om_events.event_id")."""
    text = str(error)
    if "om_events.event_id" in text:
        return schema.EVENTS_EVENT_ID_KEY
    if "om_events.stream_id" in text:
        return schema.EVENTS_STREAM_VERSION_KEY
    if "om_messages.stream_id" in text:
        return schema.MESSAGES_KEY
    return None


def _sqlite_json(text: BindParameter[str]) -> sa.ColumnElement[Any]:
    # stored as the text it is: every document bound here was written by json_dumps or pydantic, so
    # SQLite's json() would only parse and write it again (tens of microseconds for a record's state)
    return text


def _sqlite_insert_tasks() -> sa.Insert:
    columns = ("key", "stream_id", "task_name", "queue", "payload")
    return (
        sqlite.insert(outbox)
        .values({name: sa.bindparam(name, type_=sa.Text()) for name in columns})
        .on_conflict_do_nothing(index_elements=[outbox.c.key])
    )
