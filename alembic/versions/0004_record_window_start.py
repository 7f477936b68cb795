"""The record row names where its window starts (``observed_seq``), so that one statement can read the row
and the window's messages from the same snapshot; an index finds those messages by (stream, seq), so the
read does not grow with the stream.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("om_records") as batch:
        batch.add_column(sa.Column("observed_seq", sa.BigInteger(), nullable=False, server_default="0"))
    observed = (
        "coalesce((state->>'observed_seq')::bigint, 0)"
        if pg
        else "coalesce(json_extract(state, '$.observed_seq'), 0)"
    )
    op.execute(f"UPDATE om_records SET observed_seq = {observed}")
    op.create_index("ix_om_messages_stream_id_seq", "om_messages", ["stream_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_om_messages_stream_id_seq", table_name="om_messages")
    with op.batch_alter_table("om_records") as batch:
        batch.drop_column("observed_seq")
