"""Context read beside a writer, by stream length (100, 10,000 and 100,000 events). Prints JSON.

``GET /v1/threads/{id}/context`` latency while another client appends to the same thread.

    .venv/bin/python -m bench.read_bench [--database-url URL] [--sizes 100,10000,100000] [--reads 240]
                                         [--seed 1] [--quick] [--markdown]
    om bench read --quick

What runs, for each size in a scratch Postgres database of its own: one thread seeded in this process
through the real use case (``append_messages`` on ``build_inline``, whose inline executor runs every buffered
observation and reflection the appends ask for) from a seeded synthetic conversation, in batches of 1–10
turns; OM is active (the local model ``om-local/extractive``, messageTokens 2,000, observationTokens 4,000,
default buffering). Then ``om serve`` and one ``om worker`` (concurrency 2), processes of their own, on a
private ``redis-server``, and over HTTP with an API key: a writer appends one message every 100–300 ms, and
the worker observes and reflects as the thresholds say, while a reader reads the context in groups of 1–8
back-to-back reads after pauses of 0.5–2 s.

Reported per size: events in the stream; read latency of all reads, of the first read after a pause and of the
back-to-back ones, and split by where the server found the state: a read of a version the worker committed
(another process, so the server's state cache was stale and it read the record row and the window from the
database: the read a concurrent commit could once turn into a fold of the whole stream) or one the cache held;
the writes done meanwhile and the events they caused; what ``om_state_replays_total`` (reads that folded a
stream from its events) and ``om_appends_total`` counted on the server and on the worker; and ``EXPLAIN
ANALYZE`` of the store's snapshot statement at the end (how many message rows it visits for the window) and
the latency of ``load_state`` without a cache once the processes have stopped.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import platform
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from om_api.demo.conversation import Turn, synthetic_conversation
from om_core.adapters.store import SqlEventStore, create_event_store
from om_core.adapters.store.postgres import _POSTGRES_SNAPSHOT_SQL
from om_core.adapters.store.schema import events
from om_core.application.append import append_messages, configure_thread
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from om_core.settings import read_profile
from testing.postgres import scratch_postgres
from testing.processes import deployment

DEFAULT_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
PROFILE = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 2000},
    "reflection": {"observationTokens": 4000},
}
TENANT = "bench"
KEY = "read-bench-key"
WRITE_PAUSE_S = (0.1, 0.3)
READ_PAUSE_S = (0.5, 2.0)
READ_GROUP = (1, 8)


def conversation(turns: int, seed: int, end: datetime) -> Iterator[Turn]:
    """``synthetic_conversation`` with its clock moved so that its last answer is at ``end``: the seeded
    history lies in the past of the writer's messages, which the server stamps on arrival."""
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    (last,) = collections.deque(synthetic_conversation(turns, seed=seed, start=origin), maxlen=1)
    span = datetime.fromisoformat(last.assistant["createdAt"]) - origin
    return synthetic_conversation(turns, seed=seed, start=end - span)


def event_counts(store: SqlEventStore, stream_id: str, after_version: int = 0) -> dict[str, int]:
    query = (
        sa.select(events.c.event_type, sa.func.count())
        .where(events.c.stream_id == stream_id, events.c.stream_version > after_version)
        .group_by(events.c.event_type)
        .order_by(sa.func.count().desc())
    )
    with store.engine.connect() as conn:
        return {str(kind): int(count) for kind, count in conn.execute(query)}


