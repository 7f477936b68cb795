"""A real neural model as om's Observer and Reflector: a robustness run, not a quality score. JSON.

    scripts/real-model.sh bench [--messages 80] [--style help] [--seed 11] [--database-url URL]
    om bench real-model          (with the real-model extra and OM_REAL_MODEL_GGUF, as the script sets)

What runs: SmolLM2-135M-Instruct (Q4_1 GGUF) on a loopback llama.cpp server (xllamacpp; threads: every core
but one, or ``OM_REAL_MODEL_THREADS``), reached through litellm as ``openai/smollm2`` with
``modelSettings.apiBase``; a deployed ``om serve`` and one ``om worker`` over Postgres; a conversation from
``testing/generator.py`` appended message by message (each after the cycles then open have ended, as an
agent's turns wait on its own model), then one context read. The profile is ``testing/real_model.py``'s:
messageTokens 1,200, bufferTokens 0.5, observationTokens 700, maxOutputTokens 256 (Observer) and 384
(Reflector), failurePolicy continue.

Reported: every cycle (kind, how it ended, latency, tokens in and out, the parser's verdict on each answer),
the verdicts counted, per-call latency and token figures, the compression (message tokens observed per
observation token kept, and the Reflector's), and the integrity checks (messages lost, observed twice).
A 135M model copies, invents and ignores the format: what is measured is that the service holds up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from testing.generator import STYLES, generate
from testing.postgres import DEFAULT_SERVER, scratch_postgres
from testing.real_model import GGUF_VARIABLE, Run, gguf_path, llama_server, profile, run_conversation


def _distribution(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "max": round(ordered[-1], 1),
        "mean": round(statistics.fmean(ordered), 1),
    }


def report(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    calls = [c for c in run.cycles if c.usage.get("calls")]
    per_call_ms = [c.usage["latency_ms"] / c.usage["calls"] for c in calls]
    reflections = [c for c in run.cycles if c.kind == "reflect" and c.end == "committed"]
    reflected_in = sum(c.input_tokens or 0 for c in reflections)
    reflected_out = sum(c.output_tokens or 0 for c in reflections)
    ends: dict[str, int] = {}
    for cycle in run.cycles:
        key = f"{cycle.kind}:{cycle.end}"
        ends[key] = ends.get(key, 0) + 1
    return {
        "bench": "real-model",
        "note": "a robustness run, not a quality score",
        "model": "SmolLM2-135M-Instruct Q4_1 on xllamacpp (llama.cpp server), as openai/smollm2",
        "conversation": {"style": args.style, "seed": args.seed, "messages": run.messages},
        "profile": profile("http://127.0.0.1:<port>/v1"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds": run.seconds,
        "cycles_by_end": ends,
        "verdicts": run.verdicts,
        "model_calls": sum(c.usage["calls"] for c in calls),
        "per_call_latency_ms": _distribution(per_call_ms),
        "input_tokens_per_call": _distribution([c.usage["input_tokens"] / c.usage["calls"] for c in calls]),
        "output_tokens_per_call": _distribution([c.usage["output_tokens"] / c.usage["calls"] for c in calls]),
        "compression": {
            "message_tokens_observed": run.message_tokens_observed,
            "observation_tokens": run.observation_tokens,
            "observation_ratio": round(run.message_tokens_observed / run.observation_tokens, 2)
            if run.observation_tokens
            else None,
            "reflection_tokens_in": reflected_in,
            "reflection_tokens_out": reflected_out,
        },
        "integrity": {
            "messages_lost": run.messages - len(set(run.seqs)),
            "observed_twice": len(run.overlaps),
            "open_cycles": sum(1 for c in run.cycles if c.end is None),
            "log_tracebacks": run.log_tracebacks,
        },
        "cycles": [c.report() for c in run.cycles],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_SERVER, help="a Postgres server (any database)")
    parser.add_argument("--messages", type=int, default=80)
    parser.add_argument("--style", default="help", choices=STYLES)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--settle-s", type=float, default=1800.0, help="how long cycles may stay open")
    args = parser.parse_args()
    gguf = gguf_path()
    if gguf is None:
        sys.exit(f"no model file: run scripts/real-model.sh bench, or set {GGUF_VARIABLE}")
    conversation = generate(args.style, args.seed, args.messages)
    with tempfile.TemporaryDirectory(prefix="om-real-model-bench-") as tmp:
        scratch = Path(tmp)
        with (
            llama_server(scratch / "llama.log", gguf) as api_base,
            scratch_postgres(args.database_url, "om_real_model_bench") as url,
        ):
            run = run_conversation(url, api_base, conversation.messages(), scratch, settle_s=args.settle_s)
    json.dump(report(run, args), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
