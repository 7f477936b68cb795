"""Running the Alembic migrations from code: `om migrate`, the embedded SQLite mode, and tests."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import make_url

from alembic import command

MIGRATIONS_PACKAGE = "om_migrations"


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
    ensure_sqlite_directory(url)
    command.upgrade(alembic_config(url), "head")


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
