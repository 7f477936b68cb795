"""docker-compose.yml as ``docker compose up`` reads it on a machine where nothing is set: every service
resolves, and the om processes start without any key (Docker is not on these machines: ``testing.compose``
interpolates the file as Compose does)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from om_core.adapters.models.model_ids import PROVIDERS
from om_core.bootstrap import check_profile_models
from om_core.settings import DEV_API_KEY, ServerSettings
from om_core.startup import auth_summary, refuse_sqlite_with_broker
from testing.compose import ComposeError, interpolate, render

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
OM_SERVICES = ("migrate", "api", "worker", "beat", "flower")
KEY_VARIABLES = {name for provider in PROVIDERS.values() for name in provider.api_key_env}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("$SET", "value"),
        ("${SET}", "value"),
        ("${UNSET:-default}", "default"),
        ("${EMPTY:-default}", "default"),
        ("${EMPTY-default}", ""),
        ("${UNSET-default}", "default"),
        ("${SET:+alt}", "alt"),
        ("${EMPTY:+alt}", ""),
        ("${EMPTY+alt}", "alt"),
        ("${UNSET+alt}", ""),
        ("${UNSET:-${FALLBACK:-x}}", "fallback"),
        ("${UNSET:-${ALSO_UNSET:-x}}", "x"),
        ("$$SET", "$SET"),
        ("$${SET}", "${SET}"),
        ("cost: 5$", "cost: 5$"),
        ("a-$SET-b", "a-value-b"),
        ("${SET}:8080:8080", "value:8080:8080"),
    ],
)
def test_interpolation_follows_the_compose_specification(text: str, expected: str) -> None:
    variables = {"SET": "value", "EMPTY": "", "FALLBACK": "fallback"}
    assert interpolate(text, variables, []) == expected


@pytest.mark.parametrize("text", ["${EMPTY:?needed}", "${UNSET?needed}", "${UNSET:?needed}"])
def test_a_required_variable_refuses_the_file(text: str) -> None:
    with pytest.raises(ComposeError, match="needed"):
        interpolate(text, {"EMPTY": ""}, [])


def test_an_unset_variable_without_default_is_empty_and_warned_of() -> None:
    unset: list[str] = []
    assert interpolate("x${NOPE}y$NOPE2", {}, unset) == "xy"
    assert unset == ["NOPE", "NOPE2"]


@pytest.mark.parametrize("text", ["${}", "${1A}", "${A/b/c}", "${A"])
def test_an_invalid_expression_is_refused(text: str) -> None:
    with pytest.raises(ComposeError, match="invalid interpolation format"):
        interpolate(text, {}, [])


def test_a_required_variable_in_the_shared_anchor_refuses_every_service(tmp_path: Path) -> None:
    """What the compose file once did: `${OM_FLOWER_PASSWORD:?}` in the anchor every service merges."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        "x-om: &om\n  environment: {OM_FLOWER_PASSWORD: '${OM_FLOWER_PASSWORD:?set OM_FLOWER_PASSWORD}'}\n"
        "services:\n  api: {<<: *om}\n"
    )
    with pytest.raises(ComposeError, match="set OM_FLOWER_PASSWORD"):
        render(broken, {})


def test_every_service_resolves_with_an_empty_environment() -> None:
    rendered = render(COMPOSE, {})
    assert rendered.unset == [], "variables used with no default"
    assert not (COMPOSE.parent / ".env").exists(), "a .env beside the compose file sets variables"
    services = rendered.model["services"]
    assert {"postgres", "redis", *OM_SERVICES} <= set(services)
    for name in OM_SERVICES:
        assert services[name]["image"] == "om:latest" and services[name]["command"], name


def _settings_of(service: str, monkeypatch: pytest.MonkeyPatch) -> ServerSettings:
    """The settings the service's container builds: its rendered environment, no key of any provider, and
    the profile file mounted where OM_PROFILE points."""
    rendered = render(COMPOSE, {})
    env = rendered.environment(service)
    for name in [*KEY_VARIABLES, *(n for n in os.environ if n.startswith("OM_"))]:
        monkeypatch.delenv(name, raising=False)
    mounts = [volume.split(":") for volume in rendered.service(service).get("volumes", [])]
    sources = {target: source for source, target, *_ in mounts}
    profile = (COMPOSE.parent / sources[env["OM_PROFILE"]]).resolve()
    assert profile.is_file(), f"{service} mounts {profile}, which is not in the repository"
    for name, value in {**env, "OM_PROFILE": str(profile)}.items():
        monkeypatch.setenv(name, value)
    return ServerSettings()


@pytest.mark.parametrize("service", OM_SERVICES)
def test_the_om_services_need_no_key(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings_of(service, monkeypatch)
    # what om serve, om worker and om beat check at start: every model of the profile has its key
    check_profile_models(settings.profile_document)
    refuse_sqlite_with_broker(settings, service)
    assert settings.database_url.startswith("postgresql+psycopg://")
    assert settings.broker_url.startswith("redis://")


def test_the_api_has_the_development_key_on_loopback_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings_of("api", monkeypatch)
    assert settings.api_keys == {DEV_API_KEY: "default"}
    assert f"the development key {DEV_API_KEY!r}" in auth_summary(settings)
    ports = render(COMPOSE, {}).service("api")["ports"]
    assert ports == ["127.0.0.1:8080:8080"]
    # and the key and the interface an operator sets
    chosen = render(COMPOSE, {"OM_API_KEYS": "k1=acme", "OM_API_BIND": "0.0.0.0"})
    assert chosen.environment("api")["OM_API_KEYS"] == "k1=acme"
    assert chosen.service("api")["ports"] == ["0.0.0.0:8080:8080"]


def test_flower_starts_with_a_generated_password_unless_one_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    flower = render(COMPOSE, {}).service("flower")
    assert "--generate-password" in flower["command"]
    assert flower["ports"] == ["127.0.0.1:5555:5555"]
    settings = _settings_of("flower", monkeypatch)
    assert settings.flower_user is None and settings.flower_password is None
    # only flower is given the Flower login
    for name in ("migrate", "api", "worker", "beat"):
        assert not {"OM_FLOWER_USER", "OM_FLOWER_PASSWORD"} & set(render(COMPOSE, {}).environment(name))