def seed_thread(
    database_url: str, profile: dict[str, Any], thread: str, target: int, seed: int
) -> dict[str, Any]:
    """Append turns until the thread's stream holds at least ``target`` events (every turn is two
    messages, so the turns below always suffice)."""
    deps, dispatcher = build_inline(database_url=database_url, profile=profile, migrate=False)
    store = deps.store
    assert isinstance(store, SqlEventStore)
    rng = random.Random(seed)
    stream_id = thread_stream_id(TENANT, thread)
    began = time.perf_counter()
    try:
        configure_thread(deps, tenant=TENANT, thread_id=thread, resource_id="bench")
        turns = conversation(target // 2 + 1, seed, datetime.now(UTC) - timedelta(hours=1))
        version, messages, appends = store.stream_version(stream_id), 0, 0
        while version < target:
            batch = [
                message
                for turn in islice(turns, rng.randint(1, max(1, min(10, (target - version) // 3))))
                for message in (turn.user, turn.assistant)
            ]
            append_messages(deps, tenant=TENANT, thread_id=thread, messages=batch)
            messages, appends = messages + len(batch), appends + 1
            # the observations and reflections the append asked for have run (inline) by now
            version = store.stream_version(stream_id)
        seconds = time.perf_counter() - began
        return {
            "events": version,
            "messages": messages,
            "appends": appends,
            "seconds": round(seconds, 1),
            "events_per_s": round(version / seconds),
            "event_types": event_counts(store, stream_id),
        }
    finally:
        dispatcher.close()
        store.close()


def distribution(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}

    def rank(q: float) -> float:
        return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 2)

    return {
        "n": len(ordered),
        "p50_ms": rank(0.50),
        "p90_ms": rank(0.90),
        "p99_ms": rank(0.99),
        "max_ms": round(ordered[-1], 2),
    }


def engine_counters(metrics_url: str) -> dict[str, float]:
    """From a /metrics page: ``om_state_replays_total`` by reason, and ``om_appends_total`` summed (it shows
    the page counts that process's work: a counter that never counted has no sample at all)."""
    text = httpx.get(metrics_url, timeout=10).raise_for_status().text
    found: dict[str, float] = collections.defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "om_state_replays_total":
                found[f"replays:{sample.labels['reason']}"] += sample.value
            elif sample.name == "om_appends_total":
                found["appends"] += sample.value
    return found


def counted(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """What a process counted between two scrapes: its replays by reason ({} for none), its appends."""
    grown = {key: value - before.get(key, 0.0) for key, value in after.items()}
    return {
        "state_replays": {k.split(":", 1)[1]: v for k, v in grown.items() if k.startswith("replays:") and v},
        "appends": grown.get("appends", 0.0),
    }


@dataclass
class Writes:
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    latency_ms: list[float] = field(default_factory=list)
    # the stream versions the writer's appends committed: the server's state cache holds each of them
    versions: set[int] = field(default_factory=set)


def write_loop(base: str, thread: str, seed: int, stop: threading.Event, out: Writes) -> None:
    """One message per append, user and assistant in turn, at an agent's pace, stamped by the server."""
    rng = random.Random(seed)
    turns = synthetic_conversation(100_000, seed=seed)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        index = 0
        while not stop.wait(rng.uniform(*WRITE_PAUSE_S)):
            turn = next(turns)
            message = dict(turn.user if index % 2 == 0 else turn.assistant, id=f"w{index}")
            del message["createdAt"]
            began = time.perf_counter()
            response = http.post(f"/v1/threads/{thread}/messages", json={"messages": [message]})
            out.latency_ms.append((time.perf_counter() - began) * 1000)
            out.statuses[response.status_code] += 1
            if response.status_code == 200:
                out.versions.add(response.json()["version"])
            index += 1


@dataclass
class Read:
    ms: float
    after_pause: bool
    version: int
    messages: int
    body_bytes: int
    caused_work: bool


def read_context(http: httpx.Client, thread: str, after_pause: bool) -> Read:
    began = time.perf_counter()
    response = http.get(f"/v1/threads/{thread}/context")
    elapsed = (time.perf_counter() - began) * 1000
    response.raise_for_status()
    body = response.json()
    # the status part is always there; anything more is work this read committed (an activation, a
    # synchronous observation it waited for)
    caused_work = len(body["parts"]) > 1
    return Read(
        elapsed, after_pause, body["version"], len(body["messages"]), len(response.content), caused_work
    )


def from_database(reads: list[Read], first: Read, written: set[int]) -> list[bool]:
    """Which reads the server answered from the database rather than from its state cache, as far as the
    client can tell: those of a version the worker committed (the writer's commits and earlier reads fill
    the cache; a commit from another process makes it stale)."""
    previous, found = first.version, []
    for read in reads:
        found.append(read.version not in written and read.version != previous)
        previous = read.version
    return found


def window_read_plan(store: SqlEventStore, stream_id: str) -> dict[str, Any]:
    """``EXPLAIN ANALYZE`` of the store's snapshot statement (the record row and the window's messages): how
    it reaches the message rows and how many it visits to find the window's."""
    with contextlib.closing(store.engine.raw_connection()) as conn:
        cursor = conn.cursor()
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + _POSTGRES_SNAPSHOT_SQL, (None, None, None, stream_id)
        )
        row = cursor.fetchone()
        conn.rollback()
    assert row is not None
    document = row[0]
    plan = (document if isinstance(document, list) else json.loads(document))[0]
    scans: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        if node.get("Relation Name") == "om_messages":
            scans.append(node)
        for child in node.get("Plans", ()):
            walk(child)

    def index_of(node: dict[str, Any]) -> str:
        # a bitmap heap scan names its index in the bitmap index scan under it
        if "Index Name" in node:
            return str(node["Index Name"])
        return next((index_of(child) for child in node.get("Plans", ())), "no index")

    walk(plan["Plan"])
    return {
        "om_messages_access": [f"{n['Node Type']} on {index_of(n)}" for n in scans],
        "rows_returned": sum(int(n["Actual Rows"]) for n in scans),
        "rows_filtered_out": sum(int(n.get("Rows Removed by Filter", 0)) for n in scans),
        "execution_ms": round(float(plan["Execution Time"]), 2),
    }


def uncached_reads(store: SqlEventStore, stream_id: str, count: int = 50) -> dict[str, float]:
    """``load_state`` with no cache, ``count`` times: how the server reads a state another process committed
    (the record row and the window's messages, in one statement), without HTTP or a concurrent writer."""
    samples = []
    for _ in range(count):
        began = time.perf_counter()
        load_state(store, store, stream_id)
        samples.append((time.perf_counter() - began) * 1000)
    return distribution(samples)


def measure(
    base: str, worker_metrics: str, store: SqlEventStore, thread: str, reads: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    stream_id = thread_stream_id(TENANT, thread)
    writes, stop = Writes(), threading.Event()
    writer = threading.Thread(target=write_loop, args=(base, thread, seed + 1, stop, writes))
    samples: list[Read] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        # the server has never read this thread: its first read fills the state cache
        first = read_context(http, thread, after_pause=True)
        server_before, worker_before = engine_counters(f"{base}/metrics"), engine_counters(worker_metrics)
        start_version = store.stream_version(stream_id)
        began = time.perf_counter()
        writer.start()
        try:
            while len(samples) < reads:
                time.sleep(rng.uniform(*READ_PAUSE_S))
                for j in range(min(rng.randint(*READ_GROUP), reads - len(samples))):
                    samples.append(read_context(http, thread, after_pause=j == 0))
        finally:
            stop.set()
            writer.join()
        seconds = time.perf_counter() - began
        server_after = engine_counters(f"{base}/metrics")
    worker_after = engine_counters(worker_metrics)
    uncached = from_database(samples, first, writes.versions)
    return {
        "events_in_stream": start_version,
        "events_at_end": store.stream_version(stream_id),
        "first_read_ms": round(first.ms, 2),
        "reads": distribution([r.ms for r in samples]),
        "reads_after_pause": distribution([r.ms for r in samples if r.after_pause]),
        "reads_back_to_back": distribution([r.ms for r in samples if not r.after_pause]),
        "reads_after_worker_commit": distribution(
            [r.ms for r, db in zip(samples, uncached, strict=True) if db]
        ),
        "reads_from_cache": distribution([r.ms for r, db in zip(samples, uncached, strict=True) if not db]),
        "reads_that_committed_work": sum(r.caused_work for r in samples),
        "window_messages_max": max(r.messages for r in samples),
        "answer_kb_max": round(max(r.body_bytes for r in samples) / 1024, 1),
        "writes": sum(writes.statuses.values()),
        "write_statuses": {str(k): v for k, v in sorted(writes.statuses.items())},
        "write_ms": distribution(writes.latency_ms),
        "events_written_meanwhile": event_counts(store, stream_id, start_version),
        "seconds": round(seconds, 1),
        "counted": {
            "server": counted(server_before, server_after),
            "worker": counted(worker_before, worker_after),
        },
        "window_read_plan": window_read_plan(store, stream_id),
    }


def run_size(admin_url: str, size: int, reads: int, seed: int) -> dict[str, Any]:
    """One size in a database of its own: seed its thread, then measure beside a writer."""
    thread = f"read-{size}"
    with (
        tempfile.TemporaryDirectory(prefix="om-read-bench-") as tmp,
        scratch_postgres(admin_url, "om_read_bench") as url,
    ):
        scratch = Path(tmp)
        profile_path = scratch / "profile.json"
        profile_path.write_text(json.dumps(PROFILE))
        seeded = seed_thread(url, read_profile(profile_path), thread, size, seed + size)
        store = create_event_store(url)
        try:
            with deployment(url, profile_path, scratch, {KEY: TENANT}, worker="read-bench") as (
                base,
                worker_metrics,
            ):
                result = measure(base, worker_metrics, store, thread, reads, seed)
            # once the processes have stopped, so that nothing else runs beside it
            result["state_reads_without_cache"] = uncached_reads(store, thread_stream_id(TENANT, thread))
        finally:
            store.close()
        logs = {
            "server_log_tracebacks": (scratch / "server.log").read_text(errors="replace").count("Traceback"),
            "worker_log_tracebacks": (scratch / "read-bench.log")
            .read_text(errors="replace")
            .count("Traceback"),
        }
    return {"size": size, "seeded": seeded, **result, **logs}


def run(admin_url: str, sizes: list[int], reads: int, seed: int) -> dict[str, Any]:
    load_before = os.getloadavg()
    began = time.perf_counter()
    results = [run_size(admin_url, size, reads, seed) for size in sizes]
    return {
        "benchmark": "context_read_beside_writer",
        "shape": (
            "per size, a scratch Postgres database of its own: one thread seeded in-process through "
            "append_messages (inline executor), then om serve + 1 om worker (concurrency 2, prefork) on a "
            "private redis-server, one HTTP writer (1 message every 100-300 ms) and one HTTP reader "
            "(groups of 1-8 back-to-back reads after 0.5-2 s pauses) on that thread"
        ),
        "profile": PROFILE,
        "reads_per_size": reads,
        "seed": seed,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "seeding_seconds": round(sum(r["seeded"]["seconds"] for r in results), 1),
        "elapsed_seconds": round(time.perf_counter() - began, 1),
        "results": results,
    }


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "| events in stream | reads | p50 ms | p90 ms | p99 ms | max ms | after a pause p50 / p99 ms "
        "| back-to-back p50 / p99 ms | after a worker commit: n, p50 / p99 ms | from the cache p50 / p99 ms "
        "| writes meanwhile | replays (server / worker) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        reads, paused, packed = r["reads"], r["reads_after_pause"], r["reads_back_to_back"]
        stale, cached = r["reads_after_worker_commit"], r["reads_from_cache"]
        replayed = [f"{sum(r['counted'][side]['state_replays'].values()):g}" for side in ("server", "worker")]
        cells = [
            f"{r['events_in_stream']:,}",
            reads["n"],
            reads["p50_ms"],
            reads["p90_ms"],
            reads["p99_ms"],
            reads["max_ms"],
            f"{paused['p50_ms']} / {paused['p99_ms']}",
            f"{packed['p50_ms']} / {packed['p99_ms']}",
            f"{stale['n']}: {stale['p50_ms']} / {stale['p99_ms']}" if stale["n"] else "0",
            f"{cached['p50_ms']} / {cached['p99_ms']}",
            r["writes"],
            " / ".join(replayed),
        ]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    rows += [
        "",
        "| events in stream | messages seeded | state read without the cache p50 / p99 ms "
        "| snapshot statement: om_messages access | message rows visited / in the window | statement ms |",
        "|---:|---:|---:|---|---:|---:|",
    ]
    for r in report["results"]:
        plan, uncached = r["window_read_plan"], r["state_reads_without_cache"]
        cells = [
            f"{r['events_in_stream']:,}",
            f"{r['seeded']['messages']:,}",
            f"{uncached['p50_ms']} / {uncached['p99_ms']}",
            ", ".join(plan["om_messages_access"]),
            f"{plan['rows_returned'] + plan['rows_filtered_out']:,} / {plan['rows_returned']}",
            plan["execution_ms"],
        ]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_SERVER, help="a Postgres server (any database)")
    parser.add_argument("--sizes", default="100,10000,100000", help="events in each thread's stream")
    parser.add_argument("--reads", type=int, default=240, help="context reads per size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 2,000, 60 reads each")
    parser.add_argument("--markdown", action="store_true", help="also print the table of docs/benchmarks.md")
    args = parser.parse_args()
    sizes = [100, 2000] if args.quick else [int(s) for s in args.sizes.split(",")]
    reads = 60 if args.quick else args.reads
    server = args.database_url.replace("postgresql://", "postgresql+psycopg://")
    report = run(server, sizes, reads, args.seed)
    json.dump(report, sys.stdout, indent=2)
    print()
    if args.markdown:
        print(markdown(report))


if __name__ == "__main__":
    main()
