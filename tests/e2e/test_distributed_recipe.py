"""The recipe of docs/operations.md ("One machine without Docker") run as written: ``scripts/distributed.sh
up`` brings Redis, migrate, serve, worker, beat and Flower up on a scratch database and free ports, the
whole set works together, and ``down`` stops every process it started."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from om_api.client import OMClient
from testing.postgres import scratch_postgres
from testing.processes import free_port, wait_for

from ..integration.test_cli import om, user_environment

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "distributed.sh"
PROCESSES = ("redis", "api", "worker", "beat", "flower")


def test_the_docs_recipe_is_the_script() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("### One machine without Docker") : text.index("### Kubernetes")]
    block = section[section.index("```sh") : section.index("```", section.index("```sh") + 5)]
    commands = [line.split("#")[0].strip() for line in block.splitlines()[1:] if line.strip()]
    assert commands == [
        "createdb -h 127.0.0.1 -U postgres om",
        "scripts/distributed.sh up",
        "scripts/distributed.sh status",
        "scripts/distributed.sh down",
    ]


@pytest.fixture
def recipe(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    with scratch_postgres(prefix="om_test_recipe", migrate=False) as url:
        run_dir = tmp_path / "run"
        # om on PATH, as the docs say (the checkout's virtualenv, as `source .venv/bin/activate` gives)
        bin_dir = str(Path(sys.executable).parent)
        env = user_environment(
            PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            OM_DATABASE_URL=url,
            RUN_DIR=str(run_dir),
            REDIS_PORT=str(free_port()),
            OM_PORT=str(free_port()),
            OM_WORKER_METRICS_PORT=str(free_port()),
            FLOWER_PORT=str(free_port()),
        )
        try:
            yield env, run_dir
        finally:
            subprocess.run(
                ["bash", str(SCRIPT), "down"], env=env, capture_output=True, timeout=120, check=False
            )


def _pids(run_dir: Path) -> dict[str, int]:
    return {
        name: int((run_dir / f"{name}.pid").read_text())
        for name in PROCESSES
        if (run_dir / f"{name}.pid").exists()
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_recipe_brings_the_distributed_set_up_up_and_down(recipe: tuple[dict[str, str], Path]) -> None:
    env, run_dir = recipe
    started = subprocess.run(
        ["bash", str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert started.returncode == 0, started.stdout + started.stderr + _logs(run_dir)
    printed = started.stdout
    key = re.search(r"key (om_\S+)", printed)
    login = re.search(r"basic auth as '(\w+)' with the password (\S+)", printed)
    assert key and login, printed
    pids = _pids(run_dir)
    assert set(pids) == set(PROCESSES) and all(_alive(pid) for pid in pids.values())
    # each om process said what it runs on, all on the same database and broker
    broker = f"redis://127.0.0.1:{env['REDIS_PORT']}/0"
    for name in ("api", "worker", "beat", "flower"):
        first = (run_dir / f"{name}.log").read_text().splitlines()[0]
        assert f"database {env['OM_DATABASE_URL']}; broker {broker};" in first, first
        assert "deploy/profile.yaml (profiles: default)" in first, first

    base = f"http://127.0.0.1:{env['OM_PORT']}"
    with OMClient(base, key[1]) as client:
        assert client.ready()["checks"] == {"database": "ok", "broker": "ok"}
        client.append("t-1", [{"id": "m1", "role": "user", "content": "My sister Priya lives in Lisbon."}])
        # the server waits for the worker to run the observation
        assert client.observe("t-1")["outcome"] == "completed"
        assert "Priya" in " ".join(segment["text"] for segment in client.observations("t-1")["log"])
    metrics = f"http://127.0.0.1:{env['OM_WORKER_METRICS_PORT']}/metrics"
    assert 'om_tasks_total{outcome="completed",task="om.observe_sync"}' in httpx.get(metrics, timeout=10).text
    flower = f"http://127.0.0.1:{env['FLOWER_PORT']}"
    assert httpx.get(f"{flower}/api/workers", timeout=10).status_code == 401
    workers = wait_for(
        lambda: httpx.get(f"{flower}/api/workers?refresh=1", auth=(login[1], login[2]), timeout=20).json(),
        60,
        0.5,
        what="Flower to see the worker",
    )
    assert workers
    # beat schedules its scans: the worker runs them
    wait_for(lambda: "om.maintenance.sweep" in (run_dir / "worker.log").read_text(), 90, 0.5, what="a sweep")
    status = subprocess.run(
        ["bash", str(SCRIPT), "status"], env=env, capture_output=True, text=True, check=True
    )
    assert status.stdout.count(": running") == len(PROCESSES)

    stopped = subprocess.run(
        ["bash", str(SCRIPT), "down"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert stopped.returncode == 0 and "om is down" in stopped.stdout
    assert not any(_alive(pid) for pid in pids.values())
    assert not _pids(run_dir)
    # every stream the set-up wrote folds to exactly its stored state
    verified = om("projections", "rebuild", "--verify", env={"OM_DATABASE_URL": env["OM_DATABASE_URL"]})
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _logs(run_dir: Path) -> str:
    return "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(run_dir.glob("*.log")))
