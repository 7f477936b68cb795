"""Workers benchmark: trigger-to-task-start latency, buffer throughput with 1 and 2 worker processes, and the
share of context reads below blockAfter that waited for a model. Prints JSON.

Real Postgres (a scratch database), real Redis, real ``celery worker`` processes, the local model.

    .venv/bin/python -m bench.workers_bench [--streams 40] [--latency-ms 200]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import redis
import sqlalchemy as sa

from om_core.application.append import append_messages, configure_thread
from om_core.application.configuration import record_config
from om_core.application.context import get_context
from om_core.application.deps import Deps
from om_core.application.ports import WorkDispatcher
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.domain.envelope import TaskRequest
from om_core.domain.policy import resolve_limits
from om_core.settings import ServerSettings
from om_workers.app import create_app
from om_workers.bootstrap import build_worker_deps
from om_workers.relay import relay_outbox
from om_workers.settings import WorkerSettings
from testing.conversations import filler_message as message
from testing.conversations import memory_profile
from testing.postgres import scratch_postgres
from testing.processes import process_env, wait_for, worker_process
from testing.store import engine_of

REDIS_URL = os.environ.get("OM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
TENANT = "bench"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Setup:
    def __init__(self, database_url: str, tmp: Path, latency_ms: int) -> None:
        self.tmp = tmp
        path = tmp / f"profile-{latency_ms}.json"
        path.write_text(json.dumps(memory_profile(latency_ms)))
        self.env = process_env(
            database_url=database_url,
            broker_url=REDIS_URL,
            profile=path,
            extra={"OM_WORKER_RESTORE_INTERVAL": "1"},
        )
        settings = ServerSettings(database_url=database_url, broker_url=REDIS_URL, profile=path)
        self.deps: Deps = build_worker_deps(create_app(settings, WorkerSettings()), settings)

    def request_buffer(self, thread: str) -> None:
        """Append turns to a fresh thread until a background observation is requested."""
        configure_thread(self.deps, tenant=TENANT, thread_id=thread, resource_id="r")
        for index in range(60):
            outcome = append_messages(
                self.deps, tenant=TENANT, thread_id=thread, messages=[message(thread, index)]
            )
            if any(type(e).__name__ == "ObservationBufferRequested" for e in outcome.events):
                return
        raise RuntimeError("no buffer requested")

    def completed(self, threads: list[str]) -> int:
        engine = engine_of(self.deps)
        with engine.connect() as conn:
            return int(
                conn.scalar(
                    sa.text(
                        "SELECT count(*) FROM om_events WHERE event_type = 'ObservationBufferCompleted'"
                        " AND stream_id = ANY(:streams)"
                    ),
                    {"streams": [thread_stream_id(TENANT, t) for t in threads]},
                )
                or 0
            )

    def recorded(self, thread: str, event_type: str) -> list[Any]:
        events = self.deps.store.read_stream(thread_stream_id(TENANT, thread))
        return [e for e in events if e.event_type == event_type]


def trigger_latency(setup: Setup, samples: int) -> dict[str, float]:
    """From the commit that requested a buffer to the worker's ObservationBufferStarted (database clock)."""
    worker = worker_process(f"lat-{uuid.uuid4().hex[:6]}", setup.env, setup.tmp, concurrency=1).start()
    try:
        latencies = []
        for _ in range(samples):
            thread = f"lat-{uuid.uuid4().hex[:8]}"
            setup.request_buffer(thread)
            started = wait_for(lambda t=thread: setup.recorded(t, "ObservationBufferStarted"), 30, 0.01)
            requested = setup.recorded(thread, "ObservationBufferRequested")[0]
            latencies.append((started[0].recorded_at - requested.recorded_at).total_seconds() * 1000)
            wait_for(lambda t=thread: setup.recorded(t, "ObservationBufferCompleted"), 30, 0.01)
        return {
            "samples": samples,
            "p50_ms": round(percentile(latencies, 0.5), 2),
            "p99_ms": round(percentile(latencies, 0.99), 2),
            "max_ms": round(max(latencies), 2),
        }
    finally:
        worker.stop()


class _Hold(WorkDispatcher):
    """Leaves every request in the outbox, so the whole batch can be released at once."""

    def dispatch(self, tasks: Sequence[TaskRequest]) -> None:
        return None


