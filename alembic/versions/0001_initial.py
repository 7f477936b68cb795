"""Initial schema: events, inline records, message projection, outbox, API keys.

Revision ID: 0001
Revises:
Create Date: 2025-11-30

Self-contained on purpose: a migration must keep producing the same schema however the application's table
definitions (om_core/adapters/store/schema.py) evolve later.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQLITE_UTC_NOW = "(strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now'))"


class _Xid8(sa.types.UserDefinedType):  # type: ignore[type-arg]
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "XID8"


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    if pg:
        json_type: sa.types.TypeEngine = postgresql.JSONB()
        time_type: sa.types.TypeEngine = sa.DateTime(timezone=True)
        uuid_type: sa.types.TypeEngine = postgresql.UUID(as_uuid=True)
        position_type: sa.types.TypeEngine = sa.BigInteger()
        now = sa.text("now()")
    else:
        json_type = sa.JSON()
        time_type = sa.String(32)
        uuid_type = sa.String(36)
        position_type = sa.Integer()
        now = sa.text(SQLITE_UTC_NOW)

    event_columns = [
        sa.Column("global_position", position_type, sa.Identity(always=False), primary_key=True),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("stream_version", sa.BigInteger(), nullable=False),
        sa.Column("event_id", uuid_type, nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("data", json_type, nullable=False),
        sa.Column("metadata", json_type, nullable=False),
        sa.Column("recorded_at", time_type, nullable=False, server_default=now),
    ]
    if pg:
        event_columns.append(
            sa.Column(
                "tx_id",
                _Xid8(),
                nullable=False,
                server_default=sa.text("pg_current_xact_id()"),
            )
        )
    op.create_table(
        "om_events",
        *event_columns,
        sa.PrimaryKeyConstraint("global_position", name="pk_om_events"),
        sa.UniqueConstraint("stream_id", "stream_version", name="uq_om_events_stream_id_stream_version"),
        sa.UniqueConstraint("event_id", name="uq_om_events_event_id"),
        sqlite_autoincrement=True,
    )
    if pg:
        op.create_index("ix_om_events_tx_id_global_position", "om_events", ["tx_id", "global_position"])

    op.create_table(
        "om_records",
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=True),
        sa.Column("resource_id", sa.Text(), nullable=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("state", json_type, nullable=False),
        sa.Column("updated_at", time_type, nullable=False, server_default=now),
        sa.PrimaryKeyConstraint("stream_id", name="pk_om_records"),
    )
    op.create_index("ix_om_records_tenant_resource_id", "om_records", ["tenant", "resource_id"])

    message_columns = [
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("stream_version", sa.BigInteger(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=True),
        sa.Column("resource_id", sa.Text(), nullable=True),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("created_at", time_type, nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("message", json_type, nullable=False),
        sa.Column("search", sa.Text(), nullable=False),
    ]
    if pg:
        message_columns.append(
            sa.Column(
                "search_tsv",
                postgresql.TSVECTOR(),
                sa.Computed("to_tsvector('simple'::regconfig, search)", persisted=True),
            )
        )
    op.create_table(
        "om_messages",
        *message_columns,
        sa.PrimaryKeyConstraint("stream_id", "message_id", name="pk_om_messages"),
    )
    op.create_index(
        "ix_om_messages_stream_id_created_at", "om_messages", ["stream_id", "created_at", "message_id"]
    )
    op.create_index(
        "ix_om_messages_tenant_resource_id_thread_id_created_at",
        "om_messages",
        ["tenant", "resource_id", "thread_id", "created_at"],
    )
    if pg:
        op.create_index("ix_om_messages_search_tsv", "om_messages", ["search_tsv"], postgresql_using="gin")

    op.create_table(
        "om_outbox",
        sa.Column("id", position_type, sa.Identity(always=False), primary_key=True),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("task_name", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("payload", json_type, nullable=False),
        sa.Column("created_at", time_type, nullable=False, server_default=now),
        sa.Column("published_at", time_type, nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_om_outbox"),
        sa.UniqueConstraint("key", name="uq_om_outbox_key"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_om_outbox_unpublished",
        "om_outbox",
        ["created_at"],
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    )
    op.create_index("ix_om_outbox_stream_id", "om_outbox", ["stream_id"])

    op.create_table(
        "om_api_keys",
        sa.Column("key_hash", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("created_at", time_type, nullable=False, server_default=now),
        sa.Column("label", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("key_hash", name="pk_om_api_keys"),
    )


def downgrade() -> None:
    op.drop_table("om_api_keys")
    op.drop_table("om_outbox")
    op.drop_table("om_messages")
    op.drop_table("om_records")
    op.drop_table("om_events")
