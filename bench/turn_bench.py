"""The benchmark of record: an agent's turn, as agents make them (turns 200 ms apart, OM active). JSON.

    .venv/bin/python -m bench.turn_bench [--database-url URL] [--turns 100] [--pause-ms 200]
                                         [--style help] [--seed 1000] [--modes ...] [--markdown]
    om bench turn

What runs: a conversation from ``testing/generator.py`` (seeded; the local model was not tuned on it), with
OM active — messageTokens 2,000, bufferTokens 0.2, blockAfter 1.2, observationTokens 4,000, the local model
``om-local/extractive`` — driven turn by turn with a pause between turns (the model call an agent makes
takes seconds; a pause is what a process that went idle pays for). Each way of driving it gets a thread of
its own:

- ``three_calls``: append the user message, read the context, append the reply (three HTTP requests);
- ``turn``: ``POST …/turn`` (one request), then the reply's append;
- ``proxy``: ``POST /v1/chat/completions`` with the keyless local chat model ``om-local/chat`` (one request:
  om appends the message, builds the context, calls the model and appends its reply), sending only the new
  message; beside it the same model called directly through the same gateway in this process, after the
  same pause, whose time is subtracted to give the proxy's overhead;
- ``inline_sqlite`` / ``inline_postgres``: the same turn in-process, ``take_turn`` and ``append_messages``
  on ``build_inline`` (its inline executor runs model work on a background thread).

The HTTP modes run against the deployed shape: ``om serve`` and one ``om worker`` (processes of their own,
Postgres, a private ``redis-server``). Reported per mode: p50/p99/mean of the critical path (everything
before the model call: the user append and the read) and of the whole turn (with the reply's append), the
Observer/Reflector calls the reads reported (``thisRead``), and the CPU the turns cost: for the HTTP modes the
server's, the worker's and Postgres's CPU per whole turn (read from ``/proc``, the client's own left out);
in-process, this thread's CPU per critical path and per whole turn (``thread_time``). The machine's load
average is reported at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx

from om_core.application.append import append_messages, configure_thread
from om_core.application.turn import take_turn
from om_core.bootstrap import build_inline
from testing.cpu import CpuMeter, load_average
from testing.generator import STYLES, Conversation, generate
from testing.postgres import DEFAULT_SERVER, scratch_postgres
from testing.processes import deployment

PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 2000, "bufferTokens": 0.2, "blockAfter": 1.2},
    "reflection": {"observationTokens": 4000},
}
TENANT = "bench"
KEY = "turn-bench-key"
HTTP_MODES = ("three_calls", "turn", "proxy")
CHAT_MODEL = "om-local/chat"
INLINE_MODES = ("inline_sqlite", "inline_postgres")


def distribution(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        "mean": round(statistics.fmean(ordered), 2),
        "max": round(ordered[-1], 2),
    }


class Samples:
    def __init__(self) -> None:
        self.critical: list[float] = []
        self.whole: list[float] = []
        self.cpu_critical: list[float] = []
        self.cpu_whole: list[float] = []
        self.processes_cpu_ms: dict[str, float | None] = {}
        self.observer_calls = 0
        self.reflector_calls = 0
        self.max_calls_in_a_read = 0

    def add(self, critical_s: float, whole_s: float, status: dict[str, Any]) -> None:
        self.critical.append(critical_s * 1000)
        self.whole.append(whole_s * 1000)
        calls = status.get("thisRead", {})
        observer, reflector = calls.get("observerCalls", 0), calls.get("reflectorCalls", 0)
        self.observer_calls += observer
        self.reflector_calls += reflector
        self.max_calls_in_a_read = max(self.max_calls_in_a_read, observer + reflector)

    def report(self) -> dict[str, Any]:
        cpu: dict[str, Any] = {}
        if self.cpu_critical:
            cpu["this_thread_critical_path_ms"] = distribution(self.cpu_critical)
            cpu["this_thread_whole_turn_ms"] = distribution(self.cpu_whole)
        if self.processes_cpu_ms:
            cpu["per_whole_turn_ms"] = self.processes_cpu_ms
        return {
            "turns": len(self.critical),
            "critical_path_ms": distribution(self.critical),
            "whole_turn_ms": distribution(self.whole),
            **({"cpu": cpu} if cpu else {}),
            "observer_calls_in_reads": self.observer_calls,
            "reflector_calls_in_reads": self.reflector_calls,
            "max_calls_in_one_read": self.max_calls_in_a_read,
        }


Step = Callable[[str, dict[str, Any], dict[str, Any]], tuple[float, float, dict[str, Any]]]


def http_step(http: httpx.Client, mode: str) -> Step:
    """One turn over HTTP: (critical path s, whole turn s, the read's status)."""

    def step(
        thread: str, user: dict[str, Any], assistant: dict[str, Any]
    ) -> tuple[float, float, dict[str, Any]]:
        began = time.perf_counter()
        if mode == "proxy":
            response = http.post(
                "/v1/chat/completions",
                json={"model": CHAT_MODEL, "messages": [openai_message(user)]},
                headers={"X-OM-Thread-Id": thread},
            )
            response.raise_for_status()
            # one request is the whole turn: om stores the reply itself; its status is in the headers
            elapsed = time.perf_counter() - began
            return elapsed, elapsed, {}
        if mode == "turn":
            response = http.post(f"/v1/threads/{thread}/turn", json={"messages": [user]})
            response.raise_for_status()
        else:
            http.post(f"/v1/threads/{thread}/messages", json={"messages": [user]}).raise_for_status()
            response = http.get(f"/v1/threads/{thread}/context")
            response.raise_for_status()
        critical = time.perf_counter() - began
        http.post(f"/v1/threads/{thread}/messages", json={"messages": [assistant]}).raise_for_status()
        return critical, time.perf_counter() - began, response.json()["status"]

    return step


def floor(http: httpx.Client, thread: str, pause_s: float, probes: int = 60) -> dict[str, Any]:
    """What any request pays on this machine after the same pause: ``/healthz`` (no store, no key) and
    the thread's status (the key, and one small read of the record row)."""
    out: dict[str, Any] = {}
    for name, path in (("healthz", "/healthz"), ("status", f"/v1/threads/{thread}/status")):
        samples = []
        for _ in range(probes):
            time.sleep(pause_s)
            began = time.perf_counter()
            http.get(path).raise_for_status()
            samples.append((time.perf_counter() - began) * 1000)
        out[f"{name}_ms"] = distribution(samples)
    return out


def openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """The generated message as an app using the OpenAI SDK sends it: role and text."""
    parts = message.get("parts") or []
    text = " ".join(str(p.get("text", "")) for p in parts if p.get("type") == "text") or str(
        message.get("content", "")
    )
    return {"role": message["role"], "content": text}


def direct_chat_ms(conversation: Conversation, pause_s: float, calls: int = 60) -> dict[str, float]:
    """The local chat model called directly through the gateway, in this process, after the same pause
    as the proxy's turns (a call made back to back runs on warm caches and is faster): what the proxy adds
    is its time minus this."""
    from om_core.adapters.models.litellm_gateway import LiteLLMGateway
    from om_core.application.ports import ChatCall

    gateway = LiteLLMGateway()
    samples = []
    for turn in conversation.turns[:calls]:
        call = ChatCall(model=CHAT_MODEL, messages=[openai_message(turn.user)])
        time.sleep(pause_s)
        began = time.perf_counter()
        gateway.chat(call)
        samples.append((time.perf_counter() - began) * 1000)
    return distribution(samples[5:])


def drive(
    conversation: Conversation,
    thread: str,
    step: Step,
    pause_s: float,
    warmup: int,
    meter: CpuMeter | None = None,
) -> Samples:
    """The conversation's turns, ``pause_s`` apart; with ``meter``, the measured processes' CPU per turn
    over the turns after the warm-up (pauses included: what a process does while idle is its cost too)."""
    samples = Samples()
    before = None
    for index, turn in enumerate(conversation.turns):
        if index == warmup and meter is not None:
            before = meter.snapshot()
        time.sleep(pause_s)
        critical, whole, status = step(thread, turn.user, turn.assistant)
        if index >= warmup:
            samples.add(critical, whole, status)
    if meter is not None and before is not None and samples.critical:
        spent = meter.since(before)
        samples.processes_cpu_ms = {
            group: None if seconds is None else round(seconds * 1000 / len(samples.critical), 2)
            for group, seconds in spent.items()
        }
    return samples


def run_http(
    url: str, conversation: Conversation, modes: list[str], pause_s: float, warmup: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="om-turn-bench-") as tmp:
        scratch = Path(tmp)
        profile = scratch / "profile.json"
        profile.write_text(json.dumps(PROFILE))
        with (
            deployment(url, profile, scratch, {KEY: TENANT}, worker="turn-bench") as (base, _),
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http,
        ):
            for mode in modes:
                thread = f"turn-{mode}"
                http.put(f"/v1/threads/{thread}", json={}).raise_for_status()
                out[mode] = drive(
                    conversation, thread, http_step(http, mode), pause_s, warmup, CpuMeter()
                ).report()
            out["floor"] = floor(http, f"turn-{modes[0]}", pause_s)
        tracebacks = sum(log.read_text(errors="replace").count("Traceback") for log in scratch.glob("*.log"))
    out["log_tracebacks"] = tracebacks
    return out


@contextmanager
def inline_database(mode: str, admin_url: str) -> Iterator[str]:
    if mode == "inline_postgres":
        with scratch_postgres(admin_url, "om_turn_bench") as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="om-turn-bench-") as tmp:
            yield f"sqlite:///{tmp}/om.sqlite3"


