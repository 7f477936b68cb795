"""Server settings from OM_* variables, and the memory profile file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from om_core.domain.config import ConfigError
from om_core.settings import (
    EMBEDDED_BROKER_URL,
    ProfileError,
    ServerSettings,
    SettingsError,
    load_profile,
    read_profile,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OM_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = ServerSettings()
    assert settings.database_url == "sqlite:///./.om/om.sqlite3"
    assert settings.broker_url == EMBEDDED_BROKER_URL
    assert settings.api_keys == {}
    assert settings.auth == "enabled" and settings.auth_enabled
    assert settings.profile is None
    assert settings.max_message_bytes == 1_000_000
    assert settings.max_request_bytes == 8_000_000
    assert settings.sync_wait_seconds == 10.0
    assert settings.flower_user is None and settings.flower_password is None
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.memory_config().observation.message_tokens == 30_000


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_DATABASE_URL", "postgresql+psycopg://om:pw@db:5432/om")
    monkeypatch.setenv("OM_BROKER_URL", "redis://redis:6379/0")
    monkeypatch.setenv("OM_API_KEYS", "key1=tenantA, key2=tenantB,")
    monkeypatch.setenv("OM_MAX_MESSAGE_BYTES", "2000")
    monkeypatch.setenv("OM_MAX_REQUEST_BYTES", "4000")
    monkeypatch.setenv("OM_SYNC_WAIT_SECONDS", "2.5")
    monkeypatch.setenv("OM_FLOWER_USER", "admin")
    monkeypatch.setenv("OM_FLOWER_PASSWORD", "s3cret")
    monkeypatch.setenv("OM_HOST", "0.0.0.0")
    monkeypatch.setenv("OM_PORT", "9000")
    settings = ServerSettings()
    assert settings.database_url == "postgresql+psycopg://om:pw@db:5432/om"
    assert settings.broker_url == "redis://redis:6379/0"
    assert settings.api_keys == {"key1": "tenantA", "key2": "tenantB"}
    assert (settings.max_message_bytes, settings.max_request_bytes) == (2000, 4000)
    assert settings.sync_wait_seconds == 2.5
    assert settings.flower_user == "admin"
    assert settings.flower_password is not None and settings.flower_password.get_secret_value() == "s3cret"
    assert (settings.host, settings.port) == ("0.0.0.0", 9000)
    assert "s3cret" not in repr(settings) and "key1" not in repr(settings)


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("OM_PORT", "http", "OM_PORT=http"),
        ("OM_PORT", "70000", "OM_PORT=70000"),
        ("OM_MAX_MESSAGE_BYTES", "0", "OM_MAX_MESSAGE_BYTES=0"),
        ("OM_SYNC_WAIT_SECONDS", "-1", "OM_SYNC_WAIT_SECONDS=-1"),
        ("OM_AUTH", "maybe", "OM_AUTH=maybe"),
        ("OM_DATABASE_URL", "mysql://x/y", "OM_DATABASE_URL=mysql://x/y"),
        ("OM_BROKER_URL", "amqp://x", "OM_BROKER_URL=amqp://x"),
        ("OM_API_KEYS", "key1", "OM_API_KEYS="),
        ("OM_API_KEYS", "k=a,k=b", "OM_API_KEYS="),
    ],
)
def test_invalid_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=fragment):
        ServerSettings()


@pytest.mark.parametrize("scheme", ["postgres", "postgresql+psycopg2"])
def test_a_postgres_url_of_another_driver_is_told_the_scheme_to_use(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    monkeypatch.setenv("OM_DATABASE_URL", f"{scheme}://om@db:5432/om")
    with pytest.raises(SettingsError) as caught:
        ServerSettings()
    assert "use postgresql+psycopg://" in str(caught.value)


def test_postgresql_urls_run_on_psycopg_3() -> None:
    # SQLAlchemy's own default driver for postgresql:// is psycopg2, which om does not install
    url = ServerSettings(database_url="postgresql://om@db:5432/om").database_url
    assert url == "postgresql+psycopg://om@db:5432/om"


def test_an_unparsable_database_url_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_DATABASE_URL", "postgresql+psycopg://om@db:port/om")
    with pytest.raises(SettingsError, match="OM_DATABASE_URL=postgresql"):
        ServerSettings()


def test_a_default_profile_applies_only_without_om_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyless = ServerSettings().with_default_profile({"model": "om-local/extractive"})
    assert keyless.profile_layer == {"model": "om-local/extractive"}
    copied = keyless.model_copy(update={"broker_url": EMBEDDED_BROKER_URL})
    assert copied.memory_config().model == "om-local/extractive"
    profile = tmp_path / "profile.yaml"
    profile.write_text("observation:\n  messageTokens: 5000\n")
    monkeypatch.setenv("OM_PROFILE", str(profile))
    named = ServerSettings().with_default_profile({"model": "om-local/extractive"})
    assert named.profile_layer == {"observation": {"messageTokens": 5000}}


def test_secrets_are_not_echoed_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_API_KEYS", "supersecretkey")
    monkeypatch.setenv("OM_DATABASE_URL", "postgres://om:hunter2@db/om")
    with pytest.raises(SettingsError) as caught:
        ServerSettings()
    message = str(caught.value)
    assert "OM_API_KEYS=<hidden>" in message
    assert "supersecretkey" not in message and "hunter2" not in message
    assert "OM_DATABASE_URL=postgres://om:***@db/om" in message


def test_auth_can_be_disabled_only_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_AUTH", "disabled")
    assert ServerSettings().auth_enabled is False
    assert ServerSettings(host="::1").auth == "disabled"
    assert ServerSettings(host="localhost").auth == "disabled"
    monkeypatch.setenv("OM_HOST", "0.0.0.0")
    with pytest.raises(SettingsError, match=r"OM_AUTH=disabled .* loopback"):
        ServerSettings()


def test_request_limit_must_hold_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_MAX_MESSAGE_BYTES", "5000")
    monkeypatch.setenv("OM_MAX_REQUEST_BYTES", "4000")
    with pytest.raises(SettingsError, match="OM_MAX_REQUEST_BYTES"):
        ServerSettings()


def test_flower_credentials_come_in_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_FLOWER_USER", "admin")
    with pytest.raises(SettingsError, match="OM_FLOWER_USER and OM_FLOWER_PASSWORD"):
        ServerSettings()


# ------------------------------------------------------------------------------------------ profile


def test_yaml_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = tmp_path / "memory.yaml"
    profile.write_text("observation:\n  message_tokens: 12000\n  bufferTokens: 0.25\nscope: thread\n")
    assert load_profile(profile).observation.message_tokens == 12_000
    monkeypatch.setenv("OM_PROFILE", str(profile))
    settings = ServerSettings()
    assert settings.profile == profile
    config = settings.memory_config()
    assert (config.observation.message_tokens, config.observation.buffer_tokens) == (12_000, 0.25)


def test_json_profile(tmp_path: Path) -> None:
    profile = tmp_path / "memory.json"
    profile.write_text(
        json.dumps({"reflection": {"observationTokens": 60_000}, "model": "om-local/extractive"})
    )
    config = load_profile(profile)
    assert config.reflection.observation_tokens == 60_000 and config.model == "om-local/extractive"
    assert read_profile(profile) == {
        "reflection": {"observationTokens": 60_000},
        "model": "om-local/extractive",
    }


def test_empty_profile_gives_defaults(tmp_path: Path) -> None:
    profile = tmp_path / "empty.yml"
    profile.write_text("")
    assert load_profile(profile) == ServerSettings().memory_config()


def test_thread_overrides_layer_over_the_profile(tmp_path: Path) -> None:
    profile = tmp_path / "memory.yaml"
    profile.write_text("model: om-local/extractive\nobservation:\n  messageTokens: 12000\n")
    settings = ServerSettings(profile=profile)
    config = settings.memory_config({"observation": {"buffer_tokens": False}}, None)
    assert config.model == "om-local/extractive"
    assert (config.observation.message_tokens, config.observation.buffer_tokens) == (12_000, False)
    with pytest.raises(ConfigError) as caught:
        settings.memory_config({"observation": {"messageTokens": -1}})
    assert caught.value.option == "observation.messageTokens"


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("bad.yaml", "observation: [unclosed", "is not valid YAML"),
        ("bad.json", "{not json", "is not valid JSON"),
        ("list.yaml", "- a\n- b\n", "must hold an object"),
        ("invalid.yaml", "observation:\n  messageTokens: 0\n", "observation.messageTokens = 0"),
    ],
)
def test_profile_errors_name_the_file(tmp_path: Path, name: str, content: str, fragment: str) -> None:
    profile = tmp_path / name
    profile.write_text(content)
    with pytest.raises(ProfileError) as caught:
        load_profile(profile)
    assert str(profile) in str(caught.value) and fragment in str(caught.value)
    assert caught.value.path == profile


def test_profile_config_errors_keep_the_problems(tmp_path: Path) -> None:
    profile = tmp_path / "invalid.yaml"
    profile.write_text("scope: everywhere\n")
    with pytest.raises(ProfileError) as caught:
        load_profile(profile)
    assert caught.value.config_error is not None and caught.value.config_error.option == "scope"


def test_missing_profile_fails_at_start_up_naming_variable_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ProfileError, match="cannot be read"):
        load_profile(missing)
    monkeypatch.setenv("OM_PROFILE", str(missing))
    with pytest.raises(SettingsError) as caught:
        ServerSettings()
    assert "OM_PROFILE" in str(caught.value) and str(missing) in str(caught.value)
