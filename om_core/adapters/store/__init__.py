"""The event store adapter: SQLAlchemy Core over Postgres or SQLite, schema owned by Alembic.

One module per backend (``postgres.py``, ``sqlite.py``) over a shared base (``base.py``);
``create_event_store`` picks the class from the URL.
"""

from __future__ import annotations

from sqlalchemy.engine import make_url

from om_core.adapters.store.base import SqlEventStore
from om_core.adapters.store.postgres import PostgresEventStore, create_postgres_engine
from om_core.adapters.store.sqlite import SqliteEventStore, create_sqlite_engine
from om_core.domain.upcasting import Upcasters

__all__ = [
    "DEFAULT_MAX_OVERFLOW",
    "DEFAULT_POOL_SIZE",
    "PostgresEventStore",
    "SqlEventStore",
    "SqliteEventStore",
    "create_event_store",
]

# Postgres connections a process keeps, and none beyond them: a connection opened past the pool is closed
# when it is given back, so a load above the pool starts and stops a backend per request
# (OM_DB_POOL_SIZE, OM_DB_MAX_OVERFLOW)
DEFAULT_POOL_SIZE = 16
DEFAULT_MAX_OVERFLOW = 0


def create_event_store(
    url: str,
    *,
    upcasters: Upcasters | None = None,
    pool_size: int = DEFAULT_POOL_SIZE,
    max_overflow: int = DEFAULT_MAX_OVERFLOW,
    pool_pre_ping: bool = False,
) -> SqlEventStore:
    """A store for a ``postgresql+psycopg://`` or ``sqlite:///`` URL. The schema must be migrated already.

    Without ``pool_pre_ping`` (a round trip on every checkout, about a third of a state read here) the first
    call after the database restarted fails with StoreUnavailableError and the pool reconnects.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return SqliteEventStore(create_sqlite_engine(parsed), upcasters=upcasters)
    if backend == "postgresql":
        engine = create_postgres_engine(
            parsed, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=pool_pre_ping
        )
        return PostgresEventStore(engine, upcasters=upcasters)
    raise ValueError(f"unsupported database {backend!r}: use postgresql+psycopg:// or sqlite:///")
