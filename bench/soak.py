"""Soak: the deployed system under concurrent conversations and faults, then integrity checks. Prints JSON.

    .venv/bin/python -m bench.soak [--threads 50] [--turns 24] [--seconds 90] [--seed 1] [--log-dir DIR]
    om bench soak --help

What runs, as it is deployed: two ``om serve`` replicas (processes of their own, each with its own state
cache), two ``om worker`` processes with concurrency 2, and ``om beat`` (the outbox relay, lost-work
recovery and the sweeps), on a scratch Postgres database and a private ``redis-server`` on a free port (the
shared one is never touched).
The profile has small budgets (messageTokens 400, observationTokens 600, default buffering), the local model
``om-local/extractive`` and the vector index, so every kind of background work happens within a few turns.

What the clients do, over HTTP with an API key: one conversation per thread (synthetic user/assistant turns
of varied topics and lengths, seeded; each turn appends the user message, reads the context and appends the
answer, with small pauses), each conversation's requests sent to the two replicas in turn; some threads with
two appenders at once; some threads DELETEd right after their last append while work is in flight, and some
of those re-created under the same id a few seconds later. Meanwhile the faults: Postgres backends
terminated (twice), a task delivered again after it ran (published again, and outbox rows marked unpublished
so the relay publishes them again), a worker SIGKILLed mid-task and restarted, Redis shut down without
saving and restarted, and a worker SIGKILLed while it runs a background cycle with Redis shut down without
saving at the same moment (its unacknowledged message gone with it), both restarted.

Besides the violations, it measures what a worker's death costs: for every record whose cycle a killed
worker held, the time from the death to the record's next completed background cycle (p50 and max), and the
share of all model calls whose results were discarded (stale or failed).

Once nothing is in flight and the outbox is empty (a bounded wait), with every process stopped, it counts
violations by kind (see ``bench/soak_checks.py``; each is 0 when the system is healthy) and prints them with
the first few examples of each. Exits 1 when any violation was found.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx
import redis
import sqlalchemy as sa

from bench.soak_checks import (
    VIOLATION_KINDS,
    ErasedThread,
    Findings,
    LiveThread,
    check_erased_threads,
    check_live_threads,
    scan_logs,
    verify_projections,
)
from om_api.demo.conversation import Turn, synthetic_conversation
from om_core.adapters.store import SqlEventStore, create_event_store
from om_core.adapters.store.schema import events, leases, outbox
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.application.task_requests import (
    QUEUE_BUFFER,
    QUEUE_SYNC,
    TASK_OBSERVE_BUFFER,
    TASK_OBSERVE_SYNC,
    TASK_REFLECT,
)
from om_core.domain.envelope import RecordedEvent
from om_core.domain.events import effect_event_id, from_recorded
from om_core.domain.state import evolve, initial_state
from om_core.settings import ServerSettings
from om_workers.app import create_app
from om_workers.dispatcher import publish
from om_workers.settings import WorkerSettings
from testing.postgres import postgres_server, scratch_postgres
from testing.processes import (
    CeleryProcess,
    RedisServer,
    free_port,
    om_beat_process,
    om_server,
    om_worker_process,
    process_env,
)

ADMIN_URL = postgres_server().render_as_string(hide_password=False)
TENANT = "soak"
KEY = "soak-key"
# What a lost worker costs is measured with the defaults: the lease (OM_LEASE_SECONDS 30), its recovery
# tick (OM_WORKER_RECOVER_INTERVAL 5) and the requeue of tasks the broker lost (OM_WORKER_REQUEUE_AFTER 30)
# are left as deployed, and the stuck-cycle sweep is put out of reach (300 s): no fault heals through it. The
# other bounds are short, so the run stays short: the time limits stay above a worker's reconnect after the
# Redis restart (several seconds of backoff, during which it cannot learn that its tasks finished). The
# ordering WorkerSettings demands holds.
WORKER_ENV = {
    "OM_WORKER_SOFT_TIME_LIMIT": "15",
    "OM_WORKER_TIME_LIMIT": "18",
    "OM_WORKER_VISIBILITY_TIMEOUT": "20",
    "OM_WORKER_RESTORE_INTERVAL": "1",
    "OM_WORKER_RETRY_BACKOFF_MAX": "2",
    "OM_WORKER_RELAY_INTERVAL": "1",
    "OM_WORKER_REPUBLISH_AFTER": "2",
    "OM_WORKER_SWEEP_INTERVAL": "2",
    "OM_WORKER_STUCK_AFTER": "300",
}
REPLICAS = 2
FAULT_KINDS = (
    "pg_terminate_backend",
    "duplicate_delivery",
    "outbox_republish",
    "worker_sigkill",
    "redis_restart",
    "worker_crash_with_broker_restart",
    "erase_with_work_in_flight",
    "recreate",
)
# what a client retries (besides a connection that failed): throttling, the documented 503, any 5xx
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class SoakOptions:
    threads: int = 50
    turns: int = 24
    seconds: float = 90.0
    seed: int = 1
    latency_ms: int = 50
    settle_seconds: float = 120.0
    admin_url: str = ADMIN_URL
    log_dir: Path | None = None


def soak_profile(latency_ms: int) -> dict[str, Any]:
    return {
        "model": "om-local/extractive",
        "observation": {
            "messageTokens": 400,
            "providerOptions": {"omLocal": {"latencyMs": latency_ms, "seed": 1}},
        },
        "reflection": {"observationTokens": 600},
        "retrieval": {"vector": True, "scope": "thread"},
    }


# --- the plan ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreadPlan:
    thread_id: str
    turns: int
    seed: int
    start_after: float
    duration: float
    second_appender: bool = False
    erase: bool = False
    recreate: bool = False


def plan_threads(options: SoakOptions) -> list[ThreadPlan]:
    """Conversations of varied length; about a fifth erased (most of those re-created), a sixth with two
    appenders. Erased ones end in the first two thirds of the run, so their re-creation meets the faults."""
    rng = random.Random(options.seed)
    count = options.threads
    erased = max(2, round(count * 0.2))
    recreated = max(1, round(erased * 0.6))
    paired = max(2, round(count * 0.15))
    order = list(range(count))
    rng.shuffle(order)
    role = {i: "erase" for i in order[:erased]} | {i: "pair" for i in order[erased : erased + paired]}
    span = options.seconds
    plans = []
    for index in range(count):
        erase = role.get(index) == "erase"
        plans.append(
            ThreadPlan(
                thread_id=f"soak-{index:03d}",
                turns=rng.randint(max(3, options.turns // 3), max(3, options.turns)),
                seed=options.seed * 1000 + index,
                start_after=rng.uniform(0, min(2.0, span / 10)),
                duration=span * (rng.uniform(0.3, 0.6) if erase else rng.uniform(0.5, 0.95)),
                second_appender=role.get(index) == "pair",
                erase=erase,
                recreate=erase and order.index(index) < recreated,
            )
        )
    return plans


# --- HTTP -------------------------------------------------------------------------------------------------


class Http:
    """Counts every response by status and retries what a client would, for up to ``patience`` seconds."""

    def __init__(self, findings: Findings, patience: float = 60.0) -> None:
        self.findings = findings
        self.patience = patience
        self.statuses: Counter[int] = Counter()
        self.latencies: dict[str, list[float]] = {}
        self.slowest: list[tuple[float, str, int]] = []
        self.transport_errors = 0
        self.unexpected: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def call(
        self, client: Replicas, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = ()
    ) -> httpx.Response | None:
        deadline = time.monotonic() + self.patience
        pause = 0.1
        while True:
            sent = time.perf_counter()
            try:
                response = client.request(method, path, json=body)
                self._timed(method, path, response.status_code, time.perf_counter() - sent)
            except httpx.TransportError as error:
                with self._lock:
                    self.transport_errors += 1
                    if len(self.unexpected) < 5:
                        self.unexpected.append({"request": f"{method} {path}", "error": repr(error)})
                response = None
            if response is not None:
                self._count(method, path, response, ok)
                if response.status_code not in _RETRY_STATUSES:
                    return response
            if time.monotonic() > deadline:
                return response
            retry_after = response.headers.get("retry-after") if response is not None else None
            time.sleep(min(2.0, float(retry_after)) if retry_after and retry_after.isdigit() else pause)
            pause = min(2.0, pause * 2)

    @staticmethod
    def _route(method: str, path: str) -> str:
        # the thread id is the fourth path segment ("", "v1", "threads", id, ...)
        return f"{method} " + "/".join("{id}" if i == 3 else p for i, p in enumerate(path.split("/")))

    def _timed(self, method: str, path: str, status: int, seconds: float) -> None:
        with self._lock:
            self.latencies.setdefault(self._route(method, path), []).append(seconds * 1000)
            self.slowest = sorted([*self.slowest, (seconds * 1000, f"{method} {path}", status)])[-5:]

    def latency_ms(self) -> dict[str, dict[str, float]]:
        out = {}
        for route, samples in sorted(self.latencies.items()):
            ordered = sorted(samples)
            out[route] = {
                "n": len(ordered),
                "p50": round(ordered[len(ordered) // 2], 1),
                "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
                "max": round(ordered[-1], 1),
            }
        return out

    def _count(self, method: str, path: str, response: httpx.Response, ok: tuple[int, ...]) -> None:
        status = response.status_code
        with self._lock:
            self.statuses[status] += 1
            if status == 500:
                self.findings.add(
                    "http_500",
                    {"request": f"{method} {path}", "body": response.text[:300]},
                    group=self._route(method, path),
                )
            elif status >= 400 and status not in (*ok, *_RETRY_STATUSES) and len(self.unexpected) < 5:
                self.unexpected.append(
                    {"request": f"{method} {path}", "status": status, "body": response.text[:300]}
                )


def _work_running(status: dict[str, Any] | None) -> bool:
    if not status:
        return False
    buffered = status["windows"]["buffered"]
    return "running" in (buffered["observations"]["status"], buffered["reflection"]["status"])


# --- conversations ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerDeath:
    """A worker killed by the soak, when, and the cycles it held then (stream, cycle; by their leases)."""

    at: datetime
    cycles: frozenset[tuple[str, str]]


@dataclass
class Outcome:
    """What the clients did and what the server accepted, for the checks."""

    deaths: list[WorkerDeath] = field(default_factory=list)
    live: dict[str, set[str]] = field(default_factory=dict)
    erased: list[ErasedThread] = field(default_factory=list)
    turns: int = 0
    messages_sent: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Replicas:
    """One conversation's client of every replica: each request goes to the next one in turn."""

    def __init__(self, bases: list[str]) -> None:
        self.clients = [
            httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=httpx.Timeout(30.0)
            )
            for base in bases
        ]
        self._next = 0

    def request(self, method: str, path: str, json: Any = None) -> httpx.Response:
        client = self.clients[self._next]
        self._next = (self._next + 1) % len(self.clients)
        return client.request(method, path, json=json)

    def __enter__(self) -> Replicas:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.clients:
            client.close()


