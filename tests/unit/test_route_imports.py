"""The routes are thin: of the project's own code they import only the application (``om_core.application``)
and the API package, so whatever they answer, a use case decides it (read from the sources with ``ast``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUTES = ROOT / "om_api" / "routes"
OWN = ("om_core", "om_workers", "om_api", "om_migrations")
ALLOWED = ("om_core.application", "om_api")


def imported_past_the_application() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted(ROUTES.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                own = module.split(".")[0] in OWN
                allowed = any(module == a or module.startswith(f"{a}.") for a in ALLOWED)
                if own and not allowed:
                    found.add((where, module))
    return found


def test_routes_import_only_the_application_and_the_api() -> None:
    assert imported_past_the_application() == set()
