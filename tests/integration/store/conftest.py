"""Scratch databases for the store suite: a SQLite file per test, a Postgres database per test class."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from om_core.adapters.store.migrations import upgrade_to_head

DEFAULT_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def postgres_server() -> URL:
    return make_url(os.environ.get("OM_TEST_DATABASE_URL", DEFAULT_SERVER))


def _admin_engine() -> sa.Engine:
    return sa.create_engine(postgres_server().set(database="postgres"), isolation_level="AUTOCOMMIT")


def create_postgres_database(prefix: str) -> str:
    """A new empty database on the test server."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = _admin_engine()
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as error:
        # scripts/test.sh starts Postgres when none answers: a missing server is a failure, not a skip
        pytest.fail(f"Postgres at {postgres_server().render_as_string()} is not reachable: {error.orig}")
    finally:
        admin.dispose()
    return postgres_server().set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(url: str) -> None:
    admin = _admin_engine()
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    finally:
        admin.dispose()


@pytest.fixture(scope="class")
def migrated_postgres_url() -> Iterator[str]:
    url = create_postgres_database("om_test_store")
    try:
        upgrade_to_head(url)
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    url = create_postgres_database("om_test_migrate")
    try:
        yield url
    finally:
        drop_postgres_database(url)
