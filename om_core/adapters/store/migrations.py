"""Running the Alembic migrations from code: `om migrate`, the embedded SQLite mode, and tests."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import make_url

from alembic import command

# The repository root holds alembic.ini and alembic/; this module sits three packages below it, which is
# also where an editable install leaves it.
REPO_ROOT = Path(__file__).resolve().parents[3]
ALEMBIC_INI = REPO_ROOT / "alembic.ini"
SCRIPT_LOCATION = REPO_ROOT / "alembic"


def alembic_config(url: str) -> Config:
    if not SCRIPT_LOCATION.is_dir():
        raise RuntimeError(
            f"alembic scripts not found at {SCRIPT_LOCATION}; is om installed from a checkout?"
        )
    config = Config(str(ALEMBIC_INI)) if ALEMBIC_INI.is_file() else Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
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