class Conversations:
    def __init__(self, bases: list[str], http: Http, outcome: Outcome) -> None:
        self.bases = bases
        self.http = http
        self.outcome = outcome

    def client(self) -> Replicas:
        return Replicas(self.bases)

    def run(self, plan: ThreadPlan, t0: float) -> None:
        time.sleep(max(0.0, t0 + plan.start_after - time.monotonic()))
        path = f"/v1/threads/{plan.thread_id}"
        accepted: set[str] = set()
        with self.client() as client:
            self.http.call(client, "PUT", path, {"resource_id": f"user-{plan.seed % 7}"})
            helper: threading.Thread | None = None
            helped: set[str] = set()
            if plan.second_appender:
                helper = threading.Thread(
                    target=self._second_appender, args=(plan, helped), name=f"{plan.thread_id}-b"
                )
                helper.start()
            script = synthetic_conversation(plan.turns + 4, seed=plan.seed)
            status = self._converse(client, plan, script, "a", accepted, plan.turns, time.monotonic())
            if helper is not None:
                helper.join()
                accepted |= helped
            if not plan.erase:
                with self.outcome.lock:
                    self.outcome.live[plan.thread_id] = accepted
                return
            self._erase(client, plan, script, accepted, status)

    def _second_appender(self, plan: ThreadPlan, accepted: set[str]) -> None:
        with self.client() as client:
            turns = max(2, plan.turns // 2)
            script = synthetic_conversation(turns, seed=plan.seed + 500_000)
            self._converse(client, plan, script, "b", accepted, turns, time.monotonic(), read=False)

    def _converse(
        self,
        client: Replicas,
        plan: ThreadPlan,
        script: Iterator[Turn],
        tag: str,
        accepted: set[str],
        turns: int,
        began: float,
        *,
        read: bool = True,
    ) -> dict[str, Any] | None:
        rng = random.Random(f"{plan.seed}-{tag}")
        status = None
        for index in range(turns):
            turn = next(script)
            status = self._post(client, plan.thread_id, _tagged(turn.user, tag), accepted) or status
            if read:
                self.http.call(client, "GET", f"/v1/threads/{plan.thread_id}/context")
            status = self._post(client, plan.thread_id, _tagged(turn.assistant, tag), accepted) or status
            with self.outcome.lock:
                self.outcome.turns += 1
            due = began + plan.duration * (index + 1) / turns
            time.sleep(max(rng.uniform(0.02, 0.15), due - time.monotonic()))
        return status

    def _post(
        self, client: Replicas, thread_id: str, message: dict[str, Any], accepted: set[str]
    ) -> dict[str, Any] | None:
        with self.outcome.lock:
            self.outcome.messages_sent += 1
        response = self.http.call(
            client, "POST", f"/v1/threads/{thread_id}/messages", {"messages": [message]}
        )
        if response is None or not response.is_success:
            return None
        body = response.json()
        accepted.update(a["message_id"] for a in body["appended"])
        accepted.update(body["duplicates"])
        status: dict[str, Any] = body["status"]
        return status

    def _erase(
        self,
        client: Replicas,
        plan: ThreadPlan,
        script: Iterator[Turn],
        accepted: set[str],
        status: dict[str, Any] | None,
    ) -> None:
        """DELETE right after an append that left work in flight (a few more user messages until one
        does), then, for some, the same id again a few seconds later."""
        for _ in range(4):
            if _work_running(status):
                break
            status = self._post(client, plan.thread_id, _tagged(next(script).user, "a"), accepted) or status
        response = self.http.call(client, "DELETE", f"/v1/threads/{plan.thread_id}", ok=(404,))
        erased_at = datetime.now(UTC)
        if response is None or response.status_code not in (204, 404):
            with self.outcome.lock:
                self.outcome.live[plan.thread_id] = accepted
            return
        with self.outcome.lock:
            self.outcome.faults["erase"] += 1
            self.outcome.faults["erase_with_work_in_flight"] += _work_running(status)
        recreated: set[str] = set()
        sent: set[str] = set()
        if plan.recreate:
            time.sleep(random.Random(plan.seed).uniform(2.0, 4.0))
            again = ThreadPlan(plan.thread_id, 3, plan.seed + 900_000, 0.0, 3.0)
            script = synthetic_conversation(3, seed=again.seed)
            turns = list(script)
            sent = {_tagged(m, "r")["id"] for t in turns for m in (t.user, t.assistant)}
            self._converse(client, again, iter(turns), "r", recreated, 3, time.monotonic())
            with self.outcome.lock:
                self.outcome.faults["recreate"] += 1
                self.outcome.live[plan.thread_id] = recreated
        with self.outcome.lock:
            self.outcome.erased.append(
                ErasedThread(plan.thread_id, thread_stream_id(TENANT, plan.thread_id), erased_at, sent)
            )


def _tagged(message: dict[str, Any], tag: str) -> dict[str, Any]:
    return {**message, "id": f"{tag}-{message['id']}"}


# --- faults -----------------------------------------------------------------------------------------------


class Faults:
    """The faults, each recorded in ``outcome.faults`` as it is injected."""

    def __init__(
        self,
        *,
        admin_url: str,
        database: str,
        store: SqlEventStore,
        broker: RedisServer,
        workers: list[CeleryProcess],
        supervisor: Supervisor,
        settings: ServerSettings,
        outcome: Outcome,
    ) -> None:
        self.admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.database = database
        self.store = store
        self.broker = broker
        self.workers = workers
        self.supervisor = supervisor
        self.app = create_app(settings, WorkerSettings())
        self.outcome = outcome
        self.errors: list[str] = []

    def close(self) -> None:
        self.admin.dispose()

    def run(self, seconds: float, stop: threading.Event) -> None:
        """Inject the faults at fixed shares of the run, from now (when the conversations start)."""
        t0 = time.monotonic()
        schedule: list[tuple[float, Callable[[], None]]] = [
            (0.12, self.terminate_backends),
            (0.22, self.deliver_again),
            (0.32, self.kill_worker),
            (0.45, self.restart_redis),
            (0.58, self.mark_outbox_unpublished),
            (0.64, self.crash_worker_with_broker),
            (0.70, self.terminate_backends),
            (0.80, self.deliver_again),
        ]
        for at, fault in schedule:
            if stop.wait(max(0.0, t0 + at * seconds - time.monotonic())):
                return
            for attempt in range(3):
                try:
                    fault()
                    break
                except Exception as error:
                    # e.g. this process's own pooled connection, terminated by the previous fault: try
                    # again; a fault that could not be injected at all is reported, never fatal
                    if attempt == 2:
                        self.errors.append(f"{fault.__name__}: {error!r}")
                    time.sleep(0.5)

    def _count(self, kind: str, n: int = 1) -> None:
        with self.outcome.lock:
            self.outcome.faults[kind] += n

    def terminate_backends(self) -> None:
        with self.admin.connect() as conn:
            killed = conn.scalar(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = :db AND pid <> pg_backend_pid()"
                ),
                {"db": self.database},
            )
        self._count("pg_terminate_backend")
        self._count("pg_backends_terminated", int(killed or 0))

    def _ran_tasks(self, limit: int) -> list[Any]:
        """Published model tasks whose outcome is recorded: delivering one again must change nothing."""
        query = (
            sa.select(outbox)
            .where(
                outbox.c.published_at.is_not(None),
                outbox.c.task_name.in_([TASK_OBSERVE_BUFFER, TASK_OBSERVE_SYNC, TASK_REFLECT]),
            )
            .order_by(sa.func.random())
            .limit(limit * 4)
        )
        with self.store.engine.connect() as conn:
            rows = conn.execute(query).all()
        ran = [
            r
            for r in rows
            if self.store.find_event(effect_event_id(r.stream_id, r.payload["cycle_id"], "outcome"))
        ]
        return ran[:limit]

    def deliver_again(self) -> None:
        for row in self._ran_tasks(6):
            publish(self.app, row.task_name, row.queue, row.key, row.payload)
            self._count("duplicate_delivery")

    def mark_outbox_unpublished(self) -> None:
        ids = [r.id for r in self._ran_tasks(6)]
        with self.store.engine.begin() as conn:
            changed = conn.execute(
                sa.update(outbox).where(outbox.c.id.in_(ids)).values(published_at=None)
            ).rowcount
        self._count("outbox_republish", int(changed))

    def _held_by(self, pids: set[int], *, buffering: bool = False) -> frozenset[tuple[str, str]]:
        """The cycles the processes ``pids`` hold now, by their leases (a holder is host/pid/token)."""
        with self.store.engine.connect() as conn:
            rows = conn.execute(sa.select(leases.c.key, leases.c.stream_id, leases.c.holder)).all()
        return frozenset(
            (row.stream_id, row.key.removeprefix(f"{row.stream_id}:"))
            for row in rows
            if _holder_pid(row.holder) in pids and (not buffering or ":buffer-obs-" in row.key)
        )

    def _died(self, held: frozenset[tuple[str, str]]) -> None:
        with self.outcome.lock:
            self.outcome.deaths.append(WorkerDeath(datetime.now(UTC), held))

    def crash_worker_with_broker(self) -> None:
        """SIGKILL the second worker as soon as it takes a background observation (inside its model call),
        and at once shut Redis down without saving: the unacknowledged message goes with it. Then start
        both again. Whether the cycle was really cut short is read from its outcome afterwards."""
        worker = self.workers[1]
        pids = worker.pids()
        deadline = time.monotonic() + 20
        held = self._held_by(pids, buffering=True)
        while not held and time.monotonic() < deadline:
            time.sleep(0.005)
            held = self._held_by(pids, buffering=True)
        with self.supervisor.stopping(worker):
            worker.kill()
            self._died(held)
            self.broker.shutdown_nosave()
            self._count("worker_crash_with_broker_restart")
            time.sleep(1.0)
            self.broker.start()
            worker.start()

    def kill_worker(self) -> None:
        """SIGKILL the first worker (its whole process group) while it holds a cycle's lease, that is while
        it runs a cycle's task, then start it again.

        The kill follows the lease, not the task log: a task is in the log before it takes its lease and after
        it committed its result, and maintenance tasks hold none, so a kill timed by the log could land where
        no cycle was cut short (the recovery check then had nothing to measure)."""
        worker = self.workers[0]
        deadline = time.monotonic() + 8
        with self.supervisor.stopping(worker):
            held = self._held_by(worker.pids())
            while not held and time.monotonic() < deadline:
                time.sleep(0.005)
                held = self._held_by(worker.pids())
            worker.kill()
            self._died(held)
            self._count("worker_sigkill")
            self._count("worker_sigkill_mid_task", int(bool(held)))
            time.sleep(1.0)
            worker.start()

    def restart_redis(self) -> None:
        self.broker.shutdown_nosave()
        self._count("redis_restart")
        time.sleep(2.0)
        self.broker.start()