def run_inline(
    mode: str, admin_url: str, conversation: Conversation, pause_s: float, warmup: int
) -> dict[str, Any]:
    with inline_database(mode, admin_url) as url:
        deps, dispatcher = build_inline(database_url=url, profile=PROFILE, background=True)
        try:
            configure_thread(deps, tenant=TENANT, thread_id=mode)

            cpu_critical: list[float] = []
            cpu_whole: list[float] = []

            def step(
                thread: str, user: dict[str, Any], assistant: dict[str, Any]
            ) -> tuple[float, float, dict[str, Any]]:
                cpu_began = time.thread_time()
                began = time.perf_counter()
                turn = take_turn(deps, tenant=TENANT, thread_id=thread, messages=[user])
                critical = time.perf_counter() - began
                cpu_critical.append((time.thread_time() - cpu_began) * 1000)
                append_messages(deps, tenant=TENANT, thread_id=thread, messages=[assistant])
                cpu_whole.append((time.thread_time() - cpu_began) * 1000)
                return critical, time.perf_counter() - began, turn.read.window.status

            samples = drive(conversation, mode, step, pause_s, warmup)
            samples.cpu_critical, samples.cpu_whole = cpu_critical[warmup:], cpu_whole[warmup:]
            return samples.report()
        finally:
            dispatcher.close()
            deps.close()


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "| way | critical path p50 ms | p99 ms | whole turn p50 ms | p99 ms | CPU ms per turn "
        "| max model calls in a read |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for mode, result in report["modes"].items():
        critical, whole = result["critical_path_ms"], result["whole_turn_ms"]
        rows.append(
            f"| {mode} | {critical['p50']} | {critical['p99']} | {whole['p50']} | {whole['p99']} "
            f"| {_cpu_cell(result.get('cpu', {}))} | {result['max_calls_in_one_read']} |"
        )
    overhead = report.get("proxy_overhead")
    if overhead:
        direct = overhead["direct_model_call_ms"]
        rows.append(f"| (the local chat model called directly) | {direct['p50']} | {direct['p99']} | | | | |")
    for name, probe in report.get("floor_after_a_pause", {}).items():
        rows.append(f"| (floor) `{name}` | {probe['p50']} | {probe['p99']} | | | | |")
    return "\n".join(rows)


