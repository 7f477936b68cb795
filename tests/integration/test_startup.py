"""What each process says and refuses at start, as an operator meets it: the start-up line, a misspelt
variable, SQLite with a network broker, and one line (exit status 2) for each operator error that used to
be a traceback. Every command is a subprocess, as a user runs it."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from om_core.adapters.store.migrations import upgrade_to_head
from testing.postgres import scratch_postgres
from testing.processes import CeleryProcess, free_port, om_server, om_worker_process, wait_for

from .test_cli import om, operator_error, user_environment

pytestmark = pytest.mark.integration

BROKER = os.environ.get("OM_TEST_BROKER_URL", "redis://127.0.0.1:6379/0")
PROFILES = {
    "profiles": {"default": {"model": "om-local/extractive"}, "support": {"model": "om-local/extractive"}}
}


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A migrated scratch database, its URL with a password (trust authentication ignores it), so that
    the start-up lines can be seen to mask it."""
    with scratch_postgres(prefix="om_test_startup", migrate=False) as url:
        upgrade_to_head(url)
        yield make_url(url).set(password="s3cret-pw").render_as_string(hide_password=False)


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps(PROFILES))
    return path


@pytest.fixture
def listener() -> Iterator[int]:
    """A port something listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


# ----------------------------------------------------------------------------------- a misspelt variable


def test_a_misspelt_database_variable_is_named_and_its_sqlite_fallback_refused(
    tmp_path: Path, postgres: str, profile: Path
) -> None:
    """The trap: OM_DATABSE_URL left om on ./.om/om.sqlite3 while its work went to workers on Postgres."""
    env = {"OM_DATABSE_URL": postgres, "OM_BROKER_URL": BROKER, "OM_PROFILE": str(profile)}
    for verb in ("serve", "worker"):
        result = om(verb, env=env, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        warning, error = result.stderr.splitlines()
        assert warning == (
            "warning: OM_DATABSE_URL is not an om setting (did you mean OM_DATABASE_URL?): it is ignored"
        )
        assert error.startswith(f"error: om {verb} would keep its data in the SQLite file sqlite:///")
        assert "set OM_DATABASE_URL" in error and "OM_ALLOW_SQLITE_WITH_BROKER=true" in error
    assert not (tmp_path / ".om").exists(), "the refusal came after the SQLite file was made"
    # any verb reports it, e.g. a migration that would otherwise migrate the wrong database
    migrated = om("migrate", env={**env, "OM_DATABASE_URL": f"sqlite:///{tmp_path / 'x.sqlite3'}"})
    assert migrated.returncode == 0 and "did you mean OM_DATABASE_URL?" in migrated.stderr


def test_sqlite_with_a_broker_runs_when_the_operator_says_so(tmp_path: Path, profile: Path) -> None:
    env = user_environment(
        OM_DATABASE_URL=f"sqlite:///{tmp_path / 'om.sqlite3'}",
        OM_BROKER_URL=BROKER,
        OM_PROFILE=str(profile),
        OM_ALLOW_SQLITE_WITH_BROKER="true",
    )
    with om_server(["serve"], env, tmp_path / "serve.log") as base:
        assert httpx.get(f"{base}/readyz", timeout=10).json()["checks"]["broker"] == "ok"
    first = (tmp_path / "serve.log").read_text().splitlines()[0]
    assert first.startswith(f"om serve: database sqlite:///{tmp_path / 'om.sqlite3'}; broker {BROKER};")


def test_a_worker_on_the_in_memory_broker_is_refused(tmp_path: Path, profile: Path) -> None:
    for verb in ("worker", "flower"):
        args = [verb, "--generate-password"] if verb == "flower" else [verb]
        line = operator_error(om(*args, env={"OM_PROFILE": str(profile)}, cwd=tmp_path))
        assert f"om {verb} needs the broker the API publishes to" in line and "OM_BROKER_URL" in line


# ------------------------------------------------------------------------------------ start-up lines


# ------------------------------------------------------------------------ operator errors: one line, 2


def test_serve_on_a_busy_port_says_so_before_starting_anything(tmp_path: Path, listener: int) -> None:
    database = tmp_path / "om.sqlite3"
    result = om("serve", "--embedded", "--port", str(listener), database=database)
    line = operator_error(result)
    assert line == (
        f"error: om serve cannot listen on 127.0.0.1:{listener} (Address already in use): choose another "
        "with --port (OM_PORT), or stop what listens there"
    )
    # found before the database was opened or the embedded worker started
    assert not database.exists()


def test_flower_on_a_busy_port(listener: int) -> None:
    line = operator_error(
        om("flower", "--port", str(listener), "--generate-password", env={"OM_BROKER_URL": BROKER})
    )
    assert f"om flower cannot listen on 127.0.0.1:{listener} (Address already in use)" in line
    assert "choose another with --port" in line


def test_a_worker_metrics_port_that_is_busy(postgres: str, profile: Path, listener: int) -> None:
    env = {"OM_DATABASE_URL": postgres, "OM_BROKER_URL": BROKER, "OM_PROFILE": str(profile)}
    line = operator_error(om("worker", "--metrics-port", str(listener), env=env))
    assert (
        f"the worker's metrics server cannot listen on 127.0.0.1:{listener} (Address already in use)" in line
    )
    assert "--metrics-port (OM_WORKER_METRICS_PORT)" in line


@pytest.mark.parametrize("verb", ["serve", "worker", "beat"])
def test_a_broker_database_out_of_range(verb: str, postgres: str, profile: Path, tmp_path: Path) -> None:
    broker = BROKER.rsplit("/", 1)[0] + "/99"
    env = {"OM_DATABASE_URL": postgres, "OM_BROKER_URL": broker, "OM_PROFILE": str(profile)}
    args = [verb, "--schedule", str(tmp_path / "schedule")] if verb == "beat" else [verb]
    line = operator_error(om(*args, env=env))
    assert f"the broker {broker} has no database 99 (DB index is out of range)" in line
    assert "OM_BROKER_URL" in line


def test_beat_where_its_schedule_file_cannot_be_made(postgres: str, profile: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {"OM_DATABASE_URL": postgres, "OM_BROKER_URL": BROKER, "OM_PROFILE": str(profile)}
    line = operator_error(om("beat", "--schedule", str(blocker / "celerybeat-schedule"), env=env))
    assert line.startswith(
        f"error: om beat cannot create its schedule file {blocker / 'celerybeat-schedule'}"
    )
    assert "pass --schedule" in line


def test_a_placeholder_key_is_refused_like_a_missing_one(tmp_path: Path) -> None:
    """What applying a manifest full of CHANGE-ME used to start with: every model call failing later."""
    line = operator_error(om("worker", env={"GEMINI_API_KEY": "CHANGE-ME"}, cwd=tmp_path))
    assert "model 'google/gemini-2.5-flash' needs GEMINI_API_KEY" in line
    assert "GEMINI_API_KEY holds a placeholder" in line
    line = operator_error(om("serve", env={"OM_API_KEYS": "CHANGE-ME=default"}, cwd=tmp_path))
    assert "OM_API_KEYS=<hidden>" in line and "placeholder" in line


def test_invalid_worker_settings_are_one_line(tmp_path: Path) -> None:
    line = operator_error(om("worker", env={"OM_WORKER_TIME_LIMIT": "5", "OM_WORKER_SOFT_TIME_LIMIT": "9"}))
    assert line == "error: invalid settings: OM_WORKER_SOFT_TIME_LIMIT must be below OM_WORKER_TIME_LIMIT"


# ------------------------------------------------------------------------------------ worker metrics


def _metrics_worker(name: str, env: dict[str, str], tmp_path: Path, port: int) -> CeleryProcess:
    """``om worker --metrics-port PORT`` as deployed, started."""
    argv = [*om_worker_process(name, env, tmp_path).argv, "--metrics-port", str(port)]
    return CeleryProcess(name, argv, env, tmp_path / f"{name}.log").start()


def _metrics(url: str) -> str:
    try:
        return httpx.get(url, timeout=5).text
    except httpx.TransportError:
        return ""


def test_the_server_and_a_prefork_worker_say_what_they_run_on_and_its_metrics_need_nothing_set(
    tmp_path: Path, postgres: str, profile: Path
) -> None:
    """Each process's first line names its database (password masked), broker, profile file and profiles,
    and the API's auth with the development key named. `om worker --metrics-port` with the prefork pool and
    no PROMETHEUS_MULTIPROC_DIR carries the series its children count, from a directory of its own that is
    gone once it stops."""
    env = user_environment(
        OM_DATABASE_URL=postgres,
        OM_BROKER_URL=BROKER,
        OM_PROFILE=str(profile),
        OM_API_KEYS="dev-key=default,other=acme",
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    port = free_port()
    worker = _metrics_worker("metrics", env, tmp_path, port)
    masked = postgres.replace("s3cret-pw", "***")
    try:
        first = worker.log().splitlines()[0]
        assert first.startswith(f"om worker: database {masked}; broker {BROKER}; profile file {profile} ")
        assert "(profiles: default, support); queues om.sync,om.buffer,om.maintenance,om.webhooks" in first
        assert f"2 prefork processes; metrics on http://127.0.0.1:{port}/metrics" in first
        directory = Path(first.rsplit("added up from ", 1)[1].rstrip(")"))
        assert directory.is_dir()
        with om_server(["serve"], env, tmp_path / "serve.log") as base:
            headers = {"Authorization": "Bearer other"}
            message = {"id": "m1", "role": "user", "content": "My sister Priya lives in Lisbon."}
            sent = httpx.post(f"{base}/v1/threads/t/messages", json={"messages": [message]}, headers=headers)
            assert sent.status_code == 200, sent.text
            # a synchronous observation, run by the worker (the server waits for it)
            observed = httpx.post(
                f"{base}/v1/threads/t/observe", json={"wait": True}, headers=headers, timeout=60
            )
            assert observed.json()["outcome"] == "completed", observed.text
        line = (tmp_path / "serve.log").read_text().splitlines()[0]
        assert line.startswith(f"om serve: database {masked}; broker {BROKER}; profile file {profile} ")
        assert "(profiles: default, support)" in line and "s3cret-pw" not in line + first
        assert "auth by 2 OM_API_KEYS keys (tenants acme, default)" in line
        assert "the development key 'dev-key' of docker-compose.yml" in line
        url = f"http://127.0.0.1:{port}/metrics"
        completed = 'om_tasks_total{outcome="completed",task="om.observe_sync"}'
        text = wait_for(
            lambda: next((t for t in [_metrics(url)] if completed in t), None),
            60,
            0.2,
            what="the worker's task series",
        )
        usage = 'model="om-local/extractive",operation="observation",outcome="completed",tenant="acme"'
        assert f"om_usage_cycles_total{{{usage}}} 1.0" in text
        assert 'om_usage_tokens_total{direction="input"' in text
    finally:
        worker.shutdown()
    assert not directory.exists(), "the worker left its metrics directory behind"


def test_a_named_metrics_directory_is_emptied_at_start_and_the_address_is_a_setting(
    tmp_path: Path, postgres: str, profile: Path
) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    stale = directory / "counter_4242.db"
    stale.write_bytes(b"a dead process's counters")
    keep = directory / "README"
    keep.write_text("not a metrics file")
    env = user_environment(
        OM_DATABASE_URL=postgres,
        OM_BROKER_URL=BROKER,
        OM_PROFILE=str(profile),
        OM_WORKER_METRICS_DIR=str(directory),
        OM_WORKER_METRICS_ADDRESS="127.0.0.2",
    )
    port = free_port()
    worker = _metrics_worker("named", env, tmp_path, port)
    try:
        assert not stale.exists() and keep.exists()
        metrics = wait_for(lambda: _metrics(f"http://127.0.0.2:{port}/metrics"), 30, what="metrics")
        assert "# TYPE om_append_seconds histogram" in metrics
        assert _metrics(f"http://127.0.0.1:{port}/metrics") == ""
    finally:
        worker.shutdown()
    assert directory.is_dir(), "a directory the operator named is theirs: it stays"
