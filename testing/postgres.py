"""Scratch Postgres databases: a new database per test (or benchmark run) on the test server, dropped
afterwards.

The server is ``OM_TEST_DATABASE_URL`` (``scripts/services.sh`` exports it and starts Postgres when none
answers), else the local default; a benchmark passes its own ``--database-url``. Whichever database that URL
names, databases are created and dropped from the server's maintenance database, ``postgres``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from om_core.adapters.store.migrations import upgrade_to_head

DEFAULT_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def postgres_server(url: str | None = None) -> URL:
    """The maintenance database of the server at ``url`` (default: the test server), through psycopg."""
    server = make_url(url or os.environ.get("OM_TEST_DATABASE_URL", DEFAULT_SERVER))
    if server.drivername == "postgresql":
        server = server.set(drivername="postgresql+psycopg")
    return server.set(database="postgres")


def _admin(server: URL) -> sa.Engine:
    return sa.create_engine(server, isolation_level="AUTOCOMMIT")


def create_postgres_database(prefix: str, server: str | None = None) -> str:
    """A new empty database ``<prefix>_<random>`` on ``server`` (default: the test server); its URL."""
    maintenance = postgres_server(server)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = _admin(maintenance)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as error:
        # a missing server fails the test (scripts/test.sh starts one), it does not skip it
        where = maintenance.render_as_string()
        raise RuntimeError(f"Postgres at {where} is not reachable: {error.orig}") from None
    finally:
        admin.dispose()
    return maintenance.set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(url: str) -> None:
    """Drop the database of ``url``, closing whatever connections are still open to it."""
    admin = _admin(postgres_server(url))
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    finally:
        admin.dispose()


@contextlib.contextmanager
def scratch_postgres(
    server: str | None = None, prefix: str = "om_scratch", *, migrate: bool = True
) -> Iterator[str]:
    """A new database on ``server`` (default: the test server), migrated to head unless ``migrate`` is
    false; dropped afterwards. Yields its URL."""
    url = create_postgres_database(prefix, server)
    try:
        if migrate:
            upgrade_to_head(url)
        yield url
    finally:
        drop_postgres_database(url)
