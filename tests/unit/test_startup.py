"""The start-up checks' own rules (om_core/startup.py, placeholders, masking); the processes that run them
are tested in tests/integration/test_startup.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from om_core.domain.placeholders import is_placeholder
from om_core.settings import ServerSettings, SettingsError, masked_url
from om_core.startup import (
    StartupError,
    auth_summary,
    check_broker,
    check_port_free,
    check_schedule_file,
    prepare_metrics_directory,
    profile_summary,
    refuse_sqlite_with_broker,
    unknown_variables,
)


@pytest.fixture(autouse=True)
def no_om_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("OM_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    "value",
    ["CHANGE-ME", "changeme", "change_me", "REPLACE-ME", "<your key>", "xxxx", "***", "...", "TODO",
     "placeholder", "your-api-key-here", "YOUR_API_KEY", "your password", " CHANGE-ME "],
)  # fmt: skip
def test_placeholders(value: str) -> None:
    assert is_placeholder(value)


@pytest.mark.parametrize(
    "value",
    ["", "sk-proj-4f9aXk2", "AIzaSyD-example-but-real-shape", "om_2Ph1IGHF_4Kae5Qe", "change-me-not-9f2c",
     "dev-key", "hunter2", "x", "xx"],
)  # fmt: skip
def test_real_values_are_not_placeholders(value: str) -> None:
    assert not is_placeholder(value)


def test_passwords_are_masked_in_urls() -> None:
    assert masked_url("postgresql+psycopg://om:s3cret@db:5432/om") == "postgresql+psycopg://om:***@db:5432/om"
    assert masked_url("redis://:pw@redis:6379/0") == "redis://:***@redis:6379/0"
    assert masked_url("postgresql+psycopg://om@db/om") == "postgresql+psycopg://om@db/om"
    assert masked_url("redis://redis:6379/0") == "redis://redis:6379/0"


def test_unknown_variables_name_the_nearest_setting() -> None:
    known = {"OM_DATABASE_URL", "OM_BROKER_URL", "OM_PROFILE"}
    environ = {
        "OM_DATABSE_URL": "x",
        "OM_BROKER_URL": "y",
        "OM_TEST_BROKER_URL": "the suite's",
        "OM_ZZZ": "nothing near",
        "HOME": "/root",
    }
    assert unknown_variables(environ, known) == [
        "OM_DATABSE_URL is not an om setting (did you mean OM_DATABASE_URL?): it is ignored",
        "OM_ZZZ is not an om setting: it is ignored",
    ]


def test_an_empty_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OM_API_KEYS", "")
    monkeypatch.setenv("OM_FLOWER_USER", "")
    monkeypatch.setenv("OM_FLOWER_PASSWORD", "")
    settings = ServerSettings()
    assert settings.api_keys == {} and settings.flower_user is None


@pytest.mark.parametrize(
    "values",
    [{"api_keys": "CHANGE-ME=default"}, {"flower_user": "admin", "flower_password": "CHANGE-ME"}],
)
def test_placeholder_secrets_are_refused(values: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match="placeholder"):
        ServerSettings(**values)


def test_the_auth_summary_names_the_development_key() -> None:
    assert "the development key 'dev-key'" in auth_summary(ServerSettings(api_keys="dev-key=default"))
    assert auth_summary(ServerSettings(api_keys="k=acme")) == (
        "auth by 1 OM_API_KEYS key (tenants acme), and keys made with `om keys create`"
    )
    assert "OM_API_KEYS unset" in auth_summary(ServerSettings())
    assert auth_summary(ServerSettings(auth="disabled")).startswith("auth disabled")


def test_the_profile_summary_lists_the_files_profiles(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("profiles:\n  support: {model: om-local/extractive}\n  default: {}\n")
    assert (
        profile_summary(ServerSettings(profile=profile))
        == f"profile file {profile} (profiles: default, support)"
    )
    assert "Mastra's default model" in profile_summary(ServerSettings())


def test_sqlite_behind_a_network_broker_is_refused_unless_allowed() -> None:
    sqlite = {"database_url": "sqlite:///./om.sqlite3", "broker_url": "redis://r:6379/0"}
    with pytest.raises(StartupError, match="OM_ALLOW_SQLITE_WITH_BROKER=true"):
        refuse_sqlite_with_broker(ServerSettings(**sqlite), "serve")
    refuse_sqlite_with_broker(ServerSettings(**sqlite, allow_sqlite_with_broker=True), "serve")
    refuse_sqlite_with_broker(ServerSettings(database_url="sqlite:///./om.sqlite3"), "serve")
    refuse_sqlite_with_broker(
        ServerSettings(database_url="postgresql+psycopg://h/d", broker_url="redis://r/0"), "w"
    )


def test_a_taken_port_and_an_unknown_host() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            StartupError, match=rf"x cannot listen on 127.0.0.1:{port} \(Address already in use\): fix"
        ):
            check_port_free("127.0.0.1", port, "x", "fix")
    check_port_free("127.0.0.1", port, "x", "fix")
    with pytest.raises(StartupError, match=r"cannot listen on no-such-host\.invalid"):
        check_port_free("no-such-host.invalid", port, "x", "fix")


def test_the_schedule_file_must_be_writable(tmp_path: Path) -> None:
    check_schedule_file(tmp_path / "new" / "dir" / "schedule")
    assert (tmp_path / "new" / "dir").is_dir() and not (tmp_path / "new" / "dir" / "schedule").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StartupError, match="cannot create its schedule file"):
        check_schedule_file(blocker / "schedule")


def test_a_metrics_directory_is_new_or_emptied(tmp_path: Path) -> None:
    own, is_own = prepare_metrics_directory(None)
    assert is_own and own.is_dir() and not list(own.iterdir())
    own.rmdir()
    named = tmp_path / "m"
    named.mkdir()
    (named / "counter_1.db").write_bytes(b"")
    (named / "notes.txt").write_text("kept")
    assert prepare_metrics_directory(named) == (named, False)
    assert [p.name for p in named.iterdir()] == ["notes.txt"]


def test_a_broker_that_does_not_answer_is_waited_for_only_by_the_work_path() -> None:
    import redis

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{sock.getsockname()[1]}/0"
    check_broker(url, unreachable_ok=True)  # a worker: Celery connects once it is up
    with pytest.raises(redis.exceptions.ConnectionError):
        check_broker(url)  # the API: one line, the broker is unreachable
