"""Alembic owns the schema: upgrade from empty, downgrade to nothing, upgrade again; models match."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from alembic import command
from om_core.adapters.store.migrations import (
    alembic_config,
    current_revision,
    downgrade_to_base,
    upgrade_to_head,
)
from om_core.adapters.store.schema import applies_to, metadata

REPO_ROOT = Path(__file__).resolve().parents[3]
TABLES = {
    "om_events",
    "om_records",
    "om_messages",
    "om_outbox",
    "om_leases",
    "om_api_keys",
    "om_indexed_groups",
}


def table_names(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def schema_differences(url: str) -> list[object]:
    """What ``alembic revision --autogenerate`` would change: nothing, if schema.py matches the migrations."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:

            def include(
                obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
            ) -> bool:
                dialect = conn.dialect.name
                return (
                    name != "alembic_version" and applies_to(obj, dialect) and applies_to(compare_to, dialect)
                )

            context = MigrationContext.configure(conn, opts={"include_object": include})
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


@pytest.mark.integration
def test_alembic_cli_upgrades_an_empty_postgres_database_and_downgrades_it(empty_postgres_url: str) -> None:
    def alembic(*args: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "alembic", "-x", f"url={empty_postgres_url}", *args],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
        )

    assert table_names(empty_postgres_url) == set()
    alembic("upgrade", "head")
    assert table_names(empty_postgres_url) == TABLES
    assert current_revision(empty_postgres_url) == "0005"
    assert schema_differences(empty_postgres_url) == []
    alembic("downgrade", "base")
    assert table_names(empty_postgres_url) == set()
    assert current_revision(empty_postgres_url) is None
    upgrade_to_head(empty_postgres_url)
    assert table_names(empty_postgres_url) == TABLES


def test_sqlite_upgrade_downgrade_and_models_match(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a' / 'b' / 'om.db'}"
    upgrade_to_head(url)
    assert table_names(url) == TABLES
    assert schema_differences(url) == []
    downgrade_to_base(url)
    assert table_names(url) == set()
    upgrade_to_head(url)
    assert current_revision(url) == "0005"


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_0002_keeps_existing_records_moves_their_log_out_and_backfills_position_and_pending_work(
    backend: str, empty_postgres_url: str, tmp_path: Path
) -> None:
    url = empty_postgres_url if backend == "postgres" else f"sqlite:///{tmp_path / 'om.db'}"
    command.upgrade(alembic_config(url), "0001")
    uuid_value = "00000000-0000-0000-0000-00000000000{}"
    states = {
        "t/thread/busy": '{"stream_id": "t/thread/busy", "chunks": [{"cycle_id": "c"}], "log": [{"t": 1}]}',
        "t/thread/idle": (
            '{"stream_id": "t/thread/idle", "chunks": [], "sync_in_flight": null,'
            ' "window": [{"seq": 1, "kind": "message"}, {"seq": 2, "kind": "marker"}]}'
        ),
    }
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for n, stream in enumerate(["t/thread/busy", "t/thread/idle", "t/thread/busy"], start=1):
                conn.execute(
                    sa.text(
                        "INSERT INTO om_events (stream_id, stream_version, event_id, event_type,"
                        " schema_version, data, metadata) VALUES (:s, :v, :id, 'Noted', 1, '{}', '{}')"
                    ),
                    {"s": stream, "v": 1 if n < 3 else 2, "id": uuid_value.format(n)},
                )
            for stream, state in states.items():
                conn.execute(
                    sa.text(
                        "INSERT INTO om_records (stream_id, tenant, version, state)"
                        " VALUES (:s, 't', 1, :state)"
                    ),
                    {"s": stream, "state": state},
                )
        upgrade_to_head(url)
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT stream_id, position, pending_work, CAST(state AS TEXT) AS state,"
                    " CAST(log AS TEXT) AS log FROM om_records ORDER BY stream_id"
                )
            ).all()
        assert [(r.stream_id, r.position, bool(r.pending_work)) for r in rows] == [
            ("t/thread/busy", 3, True),
            ("t/thread/idle", 2, False),
        ]
        for row in rows:
            before = json.loads(states[row.stream_id])
            expected = {k: v for k, v in before.items() if k != "log"}
            if "window" in expected:
                # the messages are om_messages rows; markers have none and stay
                expected["window"] = [m for m in expected["window"] if m["kind"] == "marker"]
            assert json.loads(row.state) == expected
            assert (json.loads(row.log) if row.log else None) == before.get("log")
        command.downgrade(alembic_config(url), "0001")
        with engine.connect() as conn:
            restored = dict(
                conn.execute(sa.text("SELECT stream_id, CAST(state AS TEXT) FROM om_records")).tuples().all()
            )
        # the log is back inside the state; the mark makes the previous code fold these records from events
        for stream, state in states.items():
            before = json.loads(state)
            assert json.loads(restored[stream]) == {
                **before,
                **(
                    {"window": [m for m in before["window"] if m["kind"] == "marker"]}
                    if "window" in before
                    else {}
                ),
                "log": before.get("log", []),
                "window_in_om_messages": True,
            }
    finally:
        engine.dispose()