def throughput(setup: Setup, streams: int, processes: int) -> dict[str, float]:
    """Buffer tasks completed per second, steady state: a warm-up round first (one connection pool and
    statement cache per child), then the measured requests wait in the outbox until the relay publishes
    them all at once."""
    workers = [
        worker_process(f"tp{processes}-{i}-{uuid.uuid4().hex[:4]}", setup.env, setup.tmp, concurrency=1)
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    publisher = setup.deps.dispatcher
    app = publisher.app  # type: ignore[attr-defined]

    def held_requests(count: int, tag: str) -> list[str]:
        threads = [f"tp{processes}{tag}-{uuid.uuid4().hex[:8]}" for _ in range(count)]
        setup.deps.dispatcher = _Hold()
        try:
            for thread in threads:
                setup.request_buffer(thread)
        finally:
            setup.deps.dispatcher = publisher
        return threads

    try:
        warm = held_requests(processes * 2, "w")
        relay_outbox(app, setup.deps.outbox, older_than_seconds=0)
        wait_for(lambda: setup.completed(warm) == len(warm), 120, 0.05)
        threads = held_requests(streams, "m")
        released = time.monotonic()
        relay_outbox(app, setup.deps.outbox, older_than_seconds=0)
        # one cheap query per poll: the benchmark must not steal the CPU the workers are measured on
        wait_for(lambda: setup.completed(threads) == len(threads), 300, 0.05)
        elapsed = time.monotonic() - released
        return {
            "processes": processes,
            "tasks": streams,
            "seconds": round(elapsed, 3),
            "tasks_per_s": round(streams / elapsed, 2),
        }
    finally:
        for worker in workers:
            worker.stop()


def read_waits(setup: Setup, seconds: float) -> dict[str, float]:
    """A fast stream under a slow model: how many reads below blockAfter waited for a model call."""
    worker = worker_process(f"reads-{uuid.uuid4().hex[:6]}", setup.env, setup.tmp, concurrency=2).start()
    setup.deps.sync_wait_seconds = 15
    thread = f"reads-{uuid.uuid4().hex[:8]}"
    configure_thread(setup.deps, tenant=TENANT, thread_id=thread, resource_id="r")
    stream = thread_stream_id(TENANT, thread)
    below = waited_below = above = over_returned = 0
    durations_below: list[float] = []
    try:
        stop_at = time.monotonic() + seconds
        index = 0
        while time.monotonic() < stop_at:
            append_messages(setup.deps, tenant=TENANT, thread_id=thread, messages=[message(thread, index)])
            state = load_state(setup.deps.records, setup.deps.store, stream)
            limits = resolve_limits(record_config(setup.deps.profile, state), state)
            assert limits.block_after is not None
            started = time.monotonic()
            window = get_context(setup.deps, tenant=TENANT, thread_id=thread)
            took = time.monotonic() - started
            if state.pending_tokens < limits.block_after:
                below += 1
                durations_below.append(took * 1000)
                waited_below += took >= 1.0  # the model takes 2 s a call
            else:
                above += 1
            over_returned += window.pending_tokens >= limits.block_after
            append_messages(
                setup.deps,
                tenant=TENANT,
                thread_id=thread,
                messages=[message(thread, index, "assistant", 10) | {"id": f"{thread}-assistant-{index}"}],
            )
            index += 1
            time.sleep(0.02)
    finally:
        worker.stop()
    return {
        "reads": below + above,
        "reads_below_block_after": below,
        "reads_at_or_over_block_after": above,
        "share_waiting_below_block_after": round(waited_below / max(below, 1), 4),
        "reads_returned_over_block_after": over_returned,
        "read_below_p99_ms": round(percentile(durations_below, 0.99), 2) if durations_below else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--latency-samples", type=int, default=30)
    parser.add_argument("--read-seconds", type=float, default=25)
    args = parser.parse_args()
    redis.Redis.from_url(REDIS_URL).flushdb()
    with tempfile.TemporaryDirectory() as tmp, scratch_postgres(prefix="om_bench") as url:
        fast = Setup(url, Path(tmp), 0)
        slow_tp = Setup(url, Path(tmp), args.latency_ms)
        slow_reads = Setup(url, Path(tmp), 2000)
        latency = trigger_latency(fast, args.latency_samples)
        one = throughput(slow_tp, args.streams, 1)
        two = throughput(slow_tp, args.streams, 2)
        reads = read_waits(slow_reads, args.read_seconds)
    print(
        json.dumps(
            {
                "trigger_to_task_start": latency,
                "buffer_throughput": {
                    "model_latency_ms": args.latency_ms,
                    "one_process": one,
                    "two_processes": two,
                    "speedup": round(two["tasks_per_s"] / one["tasks_per_s"], 2),
                },
                "context_reads_slow_model": reads,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
