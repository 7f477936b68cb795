"""Alembic owns the schema: upgrade from empty, downgrade to nothing, upgrade again; models match."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from om_core.adapters.store.migrations import (
    REPO_ROOT,
    current_revision,
    downgrade_to_base,
    upgrade_to_head,
)
from om_core.adapters.store.schema import applies_to, metadata

TABLES = {"om_events", "om_records", "om_messages", "om_outbox", "om_api_keys"}


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
    assert current_revision(empty_postgres_url) == "0001"
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
    assert current_revision(url) == "0001"
