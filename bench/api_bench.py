"""HTTP API throughput: clients making turns back to back against the deployed processes. Prints JSON.

    .venv/bin/python -m bench.api_bench [--database-url URL] [--turns 400] [--clients 1,32]
                                        [--modes turn,two_requests] [--markdown]
    om bench api

What runs, as it is deployed: ``om serve`` and one ``om worker`` (prefork, concurrency 2) in processes of
their own, a scratch Postgres database created for the run and dropped afterwards, a private
``redis-server``; OM active with the profile of ``om bench turn`` (messageTokens 2,000, bufferTokens 0.2,
blockAfter 1.2, observationTokens 4,000, the local model ``om-local/extractive``), so the worker buffers and
the reads activate while the turns are measured. The clients are threads of this process (httpx, one
keep-alive connection each), each with a thread of its own driving the user messages of a generated
conversation, turns back to back. A turn stores the user's message and reads the context to send:

- ``turn``: ``POST /v1/threads/{id}/turn`` (one request);
- ``two_requests``: ``POST /v1/threads/{id}/messages`` and ``GET /v1/threads/{id}/context``.

Reported per mode and number of clients: latency p50/p90/p99, turns per second, and the CPU per turn of the
server, the worker and Postgres (read from ``/proc``; the clients' own is left out), with the load average
before and after.
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
from pathlib import Path
from typing import Any

import httpx

from bench.turn_bench import PROFILE, TENANT
from testing.cpu import CpuMeter, load_average
from testing.generator import generate
from testing.postgres import DEFAULT_SERVER, scratch_postgres
from testing.processes import deployment

KEY = "api-bench-key"
MODES = ("turn", "two_requests")


def client_run(
    base: str,
    mode: str,
    messages: list[dict[str, Any]],
    warmup: int,
    start: threading.Barrier,
    out: list[float],
) -> None:
    thread = f"bench-{uuid.uuid4().hex[:10]}"
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
        http.put(f"/v1/threads/{thread}", json={}).raise_for_status()
        start.wait()
        for index, message in enumerate(messages):
            message = {**message, "id": f"m{index}"}
            began = time.perf_counter()
            if mode == "turn":
                http.post(f"/v1/threads/{thread}/turn", json={"messages": [message]}).raise_for_status()
            else:
                http.post(f"/v1/threads/{thread}/messages", json={"messages": [message]}).raise_for_status()
                http.get(f"/v1/threads/{thread}/context").raise_for_status()
            elapsed = time.perf_counter() - began
            if index >= warmup:
                out.append(elapsed * 1000)


def measure(
    base: str, mode: str, clients: int, turns: int, user_messages: list[dict[str, Any]]
) -> dict[str, Any]:
    warmup = 5
    samples: list[float] = []
    barrier = threading.Barrier(clients + 1)
    # each client's own stretch of the conversation
    scripts = [
        [user_messages[(c * 97 + i) % len(user_messages)] for i in range(turns + warmup)]
        for c in range(clients)
    ]
    workers = [
        threading.Thread(target=client_run, args=(base, mode, scripts[c], warmup, barrier, samples))
        for c in range(clients)
    ]
    for worker in workers:
        worker.start()
    meter = CpuMeter()
    before = meter.snapshot()
    barrier.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - began
    spent = meter.since(before)
    samples.sort()
    # the warm-up turns are in the CPU and the wall time, not in the latencies
    all_turns = clients * (turns + warmup)
    return {
        "mode": mode,
        "clients": clients,
        "turns": len(samples),
        "p50_ms": round(statistics.median(samples), 2),
        "p90_ms": round(samples[int(len(samples) * 0.90) - 1], 2),
        "p99_ms": round(samples[int(len(samples) * 0.99) - 1], 2),
        "turns_per_s": round(all_turns / wall, 1),
        "cpu_ms_per_turn": {
            group: None if seconds is None else round(seconds * 1000 / all_turns, 2)
            for group, seconds in spent.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_SERVER, help="a Postgres server (any database)")
    parser.add_argument("--turns", type=int, default=400, help="turns per client (1 client)")
    parser.add_argument("--clients", default="1,32")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - set(MODES):
        parser.error(f"unknown modes: {', '.join(sorted(set(modes) - set(MODES)))}")
    server = args.database_url.replace("postgresql://", "postgresql+psycopg://")
    conversation = generate("help", 1000, messages=600)
    user_messages = [turn.user for turn in conversation.turns]
    report: dict[str, Any] = {
        "benchmark": "http_turns",
        "shape": "om serve + om worker (prefork, concurrency 2) + private redis-server, Postgres, OM active",
        "profile": PROFILE,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_start": load_average(),
        "results": [],
    }
    with tempfile.TemporaryDirectory(prefix="om-api-bench-") as tmp:
        scratch = Path(tmp)
        profile = scratch / "profile.json"
        profile.write_text(json.dumps(PROFILE))
        with (
            scratch_postgres(server, "om_api_bench") as url,
            deployment(url, profile, scratch, {KEY: TENANT}, worker="api-bench") as (base, _),
        ):
            for mode in modes:
                for clients in (int(c) for c in args.clients.split(",")):
                    # several seconds of load at any number of clients (about 3,200 turns at 32): shorter runs
                    # weigh the server's first requests (statements prepared per connection) too much
                    per_client = args.turns if clients == 1 else max(100, args.turns * 8 // clients)
                    report["results"].append(measure(base, mode, clients, per_client, user_messages))
    report["load_average_at_end"] = load_average()
    json.dump(report, sys.stdout, indent=2)
    print()
    if args.markdown:
        print("| mode | clients | turns | p50 ms | p90 ms | p99 ms | turns/s | CPU ms per turn |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for r in report["results"]:
            cpu = ", ".join(f"{g} {ms}" for g, ms in r["cpu_ms_per_turn"].items() if ms is not None)
            cells = [r["mode"], r["clients"], r["turns"], r["p50_ms"], r["p90_ms"], r["p99_ms"]]
            print("| " + " | ".join(str(c) for c in [*cells, r["turns_per_s"], cpu]) + " |")


if __name__ == "__main__":
    main()
