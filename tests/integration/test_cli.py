"""The `om` command line as a user runs it: a subprocess per command."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

OM = [sys.executable, "-m", "om_api.cli"]


def om(*args: str, database: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if database is not None:
        env["OM_DATABASE_URL"] = f"sqlite:///{database}"
    return subprocess.run([*OM, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)


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
    from om_workers.harness import om_server
    from tests.integration.store.conftest import create_postgres_database, drop_postgres_database

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
