"""Records name the event they are as of, say whether work is pending, and keep their state as JSON text.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

- ``position``: the global position of the last event a record's state covers. A process that holds the
  state of that position reads one small row instead of the whole document (om_core/application/
  state_cache.py).
- ``pending_work``: chunks waiting or a cycle in flight, written with the state, so the idle sweep and the
  stuck-cycle recovery find their records through a partial index instead of parsing every state.
- ``log``: the observation log's segments, written only by the commits that change the log; the logs of
  existing rows move there.
- The window's messages leave ``state``: they are rows of ``om_messages`` already, which reads put back.
  Temporal markers, which have no such row, stay.
- ``state`` becomes ``json`` on Postgres: the record is written on every append and read whole, never
  queried inside, and ``jsonb`` made the server parse it on the way in and rebuild its text on the way out.
  Where the server has lz4 it compresses the state (pglz took twice as long to write a 400 KB state).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PENDING_POSTGRES = (
    "jsonb_array_length(coalesce(state->'chunks', '[]'::jsonb)) > 0"
    " OR coalesce(state->'buffer_in_flight', 'null'::jsonb) <> 'null'::jsonb"
    " OR coalesce(state->'sync_in_flight', 'null'::jsonb) <> 'null'::jsonb"
    " OR coalesce(state->'reflection_in_flight', 'null'::jsonb) <> 'null'::jsonb"
)
_PENDING_SQLITE = (
    "coalesce(json_array_length(json_extract(state, '$.chunks')), 0) > 0"
    " OR json_extract(state, '$.buffer_in_flight') IS NOT NULL"
    " OR json_extract(state, '$.sync_in_flight') IS NOT NULL"
    " OR json_extract(state, '$.reflection_in_flight') IS NOT NULL"
)
_LAST_POSITION = (
    "coalesce((SELECT max(e.global_position) FROM om_events e WHERE e.stream_id = om_records.stream_id), 0)"
)


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("om_records") as batch:
        batch.add_column(sa.Column("position", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("pending_work", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("log", sa.JSON(), nullable=True))
    pending = _PENDING_POSTGRES if pg else _PENDING_SQLITE
    op.execute(f"UPDATE om_records SET position = {_LAST_POSITION}, pending_work = ({pending})")
    if pg:
        op.execute(
            "UPDATE om_records SET log = (state -> 'log')::json, state = state - 'log' WHERE state ? 'log'"
        )
        op.execute(
            "UPDATE om_records SET state = jsonb_set(state, '{window}',"
            " jsonb_path_query_array(state, '$.window[*] ? (@.kind == \"marker\")'))"
            " WHERE jsonb_typeof(state -> 'window') = 'array'"
        )
        op.execute("ALTER TABLE om_records ALTER COLUMN state TYPE json USING state::json")
        lz4 = op.get_bind().scalar(
            sa.text(
                "SELECT count(*) FROM pg_settings"
                " WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
            )
        )
        if lz4:
            op.execute("ALTER TABLE om_records ALTER COLUMN state SET COMPRESSION lz4")
            op.execute("ALTER TABLE om_records ALTER COLUMN log SET COMPRESSION lz4")
    else:
        op.execute(
            "UPDATE om_records SET log = json_extract(state, '$.log'), state = json_remove(state, '$.log')"
            " WHERE json_type(state, '$.log') IS NOT NULL"
        )
        op.execute(
            "UPDATE om_records SET state = json_set(state, '$.window', (SELECT json_group_array(json(value))"
            " FROM json_each(om_records.state, '$.window') WHERE json_extract(value, '$.kind') = 'marker'))"
            " WHERE json_type(state, '$.window') = 'array'"
        )
    op.create_index(
        "ix_om_records_pending_work",
        "om_records",
        ["stream_id"],
        postgresql_where=sa.text("pending_work"),
        sqlite_where=sa.text("pending_work"),
    )


def downgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    op.drop_index("ix_om_records_pending_work", table_name="om_records")
    # The log goes back inside the state. The window's messages are not in it, which the previous revision's
    # code cannot know: an unknown key makes that code refuse the snapshot and fold the stream from its
    # events instead, until its next append writes a whole snapshot again.
    if pg:
        op.execute("ALTER TABLE om_records ALTER COLUMN state TYPE jsonb USING state::jsonb")
        op.execute(
            "UPDATE om_records SET state = jsonb_set(state, '{log}', coalesce(log::jsonb, '[]'::jsonb))"
            " || '{\"window_in_om_messages\": true}'::jsonb"
        )
    else:
        op.execute(
            "UPDATE om_records SET state = json_set(state, '$.log', json(coalesce(log, '[]')),"
            " '$.window_in_om_messages', json('true'))"
        )
    with op.batch_alter_table("om_records") as batch:
        batch.drop_column("log")
        batch.drop_column("pending_work")
        batch.drop_column("position")
