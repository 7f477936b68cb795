"""A real neural model behind om: SmolLM2-135M-Instruct on a loopback llama.cpp server (xllamacpp), as the
Observer and Reflector of a deployed ``om serve`` + ``om worker``, reached through litellm as
``openai/<alias>`` with ``modelSettings.apiBase``, the configuration any OpenAI-compatible server takes.

``scripts/real-model.sh`` installs the server (the ``real-model`` extra) and the model file, and sets
``OM_REAL_MODEL_GGUF``. ``python -m testing.real_model`` serves the model until it is stopped.

``run_conversation`` drives a conversation through the deployment and reads back every cycle the events
recorded: what the real-model test checks and ``om bench real-model`` reports.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from testing.processes import deployment, free_port, wait_for

ALIAS = "smollm2"
GGUF_VARIABLE = "OM_REAL_MODEL_GGUF"
TENANT = "real"
KEY = "real-model-key"
# the model was trained on 8k tokens; the Observer's instructions take about 1,300 of them (its tokenizer)
# and a cycle's whole prompt 2-2.5k, so a backlog that failed cycles leave behind still fits
CONTEXT_TOKENS = 8192
# llama.cpp's threads wait on each other: on a machine busy with other work, fewer of them run faster
THREADS_VARIABLE = "OM_REAL_MODEL_THREADS"
# an Observer task makes up to two calls, each retried once, of tens of seconds on a small CPU: the
# worker's default limits (240 s soft, 300 s hard) would kill one that a busy machine slows down
WORKER_ENV = {
    "OM_WORKER_SOFT_TIME_LIMIT": "840",
    "OM_WORKER_TIME_LIMIT": "900",
    "OM_WORKER_VISIBILITY_TIMEOUT": "1800",
    "OM_WORKER_STUCK_AFTER": "1200",
}

# every event that opens a cycle, and those that close one, by stored event type
_OPENS = {
    "ObservationBufferRequested": "buffer",
    "SyncObservationStarted": "sync",
    "ReflectionRequested": "reflect",
}
_CLOSES = {
    "ObservationBufferCompleted": "committed",
    "SyncObservationCompleted": "committed",
    "ReflectionBuffered": "committed",
    "ReflectionCompleted": "committed",
    "ObservationBufferFailed": "failed",
    "SyncObservationFailed": "failed",
    "ReflectionFailed": "failed",
    "ObservationBufferStale": "stale",
    "SyncObservationStale": "stale",
    "ReflectionStale": "stale",
}


def default_threads() -> int:
    """``OM_REAL_MODEL_THREADS``, else every core but one: the one left is for the om processes and
    Postgres the model's answers go through, whose threads would otherwise stall llama.cpp's."""
    return int(os.environ.get(THREADS_VARIABLE, "0")) or max(1, (os.cpu_count() or 2) - 1)


def gguf_path() -> Path | None:
    """The model file scripts/real-model.sh installed, None when it is not there."""
    value = os.environ.get(GGUF_VARIABLE, "")
    return Path(value) if value and Path(value).is_file() else None


def profile(api_base: str, *, message_tokens: int = 1200, observation_tokens: int = 700) -> dict[str, Any]:
    """Memory options pointing both roles at the server; thresholds small enough for a short conversation
    to observe several times and reflect, and answers bounded so a looping model stops."""

    def settings(max_output: int) -> dict[str, Any]:
        return {"apiBase": api_base, "maxOutputTokens": max_output}

    return {
        "model": f"openai/{ALIAS}",
        "failurePolicy": "continue",
        "observation": {
            "messageTokens": message_tokens,
            "bufferTokens": 0.5,
            "modelSettings": settings(256),
        },
        "reflection": {"observationTokens": observation_tokens, "modelSettings": settings(384)},
    }


def serve(gguf: Path, port: int, threads: int) -> None:
    """The model on ``127.0.0.1:port`` until SIGTERM or SIGINT."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(gguf)
    params.model_alias = {ALIAS}
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = CONTEXT_TOKENS
    params.n_parallel = 1
    # llama.cpp keeps 8 GiB of prompts for reuse by default
    params.cache_ram_mib = 256
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(params)
    try:
        stop.wait()
    finally:
        del server


