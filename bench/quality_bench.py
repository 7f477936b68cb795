"""Memory quality: what the local Observer and Reflector keep of generated conversations. Prints JSON.

    .venv/bin/python -m bench.quality_bench [--conversations 5] [--messages 300] [--styles help,trip,...]
                                            [--seed-base 1000] [--database-url URL] [--markdown]
    om bench quality

What runs: for each style of ``testing.generator`` and each of ``--conversations`` seeds from
``--seed-base``, one generated conversation of ``--messages`` messages with planted facts goes through the
in-process engine (``om_core.bootstrap.build_inline``: the inline executor runs every observation and
reflection the policy asks for, right after the commit that asks for it) turn by turn, as an agent drives
it: append the user message, read the context, append the assistant's reply. OM is active with the local
model ``om-local/extractive``: messageTokens 2,000, bufferTokens 0.2, bufferActivation 0.8, blockAfter 1.2,
reflection observationTokens 4,000. The store is a scratch SQLite file, or with ``--database-url`` a scratch
database on that Postgres server (``postgresql+psycopg://…``) or the SQLite file named (``sqlite:///…``).

Reported per style (sums and extremes over its conversations): message tokens observed, observation tokens
written by the Observer and their ratio; the final log and the final context (observations, continuation
and the raw window as the agent would send them) in tokens, and message tokens per context token; planted
facts retained (the newest value of each fact found in the final context, by ``testing.generator.normalise``)
and superseded values still in it; Observer and Reflector calls, generations, and the most Observer plus
Reflector calls made inside one context read (the status's ``thisRead``). The seeds default to 1000 and
up: the local model was developed on seeds 0–49.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from om_core.application.append import append_messages, configure_thread
from om_core.application.configuration import counter_for, record_config
from om_core.application.context import read_context
from om_core.application.deps import Deps
from om_core.application.repository import load_state
from om_core.bootstrap import build_inline
from om_core.domain.context import ContextWindow
from testing.generator import STYLES, Conversation, fact_found, generate
from testing.postgres import scratch_postgres

PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 2000, "bufferTokens": 0.2, "bufferActivation": 0.8, "blockAfter": 1.2},
    "reflection": {"observationTokens": 4000},
}
TENANT = "quality"


def context_text(window: ContextWindow) -> str:
    """Everything the agent would send: system messages, the continuation hint and every part of the raw
    window a model reads (text, tool calls and their results)."""
    pieces = [*window.system]
    if window.continuation:
        pieces.append(window.continuation)
    for message in window.messages:
        for part in message.get("parts", []):
            if not isinstance(part, dict):
                continue
            if part.get("type") in ("text", "reasoning"):
                pieces.append(str(part.get("text", "")))
            elif part.get("type") == "tool-invocation":
                pieces += [
                    json.dumps(part.get(key), ensure_ascii=False)
                    for key in ("args", "result", "error")
                    if part.get(key) is not None
                ]
    return "\n".join(pieces)


@dataclass
class ConversationResult:
    style: str
    seed: int
    messages: int
    message_tokens_observed: int
    observation_tokens_written: int
    final_observation_tokens: int
    final_context_tokens: int
    message_tokens_total: int
    facts_planted: int
    facts_retained: int
    superseded_values_in_context: int
    observer_calls: int
    reflector_calls: int
    generations: int
    max_calls_in_one_read: int
    missed: list[str]


def run_conversation(deps: Deps, conversation: Conversation) -> ConversationResult:
    thread = f"{conversation.style}-{conversation.seed}"
    configure_thread(deps, tenant=TENANT, thread_id=thread, resource_id=f"user-{thread}")
    most = 0
    for turn in conversation.turns:
        append_messages(deps, tenant=TENANT, thread_id=thread, messages=[turn.user])
        read = read_context(deps, tenant=TENANT, thread_id=thread, caller_model="openai/gpt-5-mini")
        most = max(most, _calls_in_read(read.window))
        append_messages(deps, tenant=TENANT, thread_id=thread, messages=[turn.assistant])
    read = read_context(deps, tenant=TENANT, thread_id=thread, caller_model="openai/gpt-5-mini")
    most = max(most, _calls_in_read(read.window))
    state = load_state(deps.records, deps.store, read.stream_id, deps.states)
    counter = counter_for(record_config(deps.profile, state))
    text = context_text(read.window)
    missed = [f"{f.key}={f.value}" for f in conversation.facts if not fact_found(f.value, text)]
    stale = sum(
        1
        for f in conversation.facts
        for old in f.earlier
        if fact_found(old, text) and not fact_found(old, f.value)
    )
    return ConversationResult(
        style=conversation.style,
        seed=conversation.seed,
        messages=len(conversation.messages()),
        message_tokens_observed=state.stats.messages_observed_tokens,
        observation_tokens_written=state.stats.observations_written_tokens,
        final_observation_tokens=state.observation_tokens,
        final_context_tokens=counter.count_text(text),
        message_tokens_total=state.stats.messages_observed_tokens + state.pending_tokens,
        facts_planted=len(conversation.facts),
        facts_retained=len(conversation.facts) - len(missed),
        superseded_values_in_context=stale,
        observer_calls=state.stats.observer_calls,
        reflector_calls=state.stats.reflector_calls,
        generations=state.generation,
        max_calls_in_one_read=most,
        missed=missed,
    )


def _calls_in_read(window: ContextWindow) -> int:
    """Observer plus Reflector calls recorded while the read ran, as its status reports them."""
    this_read = window.status["thisRead"]
    return int(this_read["observerCalls"]) + int(this_read["reflectorCalls"])


def summarise(style: str, results: Sequence[ConversationResult]) -> dict[str, Any]:
    observed = sum(r.message_tokens_observed for r in results)
    written = sum(r.observation_tokens_written for r in results)
    total = sum(r.message_tokens_total for r in results)
    context = sum(r.final_context_tokens for r in results)
    planted = sum(r.facts_planted for r in results)
    retained = sum(r.facts_retained for r in results)
    return {
        "style": style,
        "conversations": len(results),
        "messages": sum(r.messages for r in results),
        "message_tokens_observed": observed,
        "observation_tokens_written": written,
        "compression_ratio": round(observed / max(written, 1), 2),
        "message_tokens_total": total,
        "final_observation_tokens": sum(r.final_observation_tokens for r in results),
        "final_context_tokens": context,
        "context_ratio": round(total / max(context, 1), 2),
        "facts_planted": planted,
        "facts_retained": retained,
        "fact_retention_pct": round(100 * retained / max(planted, 1), 1),
        "superseded_values_in_context": sum(r.superseded_values_in_context for r in results),
        "observer_calls": sum(r.observer_calls for r in results),
        "reflector_calls": sum(r.reflector_calls for r in results),
        "generations": sum(r.generations for r in results),
        "max_generations": max(r.generations for r in results),
        "max_calls_in_one_read": max(r.max_calls_in_one_read for r in results),
        "missed": [f"seed {r.seed}: {m}" for r in results for m in r.missed],
    }


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url is not None and url.startswith("postgresql"):
        with scratch_postgres(url, prefix="om_quality") as scratch:
            yield scratch
        return
    if url is not None:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="om-quality-") as scratch_dir:
        yield f"sqlite:///{Path(scratch_dir) / 'quality.sqlite3'}"


def run(
    styles: Sequence[str], conversations: int, messages: int, seed_base: int, database_url: str | None
) -> dict[str, Any]:
    began = time.perf_counter()
    per_style: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    with _database(database_url) as url:
        deps, dispatcher = build_inline(database_url=url, profile=PROFILE)
        deps.sync_wait_seconds = 0.0
        try:
            for style in styles:
                results = [
                    run_conversation(deps, generate(style, seed_base + i, messages))
                    for i in range(conversations)
                ]
                dispatcher.drain()
                per_style.append(summarise(style, results))
                details += [{k: v for k, v in asdict(r).items() if k != "missed"} for r in results]
        finally:
            dispatcher.close()
            deps.close()
    planted = sum(s["facts_planted"] for s in per_style)
    retained = sum(s["facts_retained"] for s in per_style)
    observed = sum(s["message_tokens_observed"] for s in per_style)
    written = sum(s["observation_tokens_written"] for s in per_style)
    return {
        "bench": "quality",
        "model": PROFILE["model"],
        "profile": PROFILE,
        "seeds": [seed_base, seed_base + conversations - 1],
        "messages_per_conversation": messages,
        "styles": per_style,
        "overall": {
            "compression_ratio": round(observed / max(written, 1), 2),
            "fact_retention_pct": round(100 * retained / max(planted, 1), 1),
            "facts_planted": planted,
            "facts_retained": retained,
            "max_calls_in_one_read": max(s["max_calls_in_one_read"] for s in per_style),
        },
        "conversations": details,
        "elapsed_s": round(time.perf_counter() - began, 1),
        "python": platform.python_version(),
    }


def markdown(report: dict[str, Any]) -> str:
    head = (
        "| style | messages | observed → written tokens | compression | final context tokens | "
        "messages / context | facts retained | superseded left | Observer / Reflector calls | "
        "generations (max) | max calls in a read |"
    )
    rows = [head, "|" + "---|" * 11]
    for s in report["styles"]:
        rows.append(
            f"| {s['style']} | {s['messages']:,} | {s['message_tokens_observed']:,} → "
            f"{s['observation_tokens_written']:,} | {s['compression_ratio']}× | "
            f"{s['final_context_tokens']:,} | {s['context_ratio']}× | "
            f"{s['facts_retained']}/{s['facts_planted']} ({s['fact_retention_pct']}%) | "
            f"{s['superseded_values_in_context']} | {s['observer_calls']} / {s['reflector_calls']} | "
            f"{s['generations']} ({s['max_generations']}) | {s['max_calls_in_one_read']} |"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="om bench quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=5, help="conversations per style (5)")
    parser.add_argument("--messages", type=int, default=300, help="messages per conversation (300)")
    parser.add_argument("--styles", default=",".join(STYLES), help=f"comma-separated ({','.join(STYLES)})")
    parser.add_argument("--seed-base", type=int, default=1000, help="first seed (1000)")
    parser.add_argument("--database-url", default=None, help="a Postgres server or a sqlite:/// file")
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table (stderr)")
    args = parser.parse_args(argv)
    styles = [s.strip() for s in args.styles.split(",") if s.strip()]
    unknown = [s for s in styles if s not in STYLES]
    if unknown or not styles:
        parser.error(f"unknown style(s) {', '.join(unknown)}; known: {', '.join(STYLES)}")
    if args.conversations < 1 or args.messages < 2:
        parser.error("--conversations must be ≥ 1 and --messages ≥ 2")
    report = run(styles, args.conversations, args.messages, args.seed_base, args.database_url)
    print(json.dumps(report, indent=2, ensure_ascii=False))
    if args.markdown:
        print(markdown(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
