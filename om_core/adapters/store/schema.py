"""The production schema as SQLAlchemy Core tables, for queries and for checking the migrations against.

Alembic owns the schema (``alembic/versions``); nothing calls ``create_all`` on this metadata. Objects that
exist on Postgres only carry ``info={"dialects": ("postgresql",)}`` so ``alembic/env.py`` can leave them out
when comparing against a SQLite database.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.types import TypeDecorator, TypeEngine, UserDefinedType

POSTGRES_ONLY: dict[str, Any] = {"dialects": ("postgresql",)}

# The text search configuration of ``om_messages.search_tsv``; queries must use the same one to hit the index.
SEARCH_TEXT_CONFIG = "simple"

# SQLite keeps timestamps as fixed-width ISO-8601 text so that text order is time order.
SQLITE_UTC_NOW = "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')"


class UtcNow(sa.sql.expression.FunctionElement[datetime]):
    """The database clock in UTC: ``now()`` on Postgres, microsecond-format text on SQLite."""

    type = sa.DateTime(timezone=True)
    inherit_cache = True


@compiles(UtcNow)
def _utc_now_default(element: UtcNow, compiler: SQLCompiler, **kw: Any) -> str:
    return "now()"


@compiles(UtcNow, "sqlite")
def _utc_now_sqlite(element: UtcNow, compiler: SQLCompiler, **kw: Any) -> str:
    return SQLITE_UTC_NOW


class UtcNowPlus(sa.sql.expression.FunctionElement[datetime]):
    """The database clock ``seconds`` from now, in the form ``UtcNow`` has on each backend: a lease's expiry,
    taken from the one clock every process of a deployment shares."""

    type = sa.DateTime(timezone=True)
    inherit_cache = True

    def __init__(self, seconds: sa.ColumnElement[float]) -> None:
        super().__init__(seconds)


@compiles(UtcNowPlus)
def _utc_now_plus_default(element: UtcNowPlus, compiler: SQLCompiler, **kw: Any) -> str:
    return f"now() + make_interval(secs => {compiler.process(element.clauses, **kw)})"


@compiles(UtcNowPlus, "sqlite")
def _utc_now_plus_sqlite(element: UtcNowPlus, compiler: SQLCompiler, **kw: Any) -> str:
    seconds = compiler.process(element.clauses, **kw)
    return f"strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now', ({seconds}) || ' seconds')"


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both backends; naive datetimes are refused rather than guessed."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.String(32))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store only takes timezone-aware datetimes")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.isoformat(timespec="microseconds")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class UuidText(TypeDecorator[uuid.UUID]):
    """Native ``uuid`` on Postgres, the 36-character text form on SQLite."""

    impl = sa.String(36)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.UUID(as_uuid=True))
        return dialect.type_descriptor(sa.String(36))

    def process_bind_param(self, value: uuid.UUID | None, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return str(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> uuid.UUID | None:
        if value is None or isinstance(value, uuid.UUID):
            return value
        return uuid.UUID(str(value))


class Xid8(UserDefinedType[int]):
    """Postgres' 64-bit transaction id. Only ever compared inside SQL, never bound or read by Python."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "XID8"


# Reflection (alembic's comparison of the models with a database) would otherwise not know the type.
postgresql.base.ischema_names.setdefault("xid8", Xid8)


JsonDocument = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
# A plain INTEGER PRIMARY KEY is SQLite's rowid, the only column it will autoincrement.
Position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    }
)

