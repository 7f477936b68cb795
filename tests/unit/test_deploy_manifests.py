"""The deployment files parse, every command they run is an existing ``om`` verb with those options, and
every om process is given a memory profile (OM_PROFILE and the file mounted where it points)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from om_api.cli import app
from om_core.domain.config import parse_memory_config
from om_core.settings import read_profile

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


PROFILE = "/etc/om/profile.yaml"


def test_compose_mounts_a_profile_and_names_it() -> None:
    services = _documents(ROOT / "docker-compose.yml")[0]["services"]
    om_services = {name: service for name, service in services.items() if "build" in service}
    assert om_services
    for name, service in om_services.items():
        assert service["environment"]["OM_PROFILE"] == PROFILE, name
        mounts = [volume.rsplit(":", 2) for volume in service.get("volumes", [])]
        sources = [source for source, target, _ in mounts if target == PROFILE]
        assert sources, f"compose:{name} mounts nothing at {PROFILE}"
        # ${OM_PROFILE_FILE:-./examples/profile.yaml}: the example unless the user names their own
        default = re.fullmatch(r"\$\{OM_PROFILE_FILE:-(.+)\}", sources[0])
        assert default and (ROOT / default[1]).is_file(), sources[0]


def test_k8s_mounts_the_profile_config_map_and_names_it(tmp_path: Path) -> None:
    docs = [doc for path in MANIFESTS[1:] for doc in _documents(path)]
    config_maps = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "ConfigMap"}
    assert config_maps["om-config"]["data"]["OM_PROFILE"] == PROFILE
    profile = tmp_path / "profile.yaml"
    profile.write_text(config_maps["om-profile"]["data"]["profile.yaml"])
    parse_memory_config(read_profile(profile))
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            if not container.get("image", "").startswith("om:"):
                continue
            where = f"{doc['metadata']['name']}:{container['name']}"
            assert {"configMapRef": {"name": "om-config"}} in container["envFrom"], where
            mounted = [
                m
                for m in container.get("volumeMounts", [])
                if PROFILE.startswith(m["mountPath"].rstrip("/") + "/")
            ]
            assert mounted, f"{where} mounts nothing at {PROFILE}"
            assert volumes[mounted[0]["name"]]["configMap"]["name"] == "om-profile", where
