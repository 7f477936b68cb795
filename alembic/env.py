"""Alembic environment for the om schema (Postgres and SQLite)."""

from __future__ import annotations

import os
from logging.config import fileConfig
from typing import Any

from sqlalchemy import create_engine, pool

from alembic import context
from om_core.adapters.store.schema import applies_to, metadata

config = context.config

# Programmatic runs (om_core.adapters.store.migrations) leave the host application's logging alone.
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def database_url() -> str:
    url = (
        config.attributes.get("url")
        or context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("OM_DATABASE_URL")
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise RuntimeError("no database URL: set OM_DATABASE_URL, pass -x url=..., or set sqlalchemy.url")
    return str(url)


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    dialect = context.get_context().dialect.name
    return applies_to(obj, dialect) and (compare_to is None or applies_to(compare_to, dialect))


def run_migrations_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        include_object=include_object,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                include_object=include_object,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
