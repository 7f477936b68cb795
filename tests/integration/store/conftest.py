"""Scratch databases for the store suite: a SQLite file per test, a Postgres database per test class."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testing.postgres import scratch_postgres


@pytest.fixture(scope="class")
def migrated_postgres_url() -> Iterator[str]:
    with scratch_postgres(prefix="om_test_store") as url:
        yield url


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    with scratch_postgres(prefix="om_test_migrate", migrate=False) as url:
        yield url
