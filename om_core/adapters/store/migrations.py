"""Running the Alembic migrations from code: `om migrate`, the embedded SQLite mode, and tests."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

from alembic import command

MIGRATIONS_PACKAGE = "om_migrations"
# The advisory lock every upgrade of a Postgres database holds: "om" in ASCII, then "mg". The scan locks of
# beat use the same prefix with small numbers, so the keys never meet.
MIGRATION_LOCK = 0x6F6D_6D67


def script_location() -> Path:
    """The Alembic scripts: the checkout's top-level alembic/ folder, installed as the om_migrations package.

    That folder has no ``__init__.py`` (one would shadow the Alembic library when the checkout is on
    sys.path), so the package is a namespace package. Its search path is the folder, in a wheel and in an
    editable install alike; importlib.resources cannot open an editable install's namespace package.
    """
    spec = find_spec(MIGRATIONS_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in map(Path, locations):
        if (location / "env.py").is_file():
            return location
    raise RuntimeError(
        f"om's migrations (the {MIGRATIONS_PACKAGE} package) are not installed: reinstall om"
        " (in a checkout: pip install -e .)"
    )


def alembic_config(url: str) -> Config:
    # No alembic.ini: it configures the alembic command line in a checkout, and a wheel has none.
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    # Passed as an attribute, not a main option: ConfigParser would treat a '%' in a password as
    # interpolation.
    config.attributes["url"] = url
    config.attributes["configure_logger"] = False
    return config


def ensure_sqlite_directory(url: str) -> None:
    """SQLite creates the database file but not its directory."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(str(parsed.database)).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)


def upgrade_to_head(url: str) -> None:
    """Upgrade the schema to the newest revision. Any number of processes may do this at once (replicas
    rolling out, an init container per pod): they take turns on a lock, and every one after the first finds
    the schema at head and has nothing to do."""
    ensure_sqlite_directory(url)
    with migration_lock(url):
        command.upgrade(alembic_config(url), "head")


@contextlib.contextmanager
def migration_lock(url: str) -> Iterator[None]:
    """Held around an upgrade. Postgres: a session advisory lock on a connection of its own (in autocommit,
    so it holds no transaction open while Alembic runs its own). SQLite: an exclusive lock on a file beside
    the database, since two processes' DDL would otherwise race on the same file."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            yield
            return
        lock_path = Path(f"{Path(str(parsed.database)).expanduser().resolve()}.migrate-lock")
        with lock_path.open("a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
        return
    engine = create_engine(url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
    finally:
        engine.dispose()


def downgrade_to_base(url: str) -> None:
    command.downgrade(alembic_config(url), "base")


def current_revision(url: str) -> str | None:
    """The revision the database is at, None for an empty database."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
