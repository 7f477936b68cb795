"""The event store on Postgres (psycopg 3), as production runs it.

Postgres appends are one statement run in autocommit: the events insert (its compare-and-set on the stream
version), the inline projection upsert, the message projection and the outbox rows are data-modifying CTEs
of a single ``WITH ... SELECT``. One round trip, and atomic, because a statement is its own transaction.
A one-event append, the common case, passes every value as a parameter of its own; larger appends pass
their rows as JSON documents (``jsonb_to_recordset``), so the SQL text is the same for any batch size. Either
way there are a handful of statement texts, each prepared once per connection.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.sql.elements import BindParameter

from om_core.adapters.store import schema
from om_core.adapters.store.base import (
    _EVENT_COLUMNS,
    SqlEventStore,
    _Expected,
    _MessageRow,
    _record_params,
    _state_text,
    _tasks_document,
    _tenant,
    _unavailable_on_connection_errors,
    _upsert_indexed_groups,
    _upsert_record,
    event_row_of_text,
    json_dumps,
    json_loads,
    stored_message_of,
)
from om_core.adapters.store.schema import events, messages, outbox
from om_core.application.ports import (
    CATCH_UP_EVENTS,
    ConcurrencyError,
    DuplicateEventError,
    StoreUnavailableError,
)
from om_core.domain.envelope import (
    NewEvent,
    RecordedEvent,
    StateSnapshot,
    StoredMessage,
    StoredSnapshot,
    TaskRequest,
)

# The key of the append cursor in a pooled connection's ``info``.
_DRIVER_CURSOR = "om_driver_cursor"


def create_postgres_engine(url: URL, *, pool_size: int, max_overflow: int, pool_pre_ping: bool) -> Engine:
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    elif url.get_driver_name() != "psycopg":
        raise ValueError("the Postgres store runs on psycopg 3: use a postgresql+psycopg:// URL")
    return sa.create_engine(
        url,
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


class PostgresEventStore(SqlEventStore, dialect="postgresql"):
    """The event store on a Postgres engine.

    Every operation is a single statement and commits by itself, so the engine should run in AUTOCOMMIT
    isolation (``create_event_store`` sets it): that saves the BEGIN and COMMIT round trips. With another
    isolation level the store still commits what it writes, only slower.
    """

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
            violated = _violated_key(error)
            if violated not in (schema.EVENTS_STREAM_VERSION_KEY, schema.EVENTS_EVENT_ID_KEY):
                with self._engine.connect() as conn:
                    raise self._append_failure(
                        conn, violated, stream_id, new_events, expected.version, message_rows
                    ) from None
            rows = []
        except psycopg.errors.TransactionRollback:
            # a deadlock's victim (an erasure locks every event of the stream): lost like a race, re-read
            rows = []
        if not rows:
            # the compare-and-set failed (no rows), or another writer took the next version or the event id
            raise self._lost_race(stream_id, new_events, expected.version) from None
        if len(rows) == 1:
            return [rows[0][0]]
        return [position for position, _ in sorted(rows, key=lambda row: row[1])]

    def _lost_race(self, stream_id: str, new_events: Sequence[NewEvent], expected: int) -> Exception:
        """``_conflict`` in one statement on the driver. An API process loses the compare-and-set (the
        stream's next version is taken) each time a worker committed to the thread since its last append,
        so this is on many turns' path."""
        ((stored, version),) = self._run_on_driver(
            _POSTGRES_LOST_RACE_SQL, ([e.event_id for e in new_events], stream_id), read_only=True
        )
        if stored:
            return DuplicateEventError([str(i) for i in stored])
        return ConcurrencyError(stream_id, expected, int(version))

    def _run_on_driver(
        self, sql: str, parameters: Sequence[Any], *, read_only: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run one statement on the pooled driver connection (Postgres), committed; return its rows.

        The hot paths (append, state read) skip SQLAlchemy's Connection and result set-up: they took more
        client CPU than the statements themselves, and CPU is what 16 writers on 2 cores run out of. An
        IntegrityError propagates after a rollback (even one that found the connection lost); a connection
        lost before the answer is a StoreUnavailableError, after one more try on a new connection for a
        ``read_only`` statement.
        """
        try:
            return self._run_once(sql, parameters)
        except _ConnectionLost:
            if not read_only:
                raise
            return self._run_once(sql, parameters)

    def _run_once(self, sql: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
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
        except (psycopg.IntegrityError, psycopg.errors.TransactionRollback):
            # a constraint, or the database undoing the transaction to break a deadlock with an erasure:
            # nothing was written. The connection may have been lost since the answer (a terminated
            # backend): the answer still holds, so the caller still learns of the conflict, and the
            # connection is discarded.
            try:
                raw.rollback()
            except (psycopg.OperationalError, psycopg.InterfaceError) as lost:
                raw.invalidate(lost)
            raise
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            if not getattr(raw.driver_connection, "broken", False):
                raw.invalidate(error)
                raise StoreUnavailableError(str(error)) from error
            # A connection found dead was most likely killed while it sat in the pool (Postgres restarted,
            # or its backends were terminated): the connections opened before it are dead too, so the pool
            # replaces them all rather than hand each to a request that would fail (the call SQLAlchemy's
            # own Connection makes on a disconnect, which these driver-level statements bypass).
            self._engine.pool._invalidate(raw, error)
            raise _ConnectionLost(str(error)) from error
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

    # --- reading events ------------------------------------------------------------------------------

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """Events after ``after_position``, in the order they became safe to read.

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

    # --- projections ---------------------------------------------------------------------------------

    def load_snapshot(
        self, stream_id: str, *, known_position: int | None = None, known_version: int | None = None
    ) -> StoredSnapshot | None:
        if known_position is None or known_version is None:
            found = self._run_on_driver(
                _POSTGRES_SNAPSHOT_SQL,
                (known_position, known_position, known_position, stream_id),
                read_only=True,
            )
            if not found:
                return None
            state, version, position, log, window = found[0]
            return StoredSnapshot(
                state, version, position, log, None if state is None else _window_from_json(stream_id, window)
            )
        found = self._run_on_driver(
            _POSTGRES_CATCH_UP_SQL,
            (known_position,) * 4
            + (known_version, known_version, CATCH_UP_EVENTS, known_version, known_version, known_position)
            + (stream_id,),
            read_only=True,
        )
        if not found:
            return None
        state, version, position, log, window, caught_up = found[0]
        if caught_up is not None:
            events = tuple(self._recorded(row) for row in _events_from_json(stream_id, caught_up))
            return StoredSnapshot(None, version, position, events=events)
        return StoredSnapshot(
            state, version, position, log, None if state is None else _window_from_json(stream_id, window)
        )

    def read_messages(
        self,
        stream_id: str,
        *,
        thread_id: str | None = None,
        cursor: int | None = None,
        backward: bool = False,
        limit: int = 50,
    ) -> list[StoredMessage]:
        # the proxy reads a thread's tail on every request: on the driver, as appends and state reads are
        parameters: list[Any] = [stream_id]
        if thread_id is not None:
            parameters.append(thread_id)
        if cursor is not None:
            parameters.append(cursor)
        parameters.append(limit)
        sql = _postgres_read_messages_sql(thread_id is not None, cursor is not None, backward)
        rows = self._run_on_driver(sql, tuple(parameters), read_only=True)
        if backward:
            rows.reverse()
        return [stored_message_of(row, row[7].astimezone(UTC)) for row in rows]

    @staticmethod
    def _insert(table: sa.Table) -> Any:
        return postgresql.insert(table)

    @staticmethod
    def _record_upsert() -> sa.Insert:
        return _upsert_record(postgresql.insert, _postgres_json, sa.true())

    def _text_match(self, text: str) -> tuple[sa.ColumnElement[bool], sa.ColumnElement[Any]]:
        """``tsvector`` matching, ranked by ``ts_rank`` of ``websearch_to_tsquery``."""
        tsquery = sa.func.websearch_to_tsquery(
            sa.literal_column(f"'{schema.SEARCH_TEXT_CONFIG}'::regconfig"), text
        )
        return messages.c.search_tsv.op("@@")(tsquery), sa.func.ts_rank(messages.c.search_tsv, tsquery)

    # --- erasing -------------------------------------------------------------------------------------

    def _rolled_back_by_conflict(self, error: BaseException | None) -> bool:
        orig = getattr(error, "orig", None)
        return isinstance(orig, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure)

    def _erase_events(self, conn: Connection, erase_events: sa.Delete) -> int:
        """In READ COMMITTED a DELETE sees only what had committed when it started, and an append in flight
        may hold its predecessor locked (``FOR KEY SHARE``, see ``_postgres_append_one_sql``): the DELETE
        waits for it, and the event it then commits is newer than the DELETE's snapshot. So the events are
        deleted again, each time with a fresh snapshot, until a pass finds none: from then on every event of
        the stream is deleted and locked by this transaction, and any later append or index write waits for
        it and then finds its predecessor gone."""
        removed = 0
        while True:
            erased = int(conn.execute(erase_events).rowcount)
            removed += erased
            if erased == 0:
                return removed

    # --- vector index of observation groups ----------------------------------------------------------

    @staticmethod
    def _indexed_groups_upsert() -> sa.Insert:
        return _upsert_indexed_groups(postgresql.insert, _postgres_json)

    def _source_event_stored(self, conn: Connection, event_id: uuid.UUID) -> bool:
        """The event is locked ``FOR KEY SHARE`` until the write commits: an erasure waits for the write, or
        the write finds the event gone, as an append does."""
        return conn.execute(_LOCK_SOURCE_EVENT, {"source": event_id}).first() is not None

    # --- scan locks ----------------------------------------------------------------------------------

    @contextmanager
    def try_lock(self, key: int) -> Iterator[bool]:
        """A session-level advisory lock (``pg_try_advisory_lock``), seen by every process on the database:
        it lives as long as this connection holds it, across the scan's own transactions."""
        with self._engine.connect() as conn:
            with _unavailable_on_connection_errors():
                got = bool(conn.scalar(sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": key}))
                conn.commit()
            try:
                yield got
            finally:
                if got:
                    with _unavailable_on_connection_errors():
                        conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                        conn.commit()

    # --- connections ---------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """The engine's autocommit is switched off for this connection only (SQLAlchemy restores it when the
        connection goes back)."""
        with self._engine.connect() as conn:
            conn = conn.execution_options(isolation_level="READ COMMITTED")
            with conn.begin():
                yield conn

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """One statement per use, since the connection is normally in autocommit."""
        with self._engine.connect() as conn:
            yield conn
            conn.commit()


class _ConnectionLost(StoreUnavailableError):
    """The statement's connection was found dead before it answered: a read may run again on a new one."""


def _violated_key(error: BaseException | None) -> str | None:
    """The constraint a psycopg integrity error names."""
    diag = getattr(error, "diag", None)
    name = getattr(diag, "constraint_name", None)
    return str(name) if name else None


def _postgres_json(text: BindParameter[str]) -> sa.ColumnElement[Any]:
    return sa.cast(text, postgresql.JSON())


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


_LOCK_SOURCE_EVENT = sa.text("SELECT 1 FROM om_events WHERE event_id = :source FOR KEY SHARE")


# Read on every request: a position equal to the caller's means it holds that state already (a NULL
# position compares as unknown, so the document comes back).
# The window's rows come from the same statement, hence the same snapshot, as the row: a separate read
# could see an append the row does not, and the state would have to be folded from the events instead.
# The window's message rows of the record row ``r``, as one JSON document (``_window_from_json``).
_WINDOW_OF_RECORD = (
    "(SELECT json_agg(json_build_array(m.message_id, m.seq, m.stream_version, m.thread_id, m.resource_id,"
    " m.role, m.created_at AT TIME ZONE 'UTC', m.tokens, m.content_hash, m.message) ORDER BY m.seq)::text"
    " FROM om_messages m WHERE m.stream_id = r.stream_id AND m.seq > r.observed_seq)"
)
_POSTGRES_SNAPSHOT_SQL = (
    "SELECT CASE WHEN position = %s::bigint THEN NULL ELSE state::text END, version, position,"
    " CASE WHEN position = %s::bigint THEN NULL ELSE log::text END,"
    f" CASE WHEN position = %s::bigint THEN NULL ELSE {_WINDOW_OF_RECORD} END"
    " FROM om_records r WHERE stream_id = %s::text"
)


# ``_POSTGRES_SNAPSHOT_SQL`` for a reader that holds the state of a known version and position: when the row
# has moved on by at most CATCH_UP_EVENTS events and the stream still holds that version at that position,
# the events since come back instead of the document and the window (RecordProjection.load_snapshot).
# Parameters: the known position four times, the known version twice, the limit, the known version twice,
# the known position and the stream id.
_POSTGRES_CATCH_UP_SQL = (
    "SELECT CASE WHEN r.position = %s::bigint OR c.events IS NOT NULL THEN NULL ELSE r.state::text END,"
    " r.version, r.position,"
    " CASE WHEN r.position = %s::bigint OR c.events IS NOT NULL THEN NULL ELSE r.log::text END,"
    " CASE WHEN r.position = %s::bigint OR c.events IS NOT NULL THEN NULL ELSE"
    f" {_WINDOW_OF_RECORD} END,"
    " c.events"
    " FROM om_records r LEFT JOIN LATERAL (SELECT json_agg(json_build_array(e.global_position,"
    " e.stream_version, e.event_id, e.event_type, e.schema_version, e.data, e.metadata,"
    " e.recorded_at AT TIME ZONE 'UTC') ORDER BY e.stream_version)::text AS events"
    " FROM om_events e WHERE r.position <> %s::bigint"
    " AND r.version > %s::bigint AND r.version <= %s::bigint + %s::bigint"
    " AND e.stream_id = r.stream_id AND e.stream_version > %s::bigint AND e.stream_version <= r.version"
    " AND EXISTS (SELECT FROM om_events h WHERE h.stream_id = r.stream_id AND h.stream_version = %s::bigint"
    " AND h.global_position = %s::bigint)) c ON true"
    " WHERE r.stream_id = %s::text"
)


def _events_from_json(stream_id: str, document: str) -> list[tuple[Any, ...]]:
    """The events ``_POSTGRES_CATCH_UP_SQL`` aggregates, as rows of ``_EVENT_COLUMNS``."""
    return [
        event_row_of_text(position, stream_id, version, *rest)
        for position, version, *rest in json_loads(document)
    ]


@functools.cache
def _postgres_read_messages_sql(by_thread: bool, with_cursor: bool, backward: bool) -> str:
    """A page of ``read_messages``, with positional parameters: stream id, then the thread id and the
    cursor when they narrow it, then the limit."""
    where = "stream_id = %s::text"
    if by_thread:
        where += " AND thread_id = %s::text"
    if with_cursor:
        where += f" AND seq {'<' if backward else '>'} %s::bigint"
    return (
        "SELECT stream_id, message_id, seq, stream_version, thread_id, resource_id, role, created_at, tokens,"
        f" content_hash, message::text FROM om_messages WHERE {where}"
        f" ORDER BY seq{' DESC' if backward else ''} LIMIT %s::bigint"
    )


# What a lost compare-and-set found: the new events already stored (a repeat), and the stream's version.
_POSTGRES_LOST_RACE_SQL = (
    "SELECT array(SELECT event_id FROM om_events WHERE event_id = ANY(%s::uuid[])),"
    " (SELECT coalesce(max(stream_version), 0) FROM om_events WHERE stream_id = %s::text)"
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