def _cpu_cell(cpu: dict[str, Any]) -> str:
    """In-process: this thread's p50 for the critical path / the whole turn; over HTTP: each process
    group's mean per whole turn."""
    if "this_thread_critical_path_ms" in cpu:
        critical, whole = cpu["this_thread_critical_path_ms"], cpu["this_thread_whole_turn_ms"]
        return f"{critical['p50']} / {whole['p50']} (this thread)"
    spent = cpu.get("per_whole_turn_ms") or {}
    return ", ".join(f"{group} {ms}" for group, ms in spent.items() if ms is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_SERVER, help="a Postgres server (any database)")
    parser.add_argument("--turns", type=int, default=100, help="user turns (two messages each)")
    parser.add_argument("--pause-ms", type=float, default=200.0, help="pause between turns")
    parser.add_argument("--warmup", type=int, default=5, help="first turns left out of the figures")
    parser.add_argument("--style", default="help", choices=STYLES)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--modes", default=",".join((*HTTP_MODES, *INLINE_MODES)))
    parser.add_argument("--markdown", action="store_true", help="also print the table of docs/benchmarks.md")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {*HTTP_MODES, *INLINE_MODES}
    if unknown:
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
    admin_url = args.database_url.replace("postgresql://", "postgresql+psycopg://")
    conversation = generate(args.style, args.seed, messages=2 * args.turns)
    pause_s = args.pause_ms / 1000
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": load_average(),
        },
        "conversation": {"style": args.style, "seed": args.seed, "turns": len(conversation.turns)},
        "profile": PROFILE,
        "pause_ms": args.pause_ms,
        "modes": {},
    }
    http_modes = [m for m in modes if m in HTTP_MODES]
    if http_modes:
        with scratch_postgres(admin_url, "om_turn_bench") as url:
            measured = run_http(url, conversation, http_modes, pause_s, args.warmup)
        report["log_tracebacks"] = measured.pop("log_tracebacks")
        report["floor_after_a_pause"] = measured.pop("floor")
        report["modes"].update(measured)
    if "proxy" in modes:
        direct = direct_chat_ms(conversation, pause_s)
        proxy = report["modes"]["proxy"]["critical_path_ms"]
        report["proxy_overhead"] = {
            "direct_model_call_ms": direct,
            "overhead_p50_ms": round(proxy["p50"] - direct["p50"], 2),
        }
    for mode in (m for m in modes if m in INLINE_MODES):
        report["modes"][mode] = run_inline(mode, admin_url, conversation, pause_s, args.warmup)
    report["machine"]["load_average_at_end"] = load_average()
    json.dump(report, sys.stdout, indent=2)
    print()
    if args.markdown:
        print(markdown(report))


if __name__ == "__main__":
    main()
