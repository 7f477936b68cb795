"""The store's roles beside the event store proper, on SQLite and Postgres alike: which class an engine
gets, the scan locks, the API keys, and the metered event store the workers wrap around it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY

from om_core.adapters.store import (
    PostgresEventStore,
    SqlEventStore,
    SqliteEventStore,
    create_event_store,
)
from om_core.adapters.store.migrations import upgrade_to_head
from om_core.application.ports import ConcurrencyError
from om_core.domain.envelope import NewEvent
from om_workers.metrics import MeteredEventStore

LOCK = 0x6F6D_00FF


class StoreRoles:
    """Subclasses provide ``url``: a migrated database."""

    backend: type[SqlEventStore]

    @pytest.fixture
    def store(self, url: str) -> Iterator[SqlEventStore]:
        store = create_event_store(url)
        yield store
        store.close()

    def test_an_engine_gets_the_store_of_its_dialect(self, url: str, store: SqlEventStore) -> None:
        assert type(store) is self.backend
        engine = sa.create_engine(url)
        try:
            assert type(SqlEventStore(engine)) is self.backend
        finally:
            engine.dispose()

    def test_a_scan_lock_has_one_holder_at_a_time(self, url: str, store: SqlEventStore) -> None:
        other = create_event_store(url)  # another process's store, as far as the lock can tell
        try:
            with store.try_lock(LOCK) as held:
                assert held
                with other.try_lock(LOCK) as second:
                    assert not second
                with other.try_lock(LOCK + 1) as another_scan:
                    assert another_scan
            with other.try_lock(LOCK) as after_release:
                assert after_release
        finally:
            other.close()

    def test_a_stored_key_names_its_tenant(self, store: SqlEventStore) -> None:
        digest = uuid.uuid4().hex
        assert store.tenant_of_key(digest) is None
        store.add_key(digest, "acme", "ci")
        assert store.tenant_of_key(digest) == "acme"

    def test_the_metered_store_counts_appends_by_outcome(self, store: SqlEventStore) -> None:
        metered = MeteredEventStore(store)
        stream = f"acme/thread/{uuid.uuid4().hex}"

        def count(outcome: str) -> float:
            return REGISTRY.get_sample_value("om_appends_total", {"outcome": outcome}) or 0.0

        ok, conflicts = count("ok"), count("conflict")
        metered.append(stream, [NewEvent("Noted", {"n": 1}), NewEvent("Noted", {"n": 2})], 0)
        with pytest.raises(ConcurrencyError):
            metered.append(stream, [NewEvent("Noted", {"n": 3})], 0)
        assert (count("ok") - ok, count("conflict") - conflicts) == (1, 1)
        assert [e.data["n"] for e in metered.read_stream(stream)] == [1, 2]
        assert list(metered.iter_streams(stream)) == [stream]


class TestSqliteStoreRoles(StoreRoles):
    backend = SqliteEventStore

    @pytest.fixture
    def url(self, tmp_path: Path) -> str:
        url = f"sqlite:///{tmp_path / 'om.db'}"
        upgrade_to_head(url)
        return url


@pytest.mark.integration
class TestPostgresStoreRoles(StoreRoles):
    backend = PostgresEventStore

    @pytest.fixture
    def url(self, migrated_postgres_url: str) -> str:
        return migrated_postgres_url
