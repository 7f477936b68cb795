"""HTTP end-to-end fixtures: a scratch Postgres database per module (migrated to head), or a SQLite file,
the app built by ``create_app`` over the inline executor, and an httpx client on the ASGI app."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from om_api.app import create_app
from om_core.adapters.inline_dispatcher import InlineDispatcher
from om_core.application.deps import Deps
from om_core.bootstrap import build_inline
from om_core.settings import ServerSettings
from testing.postgres import postgres_server, scratch_postgres

# the test server's maintenance database, as psycopg spells it, for the tests' own admin statements
PG_SERVER = postgres_server().set(drivername="postgresql").render_as_string(hide_password=False)

# Small budgets so a few dozen turns go through buffering, activation and reflection.
PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 1_200, "bufferTokens": 0.25, "bufferActivation": 0.8, "blockAfter": 1.5},
    "reflection": {"observationTokens": 500, "bufferActivation": 0.5, "blockAfter": 1.2},
}
KEYS = {"key-alpha": "alpha", "key-beta": "beta"}
AUTH_A = {"Authorization": "Bearer key-alpha"}
AUTH_B = {"Authorization": "Bearer key-beta"}


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_postgres(prefix="om_e2e") as url:
        yield url


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("om") / "om.sqlite3"
    return f"sqlite:///{path}"


def make_settings(url: str, **overrides: Any) -> ServerSettings:
    values: dict[str, Any] = {"database_url": url, "api_keys": ",".join(f"{k}={t}" for k, t in KEYS.items())}
    values.update(overrides)
    return ServerSettings(**values)


def build(url: str, *, background: bool = True, **settings: Any) -> tuple[Any, Deps, InlineDispatcher]:
    deps, dispatcher = build_inline(database_url=url, profile=PROFILE, background=background, migrate=True)
    server_settings = make_settings(url, **settings)
    deps.max_message_bytes = server_settings.max_message_bytes
    # the inline executor leaves om.sync work to the reader: no worker will deliver it, so don't wait
    deps.sync_wait_seconds = 0.0
    app = create_app(server_settings, deps, sse_poll_interval=0.05, sse_heartbeat_interval=0.5)
    return app, deps, dispatcher


@pytest.fixture(scope="module")
def pg_app(pg_url: str) -> Iterator[tuple[Any, Deps, InlineDispatcher]]:
    app, deps, dispatcher = build(pg_url)
    yield app, deps, dispatcher
    dispatcher.close()


@pytest.fixture(scope="module")
def client(pg_app: tuple[Any, Deps, InlineDispatcher]) -> Iterator[TestClient]:
    with TestClient(pg_app[0], raise_server_exceptions=False) as test_client:
        yield test_client


# A real `om serve --embedded` (a subprocess) that the client and docs-example tests share: named profiles,
# a key from OM_API_KEYS, and `om` on PATH for the commands the docs run beside it.
SERVER_KEY = "client-key"
SERVER_PROFILES: dict[str, Any] = {
    "profiles": {
        "default": {"model": "om-local/extractive"},
        "support": {"model": "om-local/extractive", "observation": {"messageTokens": 900}},
    }
}


@pytest.fixture(scope="session")
def om_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """The base URL of the server, and the environment it runs with."""
    import json
    import sys

    from testing.processes import om_server

    tmp = tmp_path_factory.mktemp("om-serve")
    profile = tmp / "profiles.json"
    profile.write_text(json.dumps(SERVER_PROFILES))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env.update(
        OM_DATABASE_URL=f"sqlite:///{tmp / 'om.sqlite3'}",
        OM_PROFILE=str(profile),
        OM_API_KEYS=f"{SERVER_KEY}=acme",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    with om_server(["serve", "--embedded"], env, tmp / "serve.log") as base:
        yield base, env
