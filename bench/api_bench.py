"""HTTP API benchmark: one turn = append a message + read the context, over HTTP against Postgres.

    .venv/bin/python -m bench.api_bench [--database-url URL] [--broker-url URL] [--turns 400]
                                        [--clients 1,32] [--markdown]

Runs the real server, ``om serve``, in a process of its own (as it is deployed: the clients are other
programs) over a scratch Postgres database created for the run and dropped afterwards. With the default
``--broker-url memory://`` model work runs on the server's in-process Celery worker (the embedded mode);
with a Redis URL it is published to Celery, and a worker must be running for it to happen (none is needed
for the turns themselves). Each client owns one thread and runs turns back to back: append the user message,
read the context (the assistant's reply is not part of the turn: a turn is what an agent does before its
model call). Prints one JSON object; with ``--markdown`` also prints the table that docs/benchmarks.md holds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from testing.postgres import DEFAULT_SERVER, scratch_postgres
from testing.processes import om_server

PROFILE = "model: om-local/extractive\n"  # Mastra's default budgets (30k / 40k)
KEY = "bench-key"


@contextmanager
def running_server(url: str, broker_url: str) -> Iterator[str]:
    """``om serve`` over ``url``, stopped (and its log shown on failure) afterwards."""
    with tempfile.TemporaryDirectory(prefix="om-api-bench-") as scratch:
        profile = Path(scratch) / "profile.yaml"
        profile.write_text(PROFILE)
        env = {
            **os.environ,
            "OM_DATABASE_URL": url,
            "OM_BROKER_URL": broker_url,
            "OM_API_KEYS": f"{KEY}=bench",
            "OM_PROFILE": str(profile),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        with om_server(["serve"], env, Path(scratch) / "server.log") as base:
            yield base


def client_run(base: str, turns: int, warmup: int, start: threading.Barrier, out: list[float]) -> None:
    thread = f"bench-{uuid.uuid4().hex[:10]}"
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        http.put(f"/v1/threads/{thread}", json={"resource_id": "bench"}).raise_for_status()
        start.wait()
        for i in range(turns + warmup):
            message = {
                "id": f"m{i}",
                "role": "user",
                "content": f"turn {i}: what should I cook with rice and eggs?",
            }
            began = time.perf_counter()
            http.post(f"/v1/threads/{thread}/messages", json={"messages": [message]}).raise_for_status()
            http.get(f"/v1/threads/{thread}/context").raise_for_status()
            elapsed = time.perf_counter() - began
            if i >= warmup:
                out.append(elapsed * 1000)


def measure(base: str, clients: int, turns: int) -> dict[str, Any]:
    samples: list[float] = []
    barrier = threading.Barrier(clients + 1)
    workers = [
        threading.Thread(target=client_run, args=(base, turns, 5, barrier, samples)) for _ in range(clients)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - began
    samples.sort()
    return {
        "clients": clients,
        "turns": len(samples),
        "p50_ms": round(statistics.median(samples), 2),
        "p90_ms": round(samples[int(len(samples) * 0.90) - 1], 2),
        "p99_ms": round(samples[int(len(samples) * 0.99) - 1], 2),
        "turns_per_s": round(len(samples) / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_SERVER, help="a Postgres server (any database)")
    parser.add_argument("--broker-url", default="memory://", help="memory:// (embedded worker) or redis://")
    parser.add_argument("--turns", type=int, default=400, help="turns per client (1 client)")
    parser.add_argument("--clients", default="1,32")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    server = args.database_url.replace("postgresql://", "postgresql+psycopg://")
    results = []
    with scratch_postgres(server, "om_api_bench") as url, running_server(url, args.broker_url) as base:
        for clients in (int(c) for c in args.clients.split(",")):
            per_client = args.turns if clients == 1 else max(20, args.turns // clients * 2)
            results.append(measure(base, clients, per_client))
    report = {
        "benchmark": "http_turn",
        "turn": "POST /messages (1 user message) + GET /context, over HTTP, Postgres, om serve (1 process)",
        "broker": args.broker_url,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "results": results,
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    if args.markdown:
        print("| clients | turns | p50 ms | p90 ms | p99 ms | turns/s |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in results:
            cells = [r["clients"], r["turns"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["turns_per_s"]]
            print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
