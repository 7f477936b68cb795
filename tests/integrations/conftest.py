"""One real ``om serve`` for the integration tests (MCP, the agent frameworks): on a scratch Postgres
database, with its in-process Celery worker (``--embedded``), two tenants' keys, and budgets small enough
that a few turns are observed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testing.postgres import scratch_postgres
from testing.processes import om_server, process_env

KEY_A, KEY_B = "integrations-key-alpha", "integrations-key-beta"
PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 400, "bufferTokens": 0.25, "bufferActivation": 0.8, "blockAfter": 1.5},
    "reflection": {"observationTokens": 60_000},
}


@dataclass(frozen=True)
class Server:
    url: str
    log: Path


@pytest.fixture(scope="session")
def om(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("integrations")
    profile = tmp / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    with scratch_postgres(prefix="om_integrations") as url:
        env = process_env(
            database_url=url,
            broker_url="memory://localhost/",
            profile=profile,
            extra={"OM_API_KEYS": f"{KEY_A}=alpha,{KEY_B}=beta"},
        )
        log = tmp / "serve.log"
        with om_server(["serve", "--embedded"], env, log) as base:
            yield Server(base, log)
