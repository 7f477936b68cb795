"""The event store adapter: SQLAlchemy Core over Postgres or SQLite, schema owned by Alembic."""

from om_core.adapters.store.sql_store import SqlEventStore, create_event_store

__all__ = ["SqlEventStore", "create_event_store"]