events = sa.Table(
    "om_events",
    metadata,
    sa.Column("global_position", Position, sa.Identity(always=False), primary_key=True),
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("stream_version", sa.BigInteger(), nullable=False),
    sa.Column("event_id", UuidText(), nullable=False),
    sa.Column("event_type", sa.Text(), nullable=False),
    sa.Column("schema_version", sa.Integer(), nullable=False),
    sa.Column("data", JsonDocument, nullable=False),
    sa.Column("metadata", JsonDocument, nullable=False),
    sa.Column("recorded_at", UtcDateTime(), nullable=False, server_default=UtcNow()),
    sa.Column(
        "tx_id",
        Xid8(),
        nullable=False,
        server_default=sa.text("pg_current_xact_id()"),
        info=POSTGRES_ONLY,
    ),
    sa.UniqueConstraint("stream_id", "stream_version"),
    sa.UniqueConstraint("event_id"),
    # SQLite would otherwise hand out the position of a deleted last row again.
    sqlite_autoincrement=True,
)
sa.Index("ix_om_events_tx_id_global_position", events.c.tx_id, events.c.global_position, info=POSTGRES_ONLY)

EVENTS_STREAM_VERSION_KEY = "uq_om_events_stream_id_stream_version"
EVENTS_EVENT_ID_KEY = "uq_om_events_event_id"

