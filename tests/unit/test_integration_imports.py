"""The integrations are rooms of their own over the same use cases (read from the sources with ``ast``):
the MCP server reaches om through the application layer and the API package (its key check, error
answers, formats), never an adapter, a worker or a composition root; the framework adapters only through
the HTTP client."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWN = ("om_core", "om_workers", "om_api", "om_migrations", "om_mcp", "om_integrations")
ALLOWED = {
    "om_mcp": ("om_core.application", "om_core.domain", "om_core.settings", "om_api", "om_mcp"),
    "om_integrations": ("om_api.client",),
}


def own_imports(package: str) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            found.update((path.relative_to(ROOT).as_posix(), m) for m in modules if m.split(".")[0] in OWN)
    return found


def test_each_integration_imports_only_what_its_room_may_use() -> None:
    for package, allowed in ALLOWED.items():
        beyond = {
            (where, module)
            for where, module in own_imports(package)
            if not any(module == a or module.startswith(f"{a}.") for a in allowed)
        }
        assert beyond == set(), package


def test_nothing_of_om_imports_a_framework_adapter() -> None:
    for package in ("om_core", "om_api", "om_workers", "om_mcp"):
        assert not any(m.startswith("om_integrations") for _, m in own_imports(package)), package
