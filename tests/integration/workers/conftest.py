"""Real Postgres, real Redis, real ``celery worker`` processes.

Each test gets a scratch Postgres database migrated to head and a flushed Redis database number of its
own; workers and beat are subprocesses configured only through ``OM_*`` variables.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from om_core.application.append import append_messages, configure_thread
from om_core.application.deps import Deps
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.domain.envelope import RecordedEvent
from om_core.settings import ServerSettings
from om_workers.app import create_app
from om_workers.bootstrap import build_worker_deps
from om_workers.settings import WorkerSettings
from testing.conversations import filler_message as message
from testing.conversations import memory_profile
from testing.postgres import scratch_postgres
from testing.processes import CeleryProcess, beat_process, process_env, suite_redis_url, worker_process

pytestmark = pytest.mark.integration

REDIS_URL = suite_redis_url("OM_TEST_REDIS_URL", 11)
TENANT = "t"

# short bounds so faults recover within a test; the ordering constraints of WorkerSettings still hold
WORKER_ENV = {
    "OM_WORKER_SOFT_TIME_LIMIT": "6",
    "OM_WORKER_TIME_LIMIT": "8",
    "OM_WORKER_VISIBILITY_TIMEOUT": "10",
    "OM_WORKER_RESTORE_INTERVAL": "1",
    "OM_WORKER_RETRY_BACKOFF_MAX": "2",
    "OM_WORKER_RELAY_INTERVAL": "1",
    "OM_WORKER_REPUBLISH_AFTER": "1",
    "OM_WORKER_SWEEP_INTERVAL": "2",
    "OM_WORKER_STUCK_AFTER": "60",
}


@dataclass
class Cluster:
    """One test's system: database, broker, profile, worker processes, and Deps for the test's own calls."""

    database_url: str
    broker_url: str
    tmp: Path
    profile: dict[str, Any]
    processes: list[CeleryProcess] = field(default_factory=list)
    _deps: Deps | None = None

    @property
    def profile_path(self) -> Path:
        path = self.tmp / "profile.json"
        path.write_text(json.dumps(self.profile))
        return path

    def env(self, **extra: str) -> dict[str, str]:
        return process_env(
            database_url=self.database_url,
            broker_url=self.broker_url,
            profile=self.profile_path,
            extra={**WORKER_ENV, **extra},
        )

    def settings(self) -> ServerSettings:
        return ServerSettings(
            database_url=self.database_url, broker_url=self.broker_url, profile=self.profile_path
        )

    def worker_settings(self) -> WorkerSettings:
        return WorkerSettings(**{k.removeprefix("OM_WORKER_").lower(): v for k, v in WORKER_ENV.items()})

    @property
    def deps(self) -> Deps:
        if self._deps is None:
            settings = self.settings()
            self._deps = build_worker_deps(create_app(settings, self.worker_settings()), settings)
        return self._deps

    def worker(
        self, name: str, *, concurrency: int = 1, env: dict[str, str] | None = None, **kw: Any
    ) -> CeleryProcess:
        process = worker_process(name, env or self.env(), self.tmp, concurrency=concurrency, **kw)
        self.processes.append(process)
        return process.start()

    def beat(self, name: str = "beat", *, env: dict[str, str] | None = None) -> CeleryProcess:
        process = beat_process(name, env or self.env(), self.tmp)
        self.processes.append(process)
        return process.start()

    def close(self) -> None:
        for process in self.processes:
            process.kill()
        if self._deps is not None:
            self._deps.close()

    # --- conversation helpers -------------------------------------------------------------------------

    def new_thread(self) -> str:
        thread = f"th-{uuid.uuid4().hex[:8]}"
        configure_thread(self.deps, tenant=TENANT, thread_id=thread, resource_id="r")
        return thread

    def stream(self, thread: str) -> str:
        return thread_stream_id(TENANT, thread)

    def events(self, thread: str, *types: str) -> list[RecordedEvent]:
        events = self.deps.store.read_stream(self.stream(thread))
        return [e for e in events if not types or e.event_type in types]

    def append_until_buffer_requested(self, thread: str, limit: int = 60) -> str:
        """Append turns until the policy requests a background observation; returns its cycle id."""
        for index in range(limit):
            outcome = append_messages(
                self.deps, tenant=TENANT, thread_id=thread, messages=[message(thread, index)]
            )
            for event in outcome.events:
                if type(event).__name__ == "ObservationBufferRequested":
                    return str(event.cycle_id)  # type: ignore[attr-defined]
        raise AssertionError("no buffer was requested")

    def state(self, thread: str) -> Any:
        return load_state(self.deps.records, self.deps.store, self.stream(thread))


@pytest.fixture
def database_url() -> Iterator[str]:
    with scratch_postgres(prefix="om_workers") as url:
        yield url


@pytest.fixture
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    client.close()
    return REDIS_URL


@pytest.fixture
def cluster_factory(database_url: str, redis_url: str, tmp_path: Path) -> Iterator[Any]:
    made: list[Cluster] = []

    def make(latency_ms: int = 0, broker_url: str | None = None, **observation: Any) -> Cluster:
        cluster = Cluster(
            database_url, broker_url or redis_url, tmp_path, memory_profile(latency_ms, **observation)
        )
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()
