"""Rolling out: any number of `om migrate` at once, and processes started beside (or before) the migration.

Each runs the `om` command line as a deployment does: separate processes on one database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from om_core.adapters.store.migrations import alembic_config, current_revision, upgrade_to_head
from testing.postgres import create_postgres_database, drop_postgres_database
from testing.processes import free_port, wait_for

pytestmark = pytest.mark.integration

OM = [sys.executable, "-m", "om_api.cli"]


def _environment(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    return {**env, "OM_DATABASE_URL": database_url, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def _head(url: str) -> str:
    return str(ScriptDirectory.from_config(alembic_config(url)).get_current_head())


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    url = create_postgres_database("om_test_rollout")
    try:
        yield url
    finally:
        drop_postgres_database(url)


def _migrate_at_once(database_url: str, processes: int) -> list[subprocess.CompletedProcess[str]]:
    started = [
        subprocess.Popen(
            [*OM, "migrate"],
            env=_environment(database_url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    results = []
    for process in started:
        out, err = process.communicate(timeout=240)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return results


def test_concurrent_migrations_of_a_fresh_postgres_all_succeed(empty_postgres: str) -> None:
    # two replicas' init containers (and an operator's own run) migrating the same new database
    results = _migrate_at_once(empty_postgres, processes=4)
    assert [r.returncode for r in results] == [0, 0, 0, 0], "\n".join(r.stderr for r in results)
    assert all(r.stderr == "" for r in results), [r.stderr for r in results]
    assert current_revision(empty_postgres) == _head(empty_postgres)


def test_concurrent_migrations_of_a_fresh_sqlite_file_all_succeed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/om.sqlite3"
    results = _migrate_at_once(url, processes=4)
    assert [r.returncode for r in results] == [0, 0, 0, 0], "\n".join(r.stderr for r in results)
    assert current_revision(url) == _head(url)


def _serve(database_url: str, port: int, log: Path | None = None, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*OM, "serve"],
        env=_environment(
            database_url,
            OM_HOST="127.0.0.1",
            OM_PORT=str(port),
            OM_AUTH="disabled",
            OM_PROFILE=str(Path(__file__).parents[1] / "fixtures" / "keyless-profile.yaml"),
            **extra,
        ),
        stdout=subprocess.DEVNULL if log else subprocess.PIPE,
        stderr=log.open("w") if log else subprocess.PIPE,
        text=True,
    )


def _stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return err


def test_a_server_started_before_the_migration_says_so_and_waits_for_it(
    empty_postgres: str, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    server = _serve(empty_postgres, port, log, OM_SCHEMA_WAIT_SECONDS="120")
    try:
        waiting = wait_for(
            lambda: [line for line in log.read_text().splitlines() if "for `om migrate`" in line],
            timeout=90,
            interval=0.1,
            what="the server to say it waits for the migration",
        )
        assert server.poll() is None, log.read_text()
        upgrade_to_head(empty_postgres)

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout=90, interval=0.2, what="the server to answer after the migration")
    finally:
        _stop(server)
    assert waiting == [
        f"the database schema is empty, not at {_head(empty_postgres)}: waiting up to 120s for `om migrate` "
        "(OM_SCHEMA_WAIT_SECONDS)"
    ]
    said = [line for line in log.read_text().splitlines() if "for `om migrate`" in line]
    assert said == waiting, "said once"


def test_a_worker_on_an_unmigrated_database_refuses_in_one_line(empty_postgres: str) -> None:
    result = subprocess.run(
        [*OM, "worker"],
        env=_environment(
            empty_postgres, OM_PROFILE=str(Path(__file__).parents[1] / "fixtures" / "keyless-profile.yaml")
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"error: the database schema is empty, not at {_head(empty_postgres)}: "
        "run `om migrate` on this database first"
    ]


def test_a_server_on_a_schema_newer_than_it_knows_refuses_in_one_line(empty_postgres: str) -> None:
    upgrade_to_head(empty_postgres)
    engine = sa.create_engine(empty_postgres)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_from_a_newer_om'"))
    engine.dispose()
    server = _serve(empty_postgres, free_port())
    try:
        _, err = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            _stop(server)
    assert server.returncode == 2, err
    assert err.strip().splitlines() == [
        "error: the database schema is at revision 9999_from_a_newer_om, newer than this om's "
        f"{_head(empty_postgres)}: run the om version that migrated it (every process of a deployment on "
        "the same version)"
    ]
