"""The deployment files parse, and every command they run is an existing ``om`` verb with those options."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from om_api.cli import app

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = [ROOT / "docker-compose.yml", *sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))]


def _documents(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _om_commands() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    compose = _documents(ROOT / "docker-compose.yml")[0]
    for name, service in compose["services"].items():
        if "command" in service and "build" in service:
            found.append((f"compose:{name}", list(service["command"])))
    for path in MANIFESTS[1:]:
        for doc in _documents(path):
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                if container.get("image", "").startswith("om:"):
                    found.append((f"{path.name}:{container['name']}", list(container["args"])))
    return found


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_parses(path: Path) -> None:
    docs = _documents(path)
    assert docs
    if path.name != "docker-compose.yml":
        assert all({"apiVersion", "kind", "metadata"} <= set(doc) for doc in docs)


def test_compose_has_every_service() -> None:
    services = _documents(ROOT / "docker-compose.yml")[0]["services"]
    assert {"postgres", "redis", "migrate", "api", "worker", "beat", "flower"} <= set(services)


def test_k8s_has_deployments_services_and_worker_autoscaler() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for p in MANIFESTS[1:] for doc in _documents(p)}
    for role in ("om-api", "om-worker", "om-beat", "om-flower"):
        assert ("Deployment", role) in kinds
    assert ("HorizontalPodAutoscaler", "om-worker") in kinds
    assert {("Service", "om-api"), ("Service", "om-flower")} <= kinds


@pytest.mark.parametrize("where,argv", _om_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_command_is_an_om_verb(where: str, argv: list[str]) -> None:
    verb, *args = argv
    verbs = {
        command.name or (command.callback.__name__ if command.callback else "")
        for command in app.registered_commands
    }
    assert verb in verbs, f"{where}: om {verb} is not a CLI verb"
    result = CliRunner().invoke(app, [verb, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for option in (a for a in args if a.startswith("--")):
        assert re.search(rf"{re.escape(option)}\b", result.output), f"{where}: om {verb} has no {option}"
