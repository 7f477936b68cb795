"""Event store benchmark: append throughput and read latency. Prints one JSON object.

    .venv/bin/python -m bench.store_bench [--database-url URL] [--quick]

``--database-url`` names a Postgres server (any database on it); the benchmark creates its own scratch
database there and drops it afterwards. SQLite figures (one writer) come from a temporary file.
Writers are concurrent appenders, each on its own connection: one process each, or threads sharing one
store (and its pool) in fewer processes; the report says which, and the writers' CPU time per append.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from om_core.adapters.store import SqlEventStore, create_event_store
from om_core.adapters.store.migrations import upgrade_to_head
from om_core.application.ports import ConcurrencyError
from om_core.domain.envelope import NewEvent, StateSnapshot
from testing.cpu import machine_busy_seconds
from testing.postgres import DEFAULT_SERVER, scratch_postgres

PAYLOAD_TEXT = "x" * 900  # with the other fields, about 1 KB of JSON per event


def event_data(i: int) -> dict[str, Any]:
    return {"seq": i, "role": "user", "tokens": 212, "content_hash": f"{i:064x}", "text": PAYLOAD_TEXT}


def snapshot(version: int) -> StateSnapshot:
    state = {
        "version": version,
        "message_tokens": version * 212,
        "observations": ["- 🔴 user prefers concise answers (2025-01-02)"] * 20,
        "buffered": [],
        "config": {"observation": {"messageTokens": 30000}, "reflection": {"observationTokens": 40000}},
    }
    return StateSnapshot(state=state, tenant="bench", thread_id="t", resource_id=None)


# --- appends -----------------------------------------------------------------------------------------------


def appender(
    store: SqlEventStore, per_tx: int, shared_streams: int, deadline: float, totals: list[tuple[int, int]]
) -> None:
    own = [f"bench/thread/{uuid.uuid4()}" for _ in range(20)]
    shared = [f"bench/shared/{i}" for i in range(shared_streams)]
    versions: dict[str, int] = {}
    appends = conflicts = 0
    while time.perf_counter() < deadline:
        stream = shared[appends % len(shared)] if shared else own[appends % len(own)]
        version = versions.get(stream, 0)
        batch = [NewEvent("MessageAppendedBench", event_data(version + i)) for i in range(per_tx)]
        try:
            store.append(stream, batch, version, snapshot=snapshot(version + per_tx))
        except ConcurrencyError as conflict:
            conflicts += 1
            versions[stream] = conflict.actual_version or 0
            continue
        versions[stream] = version + per_tx
        appends += 1
    totals.append((appends, conflicts))


def writer(
    url: str,
    threads: int,
    per_tx: int,
    shared_streams: int,
    seconds: float,
    start: Barrier,
    results: Any,
) -> None:
    """One writer process: ``threads`` appenders sharing one store (a pool of as many connections), as a
    threaded application server would; each appender waits for its append before starting the next."""
    store = create_event_store(url, pool_size=threads, max_overflow=0)
    totals: list[tuple[int, int]] = []
    start.wait()
    deadline = time.perf_counter() + seconds
    workers = [
        threading.Thread(target=appender, args=(store, per_tx, shared_streams, deadline, totals))
        for _ in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    store.close()
    results.put((sum(a for a, _ in totals), sum(c for _, c in totals)))


def append_throughput(
    url: str,
    writers: int,
    per_tx: int,
    seconds: float,
    shared_streams: int = 0,
    *,
    processes: int | None = None,
) -> dict[str, Any]:
    """``writers`` concurrent appenders (each on its own connection), spread over ``processes`` processes
    (one per writer by default). The writers' CPU time is reported per append: on 2 cores it competes with
    the server's, so a harness that burns more client CPU per append measures a lower figure."""
    processes = processes or writers
    if writers % processes:
        raise ValueError("writers must be a multiple of processes")
    context = mp.get_context("fork")
    start = context.Barrier(processes + 1)
    results = context.Queue()
    children = [
        context.Process(
            target=writer,
            args=(url, writers // processes, per_tx, shared_streams, seconds, start, results),
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_before = machine_busy_seconds()
    start.wait()
    began = time.perf_counter()
    totals = [results.get() for _ in children]
    elapsed = time.perf_counter() - began
    for child in children:
        child.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_after = machine_busy_seconds()
    appends = sum(a for a, _ in totals)
    conflicts = sum(c for _, c in totals)
    client_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    figures: dict[str, Any] = {
        "writers": writers,
        "processes": processes,
        "events_per_tx": per_tx,
        "appends_per_s": round(appends / elapsed),
        "events_per_s": round(appends * per_tx / elapsed),
        # CPU per append: the writer processes, and everything else on the machine (Postgres, and any other
        # load); the latter only when /proc/stat is there.
        "writer_cpu_ms_per_append": round(1000 * client_cpu / max(appends, 1), 3),
    }
    if busy_before is not None and busy_after is not None:
        other_cpu = busy_after - busy_before - client_cpu
        figures["other_cpu_ms_per_append"] = round(1000 * other_cpu / max(appends, 1), 3)
    if shared_streams:
        figures["shared_streams"] = shared_streams
        figures["conflicts_per_s"] = round(conflicts / elapsed)
    return figures


def baseline_writer(conninfo: str, seconds: float, start: Barrier, results: Any) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        start.wait()
        count = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            conn.execute("INSERT INTO bench_baseline (payload) VALUES (%s)", (PAYLOAD_TEXT,))
            count += 1
    results.put(count)


def baseline_inserts(url: str, writers: int, seconds: float) -> dict[str, Any]:
    """What this machine does right now with the simplest possible commit: one 1 KB row, plain psycopg.

    The ceiling any store append can approach; it moves with whatever else runs on the machine.
    """
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_baseline (id bigserial PRIMARY KEY, payload text)")
    context = mp.get_context("fork")
    start = context.Barrier(writers + 1)
    results = context.Queue()
    processes = [
        context.Process(target=baseline_writer, args=(conninfo, seconds, start, results))
        for _ in range(writers)
    ]
    for process in processes:
        process.start()
    start.wait()
    began = time.perf_counter()
    total = sum(results.get() for _ in processes)
    elapsed = time.perf_counter() - began
    for process in processes:
        process.join()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("DROP TABLE bench_baseline")
    return {"writers": writers, "inserts_per_s": round(total / elapsed)}


# --- reads -------------------------------------------------------------------------------------------------


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99_index = min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[p99_index] * 1000, 3),
        "samples": len(ordered),
    }


def timed(samples: int, operation: Any) -> dict[str, float]:
    operation()
    durations = []
    for _ in range(samples):
        began = time.perf_counter()
        operation()
        durations.append(time.perf_counter() - began)
    return percentiles(durations)


def fill_stream(store: SqlEventStore, stream: str, events: int) -> None:
    version = 0
    while version < events:
        n = min(1000, events - version)
        batch = [NewEvent("MessageAppendedBench", event_data(version + i)) for i in range(n)]
        store.append(stream, batch, version, snapshot=snapshot(version + n))
        version += n


def read_latency(url: str, sizes: list[int], quick: bool) -> dict[str, Any]:
    store = create_event_store(url)
    figures: dict[str, Any] = {}
    for size in sizes:
        stream = f"bench/read/{size}/{uuid.uuid4()}"
        fill_stream(store, stream, size)
        full_samples = 3 if size >= 100_000 else (10 if size >= 10_000 else 200)
        if quick:
            full_samples = max(3, full_samples // 4)
        figures[str(size)] = {
            "state_read": timed(300 if quick else 2000, lambda s=stream: store.load_snapshot(s)),
            "stream_read_last_100": timed(
                100 if quick else 500, lambda s=stream, n=size: store.read_stream(s, after_version=n - 100)
            ),
            "stream_read_full": timed(full_samples, lambda s=stream: store.read_stream(s)),
        }
    store.close()
    return figures


# --- databases ---------------------------------------------------------------------------------------------


def without_fsync_wait(url: str) -> str:
    """The same database with ``synchronous_commit=off`` for the sessions of this URL only."""
    return (
        make_url(url)
        .update_query_dict({"options": "-c synchronous_commit=off"})
        .render_as_string(hide_password=False)
    )


def postgres_settings(url: str) -> dict[str, str]:
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as conn:
        names = ("server_version", "synchronous_commit", "fsync", "shared_buffers", "wal_level")
        return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("OM_BENCH_DATABASE_URL", DEFAULT_SERVER))
    parser.add_argument("--quick", action="store_true", help="short runs and no 100,000-event stream")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else 8.0
    sizes = [100, 10_000] if args.quick else [100, 10_000, 100_000]

    report: dict[str, Any] = {
        "benchmark": "event_store",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "quick": args.quick,
        "event_bytes": len(json.dumps(event_data(0))),
        "snapshot_bytes": len(json.dumps(snapshot(0).state)),
    }
    with scratch_postgres(args.database_url, "om_bench") as url:
        report["postgres"] = {
            "settings": postgres_settings(url),
            "baseline_plain_insert": baseline_inserts(url, 16, seconds),
            "appends": [
                append_throughput(url, writers, per_tx, seconds) for writers in (1, 16) for per_tx in (1, 10)
            ]
            # The same 16 writers (16 connections, 16 appenders) as threads of fewer processes: 16 Python
            # processes on 2 cores spend more CPU per append than the server does.
            + [append_throughput(url, 16, per_tx, seconds, processes=1) for per_tx in (1, 10)]
            + [append_throughput(url, 16, 1, seconds, processes=2)]
            + [append_throughput(url, 16, 1, seconds, shared_streams=4, processes=1)]
            + [
                {
                    **append_throughput(without_fsync_wait(url), 16, 1, seconds, processes=1),
                    "synchronous_commit": "off (reference only: a crash can lose the last commits)",
                }
            ],
            "reads": read_latency(url, sizes, args.quick),
        }
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'bench.db'}"
        upgrade_to_head(url)
        report["sqlite"] = {
            "appends": [append_throughput(url, 1, per_tx, seconds) for per_tx in (1, 10)],
            "reads": read_latency(url, sizes, args.quick),
        }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