def _holder_pid(holder: str) -> int | None:
    pid = holder.split("/")[1] if holder.count("/") == 2 else ""
    return int(pid) if pid.isdigit() else None


# The events that end a background cycle by applying its result: the record's background work goes on.
_APPLIED = (
    "ObservationBufferCompleted",
    "ReflectionBuffered",
    "SyncObservationCompleted",
    "ReflectionCompleted",
)


def recovery_after_deaths(
    store: SqlEventStore, deaths: list[WorkerDeath], erased: set[str]
) -> dict[str, Any]:
    """For each cycle a killed worker had not finished (it held its lease at the death and the cycle was
    still in flight then): seconds from the death until the record's background work went on. Records
    erased since are left out; a cycle that never left flight, or whose work asked for again never
    completed, is unrecovered."""
    seconds: list[float] = []
    unrecovered: list[str] = []
    interrupted = 0
    for death in deaths:
        for stream_id, cycle_id in sorted(death.cycles):
            if stream_id in erased:
                continue
            resumed = resumed_after(store.read_stream(stream_id), stream_id, cycle_id, death.at)
            if resumed is None:
                continue  # it finished before the kill
            interrupted += 1
            if resumed is NEVER:
                unrecovered.append(f"{stream_id} {cycle_id}")
            else:
                seconds.append((resumed - death.at).total_seconds())
    ordered = sorted(seconds)
    return {
        "deaths": len(deaths),
        "interrupted_cycles": interrupted,
        "p50": round(ordered[len(ordered) // 2], 1) if ordered else None,
        "max": round(ordered[-1], 1) if ordered else None,
        "unrecovered": unrecovered,
    }


NEVER = datetime.max.replace(tzinfo=UTC)
# what a commit asks for when the policy finds work owed
_REQUESTS = ("ObservationBufferRequested", "ReflectionRequested", "SyncObservationStarted")


def resumed_after(
    recorded: list[RecordedEvent], stream_id: str, cycle_id: str, died_at: datetime
) -> datetime | None:
    """When the record's background work went on after the death of the worker running ``cycle_id``: None
    when the cycle was not in flight at the death, ``NEVER`` when it did not go on.

    The stream is folded event by event to find the event that took the cycle out of flight (whatever did:
    its own result from a worker that took it over, a synchronous observation that made it moot, or the
    recovery closing it as ``worker_lost``). A result applied there is the resumption. A closing that
    applies nothing resumes the record at that commit unless the same commit asked for work again (the
    policy finds work owed); then it is that work's first applied result. A record owing nothing when its
    cycle is closed (its conversation over, too few tokens left to buffer) has resumed all the same: its
    next message is buffered as usual.
    """
    state = initial_state(stream_id)
    was_in_flight = False
    for index, event in enumerate(recorded):
        evolve(state, [from_recorded(event)])
        in_flight = state.in_flight(cycle_id) is not None
        if in_flight:
            was_in_flight = True
            continue
        if not was_in_flight:
            continue
        if event.recorded_at <= died_at:
            return None
        if event.event_type in _APPLIED:
            return event.recorded_at
        same_commit = [
            e
            for e in recorded[index + 1 :]
            if e.recorded_at == event.recorded_at and e.metadata.get("cause") == event.metadata.get("cause")
        ]
        if not any(e.event_type in _REQUESTS for e in same_commit):
            return event.recorded_at
        later = [e.recorded_at for e in recorded[index + 1 :] if e.event_type in _APPLIED]
        return min(later) if later else NEVER
    return NEVER if was_in_flight else None


def discarded_calls(store: SqlEventStore) -> dict[str, Any]:
    """Model calls by what became of their results: applied, discarded as stale, failed."""
    calls: Counter[str] = Counter()
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(events.c.event_type, events.c.data).where(
                events.c.event_type.like("%Completed")
                | events.c.event_type.like("%Stale")
                | events.c.event_type.like("%Failed")
                | (events.c.event_type == "ReflectionBuffered")
            )
        ).all()
    for event_type, data in rows:
        kind = (
            "stale"
            if event_type.endswith("Stale")
            else "failed"
            if event_type.endswith("Failed")
            else "applied"
        )
        # a stale result without usage called no model (its cycle was over when it came); a failure of lost
        # work records the calls it knows of (none)
        calls[kind] += int((data.get("usage") or {}).get("calls", 1 if kind == "applied" else 0))
    total = sum(calls.values())
    return {
        **{kind: calls[kind] for kind in ("applied", "stale", "failed")},
        "total": total,
        "discarded_share": round((calls["stale"] + calls["failed"]) / total, 4) if total else 0.0,
    }


class Supervisor:
    """Starts again a process that exited by itself, as the deployment's restart policy does
    (``restart: unless-stopped``), and counts it: a worker that dies on a fault is a finding."""

    def __init__(self, processes: list[CeleryProcess], findings: Findings) -> None:
        self.processes = processes
        self.findings = findings
        self._stopping: set[str] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def stopping(self, process: CeleryProcess) -> Iterator[None]:
        """While the soak itself stops (kills) ``process``, its exit is no crash."""
        with self._lock:
            self._stopping.add(process.name)
        try:
            yield
        finally:
            with self._lock:
                self._stopping.discard(process.name)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(0.5):
            for process in self.processes:
                with self._lock:
                    if process.name in self._stopping or process.proc is None:
                        continue
                    code = process.proc.poll()
                    if code is None:
                        continue
                    last = [line for line in process.log().splitlines() if "CRITICAL" in line][-1:]
                    self.findings.add(
                        "worker_crashed",
                        {"process": process.name, "exit": code, "last": last},
                        group=process.name,
                    )
                    process.kill()
                    process.start()


# --- settling ---------------------------------------------------------------------------------------------


def in_flight(store: SqlEventStore) -> list[dict[str, Any]]:
    """Records with a cycle in flight (chunks waiting for activation are not work in flight)."""
    busy = []
    after = ""
    while True:
        page = store.list_streams_with_pending_work(after=after, limit=500)
        for stream_id in page:
            try:
                state = load_state(store, store, stream_id)
            except Exception as error:  # reported by the checks; here it only must not stop the wait
                busy.append({"stream": stream_id, "unreadable": repr(error)})
                continue
            flights = {
                "buffer": state.buffer_in_flight,
                "sync": state.sync_in_flight,
                "reflection": state.reflection_in_flight,
            }
            running = {k: v.cycle_id for k, v in flights.items() if v is not None}
            if running:
                busy.append({"stream": stream_id, **running})
        if len(page) < 500:
            return busy
        after = page[-1]


def settle(store: SqlEventStore, broker_port: int, timeout: float, findings: Findings) -> float:
    """Wait until no cycle is in flight, the outbox is empty and the model queues are drained, steadily
    for two seconds; after ``timeout`` that is a violation (work that never ends). Returns the wait."""
    began = time.monotonic()
    queues = redis.Redis(port=broker_port)
    steady = 0
    try:
        while True:
            busy = in_flight(store)
            unpublished = len(store.fetch_unpublished_tasks(limit=1000))
            try:
                queued = sum(int(queues.llen(q)) for q in (QUEUE_SYNC, QUEUE_BUFFER))
            except redis.RedisError:
                queued = -1  # unknown: not settled
            idle = not busy and not unpublished and not queued
            steady = steady + 1 if idle else 0
            if steady >= 4:
                return time.monotonic() - began
            if time.monotonic() - began > timeout:
                findings.add(
                    "unsettled",
                    {"in_flight": busy[:5], "unpublished_outbox": unpublished, "queued_tasks": queued},
                )
                return time.monotonic() - began
            time.sleep(0.5)
    finally:
        queues.close()


# --- the run ----------------------------------------------------------------------------------------------


def _stop_all(workers: list[CeleryProcess], beat: CeleryProcess) -> None:
    """Beat first (no new ticks), then the workers at once, each letting its running tasks finish."""
    beat.shutdown()
    with ThreadPoolExecutor(len(workers)) as pool:
        list(pool.map(lambda p: p.shutdown(), workers))


def _replays(base: str) -> float | None:
    """``om_state_replays_total`` from the server's /metrics (None when it does not export it)."""
    try:
        text = httpx.get(f"{base}/metrics", timeout=10).text
    except httpx.HTTPError:
        return None
    if "# TYPE om_state_replays_total" not in text:
        return None
    # a labelled counter has no sample until it is first incremented
    samples = [line for line in text.splitlines() if line.startswith("om_state_replays_total{")]
    return sum((float(line.rsplit(" ", 1)[1]) for line in samples), 0.0)


def run_soak(options: SoakOptions) -> dict[str, Any]:
    began = time.monotonic()
    findings = Findings()
    outcome = Outcome()
    http = Http(findings)
    plans = plan_threads(options)
    phases: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        log_dir = options.log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="om-soak-")))
        log_dir.mkdir(parents=True, exist_ok=True)
        url = stack.enter_context(scratch_postgres(options.admin_url, prefix="om_soak"))
        broker = RedisServer(free_port())
        broker.start()
        stack.callback(broker.kill)
        profile = soak_profile(options.latency_ms)
        profile_path = log_dir / "profile.json"
        profile_path.write_text(json.dumps(profile))
        env = process_env(
            database_url=url,
            broker_url=broker.url,
            profile=profile_path,
            extra={**WORKER_ENV, "OM_API_KEYS": f"{KEY}={TENANT}"},
        )
        store = create_event_store(url)
        stack.callback(store.close)
        workers = [om_worker_process(f"soak-w{i}", env, log_dir, concurrency=2) for i in range(2)]
        beat = om_beat_process("soak-beat", env, log_dir)
        processes = [*workers, beat]
        supervisor = Supervisor(processes, findings)
        faults = Faults(
            admin_url=options.admin_url,
            database=str(sa.make_url(url).database),
            store=store,
            broker=broker,
            workers=workers,
            supervisor=supervisor,
            settings=ServerSettings(database_url=url, broker_url=broker.url, profile=profile_path),
            outcome=outcome,
        )
        stack.callback(faults.close)
        stack.callback(_stop_all, workers, beat)
        # the workers warm up (imports, a first model call) while the server starts
        pool = stack.enter_context(ThreadPoolExecutor(len(processes)))
        starting = [pool.submit(p.start) for p in processes]
        with contextlib.ExitStack() as servers:
            bases = [
                servers.enter_context(om_server(["serve"], env, log_dir / f"server-{index}.log"))
                for index in range(REPLICAS)
            ]
            stop = threading.Event()
            watchdog = threading.Thread(target=supervisor.run, args=(stop,))
            injector = threading.Thread(target=faults.run, args=(options.seconds, stop))
            try:
                for process in starting:
                    process.result()
                phases["startup"] = time.monotonic() - began
                watchdog.start()
                conversations = Conversations(bases, http, outcome)
                t0 = time.monotonic()
                injector.start()
                clients = [threading.Thread(target=conversations.run, args=(p, t0)) for p in plans]
                for client in clients:
                    client.start()
                for client in clients:
                    client.join()
                injector.join()  # every fault is injected before the system may settle
                conversed = time.monotonic() - t0
                settled = settle(store, broker.port, options.settle_seconds, findings)
                per_replica = [_replays(base) for base in bases]
                replays = None if None in per_replica else sum(r or 0.0 for r in per_replica)
            finally:
                stop.set()
                for thread in (injector, watchdog):
                    if thread.is_alive():
                        thread.join()
                stopping = time.monotonic()
                _stop_all(workers, beat)
                phases["stop"] = time.monotonic() - stopping
        checking = time.monotonic()
        workers_report = scan_logs([p.log_path for p in processes], findings)
        verify = verify_projections(url, env, findings)
        live = [
            LiveThread(thread, thread_stream_id(TENANT, thread), ids) for thread, ids in outcome.live.items()
        ]
        read = check_live_threads(store, profile, live, findings)
        check_erased_threads(store.engine, outcome.erased, findings)
        with store.engine.connect() as conn:
            total_events = int(conn.scalar(sa.select(sa.func.count()).select_from(events)) or 0)
        server_logs = "".join(
            (log_dir / f"server-{index}.log").read_text(errors="replace") for index in range(REPLICAS)
        )
        erased_streams = {t.stream_id for t in outcome.erased}
        recovery = recovery_after_deaths(store, outcome.deaths, erased_streams)
        calls = discarded_calls(store)
        phases["checks"] = time.monotonic() - checking
    violations = findings.violations()
    return {
        "benchmark": "soak",
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items()},
        "shape": "2 om serve + 2 om worker (concurrency 2) + om beat, scratch Postgres, private Redis",
        "threads": {
            "total": len(plans),
            "with_two_appenders": sum(p.second_appender for p in plans),
            "erased": len(outcome.erased),
            "recreated": outcome.faults["recreate"],
            "live_at_end": len(live),
        },
        "turns": outcome.turns,
        "messages": {"sent": outcome.messages_sent, "accepted": sum(len(t.accepted) for t in live)},
        "events": {"total": total_events, "read_by_checks": read},
        "requests": {
            "total": sum(http.statuses.values()),
            "by_status": {str(k): v for k, v in sorted(http.statuses.items())},
            "transport_errors": http.transport_errors,
            "latency_ms": http.latency_ms(),
            "slowest": [
                {"request": request, "status": status, "ms": round(ms, 1)}
                for ms, request, status in reversed(http.slowest)
            ],
            "unexpected": http.unexpected,
        },
        "faults": {kind: outcome.faults[kind] for kind in (*FAULT_KINDS, "erase")}
        | {
            "pg_backends_terminated": outcome.faults["pg_backends_terminated"],
            "worker_sigkill_mid_task": outcome.faults["worker_sigkill_mid_task"],
            "not_injected": faults.errors,
        },
        "verify": verify,
        "workers": workers_report,
        "server_log_tracebacks": server_logs.count("Traceback"),
        "recovery_after_worker_death_seconds": recovery,
        "model_calls": calls,
        "state_replays": replays,
        "violations": violations,
        "violations_total": sum(violations.values()),
        "breakdown": findings.breakdown(),
        "examples": {k: v for k, v in findings.examples.items() if k in VIOLATION_KINDS},
        "seconds": {k: round(v, 1) for k, v in phases.items()}
        | {
            "conversations": round(conversed, 1),
            "settle": round(settled, 1),
            "elapsed": round(time.monotonic() - began, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="om bench soak",
        description=(
            "Soak the deployed shape (two om serve replicas, two om workers, om beat, Postgres, Redis) with "
            "concurrent conversations and faults, then count integrity violations by kind and measure what a "
            "worker's death costs. Prints JSON; exits 1 when any violation was found."
        ),
    )
    defaults = SoakOptions()
    parser.add_argument("--threads", type=int, default=defaults.threads, help="conversations (default 50)")
    parser.add_argument(
        "--turns", type=int, default=defaults.turns, help="most turns of a conversation (default 24)"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=defaults.seconds,
        help="how long the conversations and faults are spread over (default 90)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of the conversations")
    parser.add_argument(
        "--latency-ms", type=int, default=defaults.latency_ms, help="local model latency (default 50)"
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=defaults.settle_seconds,
        help="longest wait for work in flight to end before that counts as a violation (default 120)",
    )
    parser.add_argument(
        "--database-url", default=defaults.admin_url, help="a Postgres server (a scratch database is made)"
    )
    parser.add_argument("--log-dir", type=Path, help="keep the processes' logs here (default: discarded)")
    args = parser.parse_args(argv)
    options = SoakOptions(
        threads=args.threads,
        turns=args.turns,
        seconds=args.seconds,
        seed=args.seed,
        latency_ms=args.latency_ms,
        settle_seconds=args.settle_seconds,
        admin_url=args.database_url.replace("postgresql://", "postgresql+psycopg://"),
        log_dir=args.log_dir,
    )
    report = run_soak(options)
    json.dump(report, sys.stdout, indent=2, default=str)
    print()
    return 1 if report["violations_total"] else 0


if __name__ == "__main__":
    sys.exit(main())
