"""Work in flight is leased, and a published task is done only once it ran.

``om_leases`` holds who runs a cycle (or a proxied model call) now, and until when unless renewed: a holder
that stops renewing has died, and its work is taken back (docs/operations.md, Work in flight).
``om_outbox.completed_at`` is set when a task's run ended; a task published long ago and never completed
was lost by the broker and is published again. Rows published before this revision count as completed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# the database clock, as 0001 writes it on SQLite (fixed-width ISO text, so that text order is time order)
SQLITE_UTC_NOW = "(strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now'))"

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    time_type: sa.types.TypeEngine = sa.DateTime(timezone=True) if pg else sa.String(32)
    now = sa.text("now()" if pg else SQLITE_UTC_NOW)
    op.create_table(
        "om_leases",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("acquired_at", time_type, nullable=False, server_default=now),
        sa.Column("expires_at", time_type, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_om_leases"),
    )
    op.create_index("ix_om_leases_expires_at", "om_leases", ["expires_at"])
    op.create_index("ix_om_leases_stream_id", "om_leases", ["stream_id"])
    with op.batch_alter_table("om_outbox") as batch:
        batch.add_column(sa.Column("completed_at", time_type, nullable=True))
    op.execute("UPDATE om_outbox SET completed_at = published_at WHERE published_at IS NOT NULL")
    incomplete = sa.text("published_at IS NOT NULL AND completed_at IS NULL")
    op.create_index(
        "ix_om_outbox_incomplete",
        "om_outbox",
        ["published_at"],
        postgresql_where=incomplete,
        sqlite_where=incomplete,
    )


def downgrade() -> None:
    op.drop_index("ix_om_outbox_incomplete", table_name="om_outbox")
    with op.batch_alter_table("om_outbox") as batch:
        batch.drop_column("completed_at")
    op.drop_index("ix_om_leases_stream_id", table_name="om_leases")
    op.drop_index("ix_om_leases_expires_at", table_name="om_leases")
    op.drop_table("om_leases")