@contextlib.contextmanager
def llama_server(log_path: Path, gguf: Path, *, threads: int | None = None) -> Iterator[str]:
    """The model served by a process of its own; yields its OpenAI-compatible base URL (``…/v1``)."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testing.real_model",
                "--gguf",
                str(gguf),
                "--port",
                str(port),
                "--threads",
                str(threads or default_threads()),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"the model server exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            return httpx.get(f"{base}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, 120, 0.2, what="the model server")
        yield f"{base}/v1"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Cycle:
    """One Observer or Reflector cycle as the events recorded it."""

    cycle_id: str
    kind: str
    end: str | None = None
    from_seq: int | None = None
    to_seq: int | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    duration_ms: float | None = None
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    def report(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != {}}


@dataclass
class Run:
    """A conversation driven through the deployment, and what its events say."""

    messages: int
    seqs: list[int]
    cycles: list[Cycle]
    observation_tokens: int
    message_tokens_observed: int
    seconds: float
    log_tracebacks: int
    overlaps: list[tuple[str, str]]

    @property
    def verdicts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for cycle in self.cycles:
            for verdict in cycle.usage.get("verdicts", []):
                counts[verdict] = counts.get(verdict, 0) + 1
        return counts


def _cycles(events: Sequence[Any]) -> list[Cycle]:
    cycles: dict[str, Cycle] = {}
    discarded: set[str] = set()
    for event in events:
        data = event.data
        # a synchronous observation that takes over buffered chunks observes their messages again
        discarded.update(
            data.get("discarded_chunks", []) if event.event_type == "SyncObservationStarted" else []
        )
        if event.event_type in _OPENS:
            cycle = cycles.setdefault(data["cycle_id"], Cycle(data["cycle_id"], _OPENS[event.event_type]))
            cycle.input_tokens = data.get("message_tokens", data.get("input_tokens"))
        elif event.event_type in _CLOSES and data["cycle_id"] in cycles:
            cycle = cycles[data["cycle_id"]]
            cycle.end = _CLOSES[event.event_type]
            cycle.usage = data.get("usage") or {}
            cycle.duration_ms = data.get("duration_ms")
            cycle.error = data.get("error") or data.get("reason")
            cycle.from_seq, cycle.to_seq = data.get("from_seq"), data.get("to_seq")
            cycle.output_tokens = data.get("observation_tokens", data.get("tokens"))
    for cycle_id in discarded & cycles.keys():
        cycles[cycle_id].end = "discarded"
    return list(cycles.values())


def _overlaps(cycles: Sequence[Cycle]) -> list[tuple[str, str]]:
    """Pairs of committed observation cycles that observed a message twice."""
    spans = sorted(
        (c.from_seq, c.to_seq, c.cycle_id)
        for c in cycles
        if c.kind != "reflect" and c.end == "committed" and c.from_seq is not None and c.to_seq is not None
    )
    return [(a[2], b[2]) for a, b in itertools.pairwise(spans) if b[0] <= a[1]]


def _open(cycles: Sequence[Cycle]) -> int:
    return sum(1 for cycle in cycles if cycle.end is None)


def run_conversation(
    database_url: str, api_base: str, messages: Sequence[dict[str, Any]], scratch: Path, *, settle_s: float
) -> Run:
    """``messages`` appended one by one through ``om serve`` (one ``om worker`` observing), then one
    context read; returns once no cycle is open (or after ``settle_s`` more seconds). A message waits for
    the open cycles to end, as an agent's next turn waits for its own (slower) model: appended all at
    once, the messages would all pass while the first cycle runs, and one cycle would see them all."""
    from om_core.adapters.store import create_event_store
    from om_core.application.streams import thread_stream_id

    profile_path = scratch / "profile.json"
    profile_path.write_text(json.dumps(profile(api_base)))
    thread = "real-model"
    store = create_event_store(database_url)
    stream = thread_stream_id(TENANT, thread)
    began = time.monotonic()
    try:
        with (
            deployment(
                database_url, profile_path, scratch, {KEY: TENANT}, worker="real-model", extra_env=WORKER_ENV
            ) as (base, _),
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as http,
        ):
            http.put(f"/v1/threads/{thread}", json={}).raise_for_status()

            def settled() -> bool:
                return _open(_cycles(store.read_stream(stream))) == 0

            for message in messages:
                wait_for(settled, settle_s, 0.5, what="the open cycles to end")
                http.post(f"/v1/threads/{thread}/messages", json={"messages": [message]}).raise_for_status()

            wait_for(settled, settle_s, 1.0, what="every cycle to end")
            # a read activates what was buffered and may observe or reflect synchronously
            http.get(f"/v1/threads/{thread}/context").raise_for_status()
            wait_for(settled, settle_s, 1.0, what="every cycle to end")
        seconds = time.monotonic() - began
        events = store.read_stream(stream)
    finally:
        store.close()
    cycles = _cycles(events)
    appended = [e.data["seq"] for e in events if e.event_type == "MessageAppended"]
    observed = [c for c in cycles if c.kind != "reflect" and c.end == "committed"]
    log = scratch.glob("*.log")
    return Run(
        messages=len(messages),
        seqs=appended,
        cycles=cycles,
        observation_tokens=sum(c.output_tokens or 0 for c in observed),
        message_tokens_observed=sum(c.input_tokens or 0 for c in observed),
        seconds=round(seconds, 1),
        log_tracebacks=sum(path.read_text(errors="replace").count("Traceback") for path in log),
        overlaps=_overlaps(cycles),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the real model on loopback until stopped.")
    parser.add_argument("--gguf", type=Path, default=gguf_path())
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--threads", type=int, default=default_threads())
    args = parser.parse_args()
    if args.gguf is None:
        parser.error(f"no model file: run scripts/real-model.sh, or set {GGUF_VARIABLE}")
    serve(args.gguf, args.port, args.threads)


if __name__ == "__main__":
    main()
