"""docs/operations.md says what the service has: every metric it exposes, every migration, every setting."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry

import om_workers.metrics  # noqa: F401  (registers the engine's metrics)
from om_api.app import Metrics
from om_core.settings import ENV_PREFIX, ServerSettings
from om_workers.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()


def _exposed(registry: CollectorRegistry) -> set[str]:
    """The metric names a scrape shows (a counter's with ``_total``)."""
    names = set()
    for family in registry.collect():
        if family.name.startswith("om_"):
            names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def _section(title: str) -> str:
    start = OPERATIONS.index(f"## {title}")
    end = OPERATIONS.find("\n## ", start + 3)
    return OPERATIONS[start : end if end != -1 else None]


def test_the_metrics_table_names_every_metric() -> None:
    table = {m for m in re.findall(r"`(om_[a-z_]+)`", _section("Metrics"))}
    exposed = _exposed(REGISTRY) | _exposed(Metrics().registry)
    assert exposed - table == set(), "metrics missing from the table"
    assert table - exposed == set(), "the table names metrics that do not exist"


def test_the_migration_list_names_every_migration() -> None:
    revisions = sorted(p.name[:4] for p in (ROOT / "alembic" / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    listed = _section("Schema, projections and upgrades")
    migrations = listed[listed.index("Migrations so far") :]
    assert revisions and all(f"`{revision}`" in migrations for revision in revisions)


def test_every_setting_is_documented() -> None:
    variables = {ENV_PREFIX + name.upper() for name in ServerSettings.model_fields}
    variables |= {"OM_WORKER_" + name.upper() for name in WorkerSettings.model_fields}
    missing = sorted(v for v in variables if not re.search(rf"`{v}`", OPERATIONS))
    assert missing == []
