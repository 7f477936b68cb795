"""The vector index of observation groups (retrieval ``vector: true``), searched by recall.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "om_indexed_groups",
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
        sa.PrimaryKeyConstraint("stream_id", "group_id", name="pk_om_indexed_groups"),
    )
    op.create_index("ix_om_indexed_groups_tenant_stream_id", "om_indexed_groups", ["tenant", "stream_id"])
    op.create_index("ix_om_indexed_groups_tenant_resource_id", "om_indexed_groups", ["tenant", "resource_id"])


def downgrade() -> None:
    op.drop_index("ix_om_indexed_groups_tenant_resource_id", table_name="om_indexed_groups")
    op.drop_index("ix_om_indexed_groups_tenant_stream_id", table_name="om_indexed_groups")
    op.drop_table("om_indexed_groups")
