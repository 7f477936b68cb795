"""The deployment files parse, every command they run is an existing ``om`` verb with those options, and
every om process is given a memory profile (OM_PROFILE and the file mounted where it points)."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from om_api.cli import app
from om_core.application.ports import ModelConfigurationError
from om_core.bootstrap import check_profile_models
from om_core.settings import ServerSettings, SettingsError, read_profile

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


EXAMPLES = sorted((ROOT / "deploy" / "k8s" / "examples").glob("*.yaml"))
OPERATIONS = ROOT / "docs" / "operations.md"


@dataclass
class DocSteps:
    """What the Kubernetes steps of docs/operations.md create, in order: (kind, name) -> keys, and the
    sources of configmap files."""

    created: dict[tuple[str, str], set[str]]
    files: dict[str, Path]
    commands: list[list[str]]


def _doc_steps() -> DocSteps:
    text = OPERATIONS.read_text()
    section = text[text.index("### Kubernetes") :]
    block = section[section.index("```sh") + len("```sh") : section.index("```", section.index("```sh") + 5)]
    commands = [
        shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines() if line.strip()
    ]
    created: dict[tuple[str, str], set[str]] = {}
    files: dict[str, Path] = {}
    for words in commands:
        if words[:3] == ["kubectl", "create", "secret"]:
            name = words[4]
            keys = {w.split("=", 1)[1].split("=", 1)[0] for w in words if w.startswith("--from-literal=")}
            created[("Secret", name)] = keys
        elif words[:3] == ["kubectl", "create", "configmap"]:
            name = words[3]
            keys = set()
            for word in words:
                if word.startswith("--from-file="):
                    key, _, source = word.removeprefix("--from-file=").partition("=")
                    keys.add(key)
                    files[key] = ROOT / source
            created[("ConfigMap", name)] = keys
    return DocSteps(created, files, commands)


def _applied() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS[1:] for doc in _documents(path)]


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for doc in _applied()
        if doc.get("spec", {}).get("template", {}).get("spec")
    ]


def test_the_applied_folder_holds_no_secret_and_no_profile() -> None:
    for doc in _applied():
        assert doc["kind"] != "Secret", f"{doc['metadata']['name']}: secrets are created by the docs' steps"
        if doc["kind"] == "ConfigMap":
            assert doc["metadata"]["name"] != "om-profile", "the profile is created by the docs' steps"
            assert not any(key.endswith((".yaml", ".json")) for key in doc.get("data", {}))


def test_the_docs_steps_create_the_objects_then_apply_the_folder() -> None:
    steps = _doc_steps()
    assert set(steps.created) == {("Secret", "om-secrets"), ("ConfigMap", "om-profile")}
    assert steps.commands[-1] == ["kubectl", "apply", "-f", "deploy/k8s/"]
    assert all(words[:2] == ["kubectl", "create"] for words in steps.commands[:-1])
    # the profile the docs create the ConfigMap from is in the repository, and needs no key
    for source in steps.files.values():
        assert source.is_file(), source
        check_profile_models(read_profile(source))


def test_every_reference_of_the_manifests_is_defined() -> None:
    """Every ConfigMap and Secret a pod reads (envFrom, env, volumes) is in the applied folder or created
    by the docs' steps, with the keys it reads; every mount names a volume of its pod."""
    steps = _doc_steps()
    defined = dict(steps.created)
    for doc in _applied():
        if doc["kind"] in ("ConfigMap", "Secret"):
            defined[(doc["kind"], doc["metadata"]["name"])] = set(doc.get("data", {}))
    for name, spec in _pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for volume in volumes.values():
            if "configMap" in volume:
                keys = defined.get(("ConfigMap", volume["configMap"]["name"]))
                assert keys is not None, f"{name}: volume {volume['name']} names an undefined ConfigMap"
                assert {item["key"] for item in volume["configMap"].get("items", [])} <= keys
            if "secret" in volume:
                assert ("Secret", volume["secret"]["secretName"]) in defined, name
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            where = f"{name}:{container['name']}"
            for source in container.get("envFrom", []):
                kind, ref = (
                    ("ConfigMap", "configMapRef") if "configMapRef" in source else ("Secret", "secretRef")
                )
                assert (kind, source[ref]["name"]) in defined, f"{where}: {kind} {source[ref]['name']}"
            for variable in container.get("env", []):
                for kind, ref in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                    found = variable.get("valueFrom", {}).get(ref)
                    if found:
                        assert found["key"] in defined.get((kind, found["name"]), set()), where
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{where}: mounts an undefined volume {mount['name']}"


def test_every_om_container_gets_its_settings_and_its_profile() -> None:
    """The database, broker and profile every om process needs come from om-config and om-secrets, and
    the file OM_PROFILE names is the om-profile key mounted there."""
    steps = _doc_steps()
    config = next(doc for doc in _applied() if doc["metadata"]["name"] == "om-config")["data"]
    secret = steps.created[("Secret", "om-secrets")]
    assert {"OM_DATABASE_URL", "OM_API_KEYS"} <= secret and {"OM_BROKER_URL", "OM_PROFILE"} <= set(config)
    assert not set(config) & secret, "a variable set in both the ConfigMap and the Secret"
    directory, _, file = config["OM_PROFILE"].rpartition("/")
    assert file in steps.created[("ConfigMap", "om-profile")]
    for name, spec in _pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            if not container.get("image", "").startswith("om:"):
                continue
            where = f"{name}:{container['name']}"
            sources = [
                s.get("configMapRef", s.get("secretRef", {})).get("name") for s in container["envFrom"]
            ]
            assert sources == ["om-config", "om-secrets"], where
            mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"].rstrip("/") == directory]
            assert mounts, f"{where} mounts nothing at {directory}"
            assert volumes[mounts[0]["name"]]["configMap"]["name"] == "om-profile", where


def test_the_examples_are_the_docs_objects_and_their_placeholders_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps = _doc_steps()
    examples = {(doc["kind"], doc["metadata"]["name"]): doc for path in EXAMPLES for doc in _documents(path)}
    assert set(examples) == set(steps.created)
    secret = examples[("Secret", "om-secrets")]["stringData"]
    assert steps.created[("Secret", "om-secrets")] <= set(secret)
    profile = examples[("ConfigMap", "om-profile")]["data"]
    assert set(profile) == steps.created[("ConfigMap", "om-profile")]
    for name in [n for n in os.environ if n.startswith("OM_")]:
        monkeypatch.delenv(name)
    # applied unchanged, the example secret stops every process at start, naming what to replace
    with pytest.raises(SettingsError, match="placeholder"):
        ServerSettings(api_keys=secret["OM_API_KEYS"])
    with pytest.raises(SettingsError, match="placeholder"):
        ServerSettings(flower_user=secret["OM_FLOWER_USER"], flower_password=secret["OM_FLOWER_PASSWORD"])
    monkeypatch.setenv("GEMINI_API_KEY", secret["GEMINI_API_KEY"])
    with pytest.raises(ModelConfigurationError, match="GEMINI_API_KEY holds a placeholder"):
        check_profile_models({"model": "default"})
