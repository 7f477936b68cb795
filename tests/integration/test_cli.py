"""The `om` command line as a user runs it: a subprocess per command."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from om_core.adapters.models.model_ids import PROVIDERS
from om_core.application.append import append_messages
from om_core.bootstrap import build_inline
from testing.postgres import create_postgres_database, drop_postgres_database, postgres_server
from testing.processes import free_port, om_server

OM = [sys.executable, "-m", "om_api.cli"]
KEY_VARIABLES = {name for provider in PROVIDERS.values() for name in provider.api_key_env}


def user_environment(**extra: str) -> dict[str, str]:
    """The environment of a user who has set nothing of om's: no OM_* variable, no model key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_") and k not in KEY_VARIABLES}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def om(
    *args: str,
    database: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    environment = user_environment(**(env or {}))
    if database is not None:
        environment["OM_DATABASE_URL"] = f"sqlite:///{database}"
    return subprocess.run(
        [*OM, *args], capture_output=True, text=True, env=environment, cwd=cwd, timeout=timeout, check=False
    )


def operator_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one line an operator error prints on stderr (exit status 2, no traceback)."""
    assert result.returncode == 2, f"exit {result.returncode}:\n{result.stderr}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    url = create_postgres_database("om_test_cli")
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture
def migrated_postgres(empty_postgres: str) -> str:
    from om_core.adapters.store.migrations import upgrade_to_head

    upgrade_to_head(empty_postgres)
    return empty_postgres


@pytest.fixture
def keyless_profile(tmp_path: Path) -> Path:
    profile = tmp_path / "profile.yaml"
    profile.write_text("model: om-local/extractive\n")
    return profile


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, float], Path]:
    database = tmp_path_factory.mktemp("demo") / "demo.sqlite3"
    result = om("demo", "--json", "--database", str(database))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), database


def test_demo_meets_the_bar(demo_run: tuple[dict[str, float], Path]) -> None:
    summary, _ = demo_run
    assert summary["turns"] >= 300
    assert summary["elapsed_s"] < 60
    assert summary["facts_retained"] / summary["facts_planted"] >= 0.9
    assert summary["compression_ratio"] >= 5
    assert summary["max_unobserved_tokens"] <= summary["block_after_tokens"]
    for key in ("observer_calls", "reflector_calls", "buffered_chunks", "activations", "generations"):
        assert summary[key] > 0, key


def test_projections_rebuild_verifies_repairs_and_replays(demo_run: tuple[dict[str, float], Path]) -> None:
    _, database = demo_run
    verified = om("projections", "rebuild", "--verify", database=database)
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["streams"] >= 1 and report["mismatched"] == []

    with sqlite3.connect(database) as conn:  # a projection that drifted from its events
        conn.execute("UPDATE om_records SET state = json_set(state, '$.observation_tokens', 1)")
    broken = om("projections", "rebuild", "--verify", database=database)
    assert broken.returncode == 1 and json.loads(broken.stdout)["mismatched"]
    repaired = om("projections", "rebuild", database=database)
    assert repaired.returncode == 0 and json.loads(repaired.stdout)["rebuilt"] >= 1
    assert om("projections", "rebuild", "--verify", database=database).returncode == 0

    replay = om("replay", "demo/thread/demo-7", "--to", "50", database=database)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["version"] == 50


def test_help_does_not_import_litellm() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, om_api.cli; print('litellm' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "False"


@pytest.mark.integration
def test_serve_with_several_processes_answers_turns(tmp_path: Path) -> None:
    """`om serve --workers 2`: each uvicorn process builds its app from the environment, on Postgres and
    Redis; turns go through whichever process answers."""
    import httpx

    from om_core.adapters.store.migrations import upgrade_to_head
    from testing.postgres import create_postgres_database, drop_postgres_database
    from testing.processes import om_server

    url = create_postgres_database("om_test_serve")
    try:
        upgrade_to_head(url)
        profile = tmp_path / "profile.yaml"
        profile.write_text("model: om-local/extractive\n")
        env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OM_BROKER_URL": os.environ.get("OM_TEST_BROKER_URL", "redis://127.0.0.1:6379/0"),
            "OM_API_KEYS": "serve-key=acme",
            "OM_PROFILE": str(profile),
        }
        args = ["serve", "--workers", "2", "--database-url", url]
        with om_server(args, env, tmp_path / "serve.log") as base:
            headers = {"Authorization": "Bearer serve-key"}
            with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
                for i in range(6):
                    message = {"id": f"m{i}", "role": "user", "content": f"turn {i}"}
                    sent = http.post("/v1/threads/t1/messages", json={"messages": [message]})
                    assert sent.status_code == 200, sent.text
                    # a fresh connection may land on the other process: its cached state must not be stale
                    context = httpx.get(f"{base}/v1/threads/t1/context", headers=headers, timeout=30)
                    assert [m["id"] for m in context.json()["messages"]] == [f"m{j}" for j in range(i + 1)]
    finally:
        drop_postgres_database(url)


# ------------------------------------------------------------------------------------------ first runs


def test_embedded_serve_needs_no_key_and_says_so_in_one_line(tmp_path: Path) -> None:
    import httpx

    log = tmp_path / "serve.log"
    env = user_environment(OM_DATABASE_URL=f"sqlite:///{tmp_path / 'om.sqlite3'}", OM_API_KEYS="k=acme")
    with om_server(["serve", "--embedded"], env, log) as base:
        headers = {"Authorization": "Bearer k"}
        message = {"id": "m1", "role": "user", "content": "My sister Priya lives in Lisbon."}
        sent = httpx.post(f"{base}/v1/threads/t1/messages", json={"messages": [message]}, headers=headers)
        assert sent.status_code == 200, sent.text
    output = log.read_text()
    (line,) = [line for line in output.splitlines() if "om-local/extractive" in line]
    assert line == (
        f"om serve: database sqlite:///{tmp_path / 'om.sqlite3'}; broker memory://localhost/ (an in-process "
        "worker); no profile file (OM_PROFILE unset): profile default with the model om-local/extractive; "
        f"auth by 1 OM_API_KEYS key (tenants acme), and keys made with `om keys create`; {base}"
    )
    assert "alembic" not in output and "No hostname was supplied" not in output
    # no line per request unless asked for (OM_ACCESS_LOG)
    assert "POST /v1/threads/t1/messages" not in output


def test_the_access_log_is_written_when_asked_for(tmp_path: Path) -> None:
    import httpx

    log = tmp_path / "serve.log"
    env = user_environment(OM_DATABASE_URL=f"sqlite:///{tmp_path / 'om.sqlite3'}", OM_ACCESS_LOG="true")
    with om_server(["serve", "--embedded"], env, log) as base:
        assert httpx.get(f"{base}/v1/threads/t1/status", timeout=30).status_code == 401
    assert '"GET /v1/threads/t1/status HTTP/1.1" 401' in log.read_text()


@pytest.mark.parametrize("verb", ["serve", "worker"])
def test_production_processes_without_the_default_models_key_refuse_in_one_line(
    verb: str, tmp_path: Path
) -> None:
    line = operator_error(om(verb, cwd=tmp_path))
    assert "google/gemini-2.5-flash" in line and "GEMINI_API_KEY" in line
    assert "OM_PROFILE" in line and "om-local/extractive" in line


@pytest.mark.parametrize("verb", ["serve", "worker"])
@pytest.mark.parametrize(
    ("document", "option"),
    [
        (
            "model: om-local/extractive\nobservation:\n  extract:\n"
            "    - {name: profile, instructions: who the user is, schema: {type: florp}}\n",
            "observation.extract[0].schema",
        ),
        (
            "model: om-local/extractive\nobservation: {manageWorkingMemory: true}\nworkingMemory:\n"
            "  schema: {type: object, properties: {city: {type: string, pattern: '(['}}}\n",
            "workingMemory.schema",
        ),
    ],
    ids=["unknown type", "bad regex"],
)
def test_a_profile_with_a_schema_no_validator_can_apply_is_refused_at_start(
    verb: str, document: str, option: str, tmp_path: Path
) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(document)
    line = operator_error(om(verb, env={"OM_PROFILE": str(profile)}, cwd=tmp_path))
    assert f"{option} = " in line and "is not a valid JSON Schema" in line


def test_a_worker_refuses_a_profile_whose_model_has_no_key(tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text("model: openai/gpt-5-mini\n")
    line = operator_error(om("worker", env={"OM_PROFILE": str(profile)}, cwd=tmp_path))
    assert "OPENAI_API_KEY" in line and "OM_PROFILE" in line


def test_demo_says_it_runs_keyless_and_leaves_no_database_unless_kept(tmp_path: Path) -> None:
    result = om("demo", "--turns", "24", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "om-local/extractive" in result.stderr
    assert not list(tmp_path.rglob("*.sqlite3*"))
    # stdout is not a terminal: the progress panel ends its line before the final context's rule begins
    panel_end = next(line for line in result.stdout.splitlines() if line.startswith("╰"))
    assert panel_end.endswith("╯"), panel_end

    kept = om("demo", "--turns", "24", "--json", "--keep", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    files = list((tmp_path / ".om").glob("demo-*.sqlite3"))
    assert len(files) == 1 and str(files[0].relative_to(tmp_path)) in kept.stderr


def test_keys_create_on_a_new_sqlite_database_migrates_it(tmp_path: Path) -> None:
    result = om("keys", "create", "--tenant", "acme", database=tmp_path / "new.sqlite3")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 1 and result.stderr == ""


def test_each_benchmark_has_its_own_help() -> None:
    result = om("bench", "api", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "--turns" in result.stdout


# ------------------------------------------------------------------------ operator errors: one line, 2


def test_an_unreachable_database(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/om"
    line = operator_error(om("migrate", "--database-url", url))
    assert line.startswith("error: cannot reach the database") and "Connection refused" in line
    assert "check OM_DATABASE_URL" in line


def test_a_missing_database() -> None:
    url = postgres_server().set(database="om_no_such_database").render_as_string(hide_password=False)
    line = operator_error(om("migrate", "--database-url", url))
    assert 'database "om_no_such_database" does not exist' in line
    assert "createdb om_no_such_database" in line


@pytest.mark.parametrize("given", ["option", "environment"])
def test_a_postgres_url_is_told_the_scheme_to_use(given: str) -> None:
    url = "postgres://postgres@127.0.0.1:5432/postgres"
    if given == "option":
        result = om("migrate", "--database-url", url)
    else:
        result = om("migrate", env={"OM_DATABASE_URL": url})
    line = operator_error(result)
    assert "OM_DATABASE_URL=postgres://" in line and "use postgresql+psycopg://" in line


def test_keys_create_before_the_first_migrate(empty_postgres: str) -> None:
    line = operator_error(om("keys", "create", "--tenant", "acme", "--database-url", empty_postgres))
    assert "schema is empty" in line and "run `om migrate`" in line


def test_serve_on_a_database_not_migrated(empty_postgres: str, keyless_profile: Path) -> None:
    env = {"OM_PROFILE": str(keyless_profile), "OM_DATABASE_URL": empty_postgres}
    line = operator_error(om("serve", env=env))
    assert "schema is empty" in line and "run `om migrate`" in line


def test_serve_with_the_broker_unreachable(migrated_postgres: str, keyless_profile: Path) -> None:
    broker = f"redis://127.0.0.1:{free_port()}/0"
    env = {"OM_PROFILE": str(keyless_profile), "OM_DATABASE_URL": migrated_postgres, "OM_BROKER_URL": broker}
    line = operator_error(om("serve", env=env))
    assert line.startswith("error: cannot reach the broker") and "check OM_BROKER_URL" in line


def test_replay_of_a_thread_of_another_tenant(demo_run: tuple[dict[str, float], Path]) -> None:
    _, database = demo_run
    line = operator_error(om("replay", "demo-7", database=database))
    assert "no thread 'demo-7' for tenant 'default'" in line and "--tenant" in line
    assert om("replay", "demo-7", "--tenant", "demo", database=database).returncode == 0


def test_replay_past_the_last_event(demo_run: tuple[dict[str, float], Path]) -> None:
    _, database = demo_run
    line = operator_error(om("replay", "demo-7", "--tenant", "demo", "--to", "999999", database=database))
    assert "has no version 999999" in line and "pass --to" in line


@pytest.mark.parametrize("how", ["--debug", "OM_DEBUG=1"])
def test_the_traceback_is_shown_only_when_asked_for(how: str) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/om"
    if how == "--debug":
        result = om("--debug", "migrate", "--database-url", url)
    else:
        result = om("migrate", "--database-url", url, env={"OM_DEBUG": "1"})
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "OperationalError" in result.stderr


def test_replay_and_simulate_use_the_threads_own_profile(tmp_path: Path) -> None:
    document = {
        "profiles": {
            "default": {"model": "om-local/extractive"},
            "tight": {"model": "om-local/extractive", "observation": {"messageTokens": 700}},
        }
    }
    profile = tmp_path / "profiles.json"
    profile.write_text(json.dumps(document))
    database = tmp_path / "om.sqlite3"
    deps, _ = build_inline(database_url=f"sqlite:///{database}", profile=document)
    for i in range(3):
        message = {"id": f"m{i}", "role": "user", "content": f"message {i}"}
        append_messages(deps, tenant="t", thread_id="x", messages=[message], profile="tight")
    deps.close()
    env = {"OM_PROFILE": str(profile)}
    replay = om("replay", "x", "--tenant", "t", database=database, env=env)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["status"]["windows"]["active"]["messages"]["threshold"] == 700
    options = tmp_path / "options.yaml"
    options.write_text("observation:\n  bufferTokens: false\n")
    simulated = om("simulate", "x", "--config", str(options), "--tenant", "t", database=database, env=env)
    assert simulated.returncode == 0, simulated.stderr


def test_demo_runs_on_the_profile_om_profile_names(tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(
        "model: om-local/extractive\nobservation: {messageTokens: 2000, bufferTokens: false}\n"
        "reflection: {observationTokens: 4000}\n"
    )
    result = om("demo", "--turns", "12", "--json", env={"OM_PROFILE": str(profile)}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"om demo: the default profile of OM_PROFILE={profile} (model om-local/extractive), a scratch SQLite "
        "file (deleted at the end; --keep keeps it); no services"
    ]
    summary = json.loads(result.stdout)
    # without buffering the limit is messageTokens itself, as the profile says (the demo's own is 3,600)
    assert summary["block_after_tokens"] == 2000 and summary["buffered_chunks"] == 0
    # a profile whose model has no key stops the demo as it stops a server
    profile.write_text("model: openai/gpt-5-mini\n")
    line = operator_error(om("demo", "--turns", "2", env={"OM_PROFILE": str(profile)}, cwd=tmp_path))
    assert "OPENAI_API_KEY" in line
