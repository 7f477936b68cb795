"""No caller reaches past a port: the entry points and the use cases talk to the store through its roles.

Read from the sources with ``ast``. Outside the store adapter nothing unwraps a store (``.inner``), takes its
SQL engine (``.engine``, ``engine_of``) or imports the adapter's SQL internals (its tables and backend
modules); naming ``om_core.adapters.store`` itself (``create_event_store``) and its migrations is what a
composition root does. The tests and ``bench/`` may inspect the adapter they build: they are not scanned.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("om_api", "om_workers", "om_core/application", "om_core/bootstrap.py", "om_core/settings.py")
REACHING_ATTRIBUTES = frozenset({"inner", "engine"})
STORE_PACKAGE = "om_core.adapters.store"
# the adapter's SQL internals: every module of the package but its migrations
STORE_INTERNALS = frozenset(
    f"{STORE_PACKAGE}.{path.stem}"
    for path in (ROOT / "om_core" / "adapters" / "store").glob("*.py")
    if path.stem not in ("__init__", "migrations")
)


def sources(root: Path) -> list[Path]:
    found: list[Path] = []
    for entry in SCANNED:
        path = root / entry
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(path.rglob("*.py")))
    return found


def reaches_past_a_port(root: Path) -> list[str]:
    """Every place under ``root`` that unwraps a store, takes its engine or imports its SQL internals."""
    found: list[str] = []
    for path in sources(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in REACHING_ATTRIBUTES:
                found.append(f"{where}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Name) and node.id == "engine_of":
                found.append(f"{where}:{node.lineno}: engine_of")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in REACHING_ATTRIBUTES
            ):
                found.append(f"{where}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                named = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                if any(module in STORE_INTERNALS for module in named):
                    found.append(f"{where}:{node.lineno}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                found.extend(
                    f"{where}:{node.lineno}: import {alias.name}"
                    for alias in node.names
                    if alias.name in STORE_INTERNALS
                )
    return found


def test_no_entry_point_or_use_case_reaches_past_a_port() -> None:
    found = reaches_past_a_port(ROOT)
    assert not found, "reaching past the store's ports:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "reported"),
    [
        ("engine = deps.store.engine\n", ".engine"),
        ("inner = getattr(deps.store, 'inner', deps.store)\n", "getattr(..., 'inner')"),
        ("answer = {'engine': 'fts'}\nengine_of(deps.store)\n", "engine_of"),
        ("from om_core.adapters.store.schema import records\n", "from om_core.adapters.store.schema"),
        ("from om_core.adapters.store import schema\n", "from om_core.adapters.store import"),
        ("import om_core.adapters.store.postgres\n", "import om_core.adapters.store.postgres"),
    ],
)
def test_each_way_of_reaching_past_a_port_is_reported(tmp_path: Path, source: str, reported: str) -> None:
    (tmp_path / "om_api").mkdir()
    (tmp_path / "om_api" / "route.py").write_text(source)
    (tmp_path / "om_api" / "fine.py").write_text(
        "from om_core.adapters.store import create_event_store\n"
        "from om_core.adapters.store.migrations import upgrade_to_head\n"
        "deps.records.load_snapshot('s')\n"
    )
    found = reaches_past_a_port(tmp_path)
    assert len(found) == 1 and reported in found[0] and found[0].startswith("om_api/route.py:"), found