records = sa.Table(
    "om_records",
    metadata,
    sa.Column("stream_id", sa.Text(), primary_key=True),
    sa.Column("tenant", sa.Text(), nullable=False),
    sa.Column("thread_id", sa.Text(), nullable=True),
    sa.Column("resource_id", sa.Text(), nullable=True),
    sa.Column("version", sa.BigInteger(), nullable=False),
    # written whole and read whole, never queried inside: json text, which the server neither parses into
    # nor rebuilds from a binary form (see alembic 0002)
    sa.Column("state", sa.JSON(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False, server_default=UtcNow()),
    # the global position of the last event the state covers: names the exact state (StoredSnapshot)
    sa.Column("position", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("pending_work", sa.Boolean(), nullable=False, server_default=sa.false()),
    # the observation log's segments, kept apart from ``state`` because they change only when observations
    # are activated or reflected: an append that leaves them alone keeps the stored value (NULL: in state)
    sa.Column("log", sa.JSON(), nullable=True),
    # the seq of the last message observed: the window's messages are the rows after it, read in the same
    # statement as the row so that both come from one snapshot
    sa.Column("observed_seq", sa.BigInteger(), nullable=False, server_default="0"),
)
sa.Index("ix_om_records_tenant_resource_id", records.c.tenant, records.c.resource_id)
sa.Index(
    "ix_om_records_pending_work",
    records.c.stream_id,
    postgresql_where=records.c.pending_work,
    sqlite_where=records.c.pending_work,
)

messages = sa.Table(
    "om_messages",
    metadata,
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("message_id", sa.Text(), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("stream_version", sa.BigInteger(), nullable=False),
    sa.Column("tenant", sa.Text(), nullable=False),
    sa.Column("thread_id", sa.Text(), nullable=True),
    sa.Column("resource_id", sa.Text(), nullable=True),
    sa.Column("role", sa.Text(), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("tokens", sa.Integer(), nullable=False),
    sa.Column("content_hash", sa.Text(), nullable=False),
    sa.Column("message", JsonDocument, nullable=False),
    sa.Column("search", sa.Text(), nullable=False),
    sa.Column(
        "search_tsv",
        postgresql.TSVECTOR(),
        sa.Computed(f"to_tsvector('{SEARCH_TEXT_CONFIG}'::regconfig, search)", persisted=True),
        info=POSTGRES_ONLY,
    ),
    sa.PrimaryKeyConstraint("stream_id", "message_id"),
)
sa.Index(
    "ix_om_messages_stream_id_created_at",
    messages.c.stream_id,
    messages.c.created_at,
    messages.c.message_id,
)
# the window of a record: the rows after its observed_seq, read with every state read (without it the read
# filters every message of the stream)
sa.Index("ix_om_messages_stream_id_seq", messages.c.stream_id, messages.c.seq)
sa.Index(
    "ix_om_messages_tenant_resource_id_thread_id_created_at",
    messages.c.tenant,
    messages.c.resource_id,
    messages.c.thread_id,
    messages.c.created_at,
)
sa.Index("ix_om_messages_search_tsv", messages.c.search_tsv, postgresql_using="gin", info=POSTGRES_ONLY)

MESSAGES_KEY = "pk_om_messages"

outbox = sa.Table(
    "om_outbox",
    metadata,
    sa.Column("id", Position, sa.Identity(always=False), primary_key=True),
    sa.Column("key", sa.Text(), nullable=False),
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("task_name", sa.Text(), nullable=False),
    sa.Column("queue", sa.Text(), nullable=False),
    sa.Column("payload", JsonDocument, nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False, server_default=UtcNow()),
    sa.Column("published_at", UtcDateTime(), nullable=True),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
    sa.Column("last_error", sa.Text(), nullable=True),
    # when the task's run ended (alembic 0005): a task published long ago and not completed is published
    # again, since the broker may have lost it
    sa.Column("completed_at", UtcDateTime(), nullable=True),
    sa.UniqueConstraint("key"),
    sqlite_autoincrement=True,
)
sa.Index(
    "ix_om_outbox_unpublished",
    outbox.c.created_at,
    postgresql_where=outbox.c.published_at.is_(None),
    sqlite_where=outbox.c.published_at.is_(None),
)
sa.Index("ix_om_outbox_stream_id", outbox.c.stream_id)
_incomplete = sa.and_(outbox.c.published_at.is_not(None), outbox.c.completed_at.is_(None))
sa.Index(
    "ix_om_outbox_incomplete",
    outbox.c.published_at,
    postgresql_where=_incomplete,
    sqlite_where=_incomplete,
)

# Who runs a piece of work in flight now, and until when unless renewed (alembic 0005). A cycle's lease has
# the key of its outbox row (``<stream>:<cycle>``); a proxied model call's is named for the message it
# answers. Rows live only while the work runs, so the table stays as small as the work in flight.
leases = sa.Table(
    "om_leases",
    metadata,
    sa.Column("key", sa.Text(), primary_key=True),
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("holder", sa.Text(), nullable=False),
    sa.Column("acquired_at", UtcDateTime(), nullable=False, server_default=UtcNow()),
    sa.Column("expires_at", UtcDateTime(), nullable=False),
)
sa.Index("ix_om_leases_expires_at", leases.c.expires_at)
sa.Index("ix_om_leases_stream_id", leases.c.stream_id)

# The vector index of observation groups (retrieval ``vector: true``). Embeddings are JSON arrays ranked in
# the application: recall searches one resource's or thread's groups, a few thousand at most, so a scan of
# them beats depending on a database extension.
indexed_groups = sa.Table(
    "om_indexed_groups",
    metadata,
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("group_id", sa.Text(), nullable=False),
    sa.Column("tenant", sa.Text(), nullable=False),
    sa.Column("thread_id", sa.Text(), nullable=True),
    sa.Column("resource_id", sa.Text(), nullable=True),
    sa.Column("range_start", sa.Text(), nullable=False),
    sa.Column("range_end", sa.Text(), nullable=False),
    sa.Column("text", sa.Text(), nullable=False),
    sa.Column("observed_at", sa.Text(), nullable=False),
    sa.Column("model", sa.Text(), nullable=False),
    sa.Column("embedding", sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint("stream_id", "group_id"),
)
sa.Index("ix_om_indexed_groups_tenant_stream_id", indexed_groups.c.tenant, indexed_groups.c.stream_id)
sa.Index("ix_om_indexed_groups_tenant_resource_id", indexed_groups.c.tenant, indexed_groups.c.resource_id)

api_keys = sa.Table(
    "om_api_keys",
    metadata,
    sa.Column("key_hash", sa.Text(), primary_key=True),
    sa.Column("tenant", sa.Text(), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False, server_default=UtcNow()),
    sa.Column("label", sa.Text(), nullable=True),
)


def applies_to(obj: object, dialect_name: str) -> bool:
    """Whether a schema object exists on ``dialect_name`` (see ``POSTGRES_ONLY``)."""
    info = getattr(obj, "info", None) or {}
    dialects = info.get("dialects")
    return dialects is None or dialect_name in dialects
