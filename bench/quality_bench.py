"""Memory quality: what the local Observer and Reflector keep of generated conversations. Prints JSON.

    om bench quality [--seeds dev|heldout] [--styles trip,household,...] [--conversations 3]
                     [--messages N] [--markdown] [--json FILE] [--lost] [--database-url URL]
    om bench quality --suite legacy [--seed-base 1000] [--conversations 5] [--messages 300]

What runs: for each style and each of ``--conversations`` seeds, one generated conversation goes through
the in-process engine (``om_core.bootstrap.build_inline``: the inline executor runs every observation and
reflection the policy asks for right after the commit that asks for it) one message at a time, as an agent
drives it: each message is appended, and the context is read after each user message. OM is active with
the local model ``om-local/extractive``: messageTokens 2,000, bufferTokens 0.2, bufferActivation 0.8,
blockAfter 1.2, reflection observationTokens 4,000. The store is a scratch SQLite file, or with
``--database-url`` a scratch database on that Postgres server or the SQLite file named.

Suites:

- ``styles`` (the default): ``testing.styles``, conversations of 300–600 messages in many styles, 18–24
  planted facts each, labelled by hard case (``testing.styles.facts.CATEGORIES``). ``--seeds dev`` uses
  seeds from 1, ``--seeds heldout`` seeds from 50,000: those are for published figures, so their lost
  facts are never listed (``--lost`` is refused).
- ``legacy``: the five styles of ``testing/generator.py`` (help, trip, coding, smalltalk, documents),
  which the local model was developed on, seeds from ``--seed-base``.

Reported per style and in total: planted facts in the final context (every part of a fact on one line of
the context: observations, continuation and the raw window as the agent would send them); corrected facts
found with their new value; superseded values (a correction's old value, a proposal the user turned down)
still in the context; compression (message tokens observed per observation token written, and the
conversation's message tokens per final-context token); Observer and Reflector calls, generations and the
most calls one read made; by category, by priority, and for each lost fact its cause of loss, read from the
record's event stream (``bench.quality_analysis.CAUSES``); and the 🔴 lines a reflection removed while a
🟡/🟢 line of the same log survived.
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
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.quality_analysis import CAUSES, analyse_stream, cause_of_loss
from om_core.application.append import append_messages, configure_thread
from om_core.application.configuration import counter_for, record_config
from om_core.application.context import read_context
from om_core.application.deps import Deps
from om_core.application.repository import load_state
from om_core.bootstrap import build_inline
from om_core.domain.context import ContextWindow
from om_core.domain.state import RecordState
from testing import generator as legacy
from testing import styles
from testing.postgres import scratch_postgres
from testing.styles.facts import CATEGORIES, PRIORITIES, SearchText, superseded_in

PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 2000, "bufferTokens": 0.2, "bufferActivation": 0.8, "blockAfter": 1.2},
    "reflection": {"observationTokens": 4000},
}
TENANT = "quality"
DEV_FIRST_SEED = 1


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


@dataclass(slots=True)
class Driven:
    """A conversation driven through the engine: its final context and record."""

    text: str
    state: RecordState
    context_tokens: int
    most_calls_in_a_read: int


def drive(deps: Deps, thread: str, messages: Sequence[dict[str, Any]]) -> Driven:
    """Append ``messages`` one at a time, reading the context after each user message, then once more."""
    configure_thread(deps, tenant=TENANT, thread_id=thread, resource_id=f"user-{thread}")
    most = 0
    for message in messages:
        append_messages(deps, tenant=TENANT, thread_id=thread, messages=[message])
        if message["role"] == "user":
            read = read_context(deps, tenant=TENANT, thread_id=thread, caller_model="openai/gpt-5-mini")
            most = max(most, _calls_in_read(read.window))
    read = read_context(deps, tenant=TENANT, thread_id=thread, caller_model="openai/gpt-5-mini")
    most = max(most, _calls_in_read(read.window))
    state = load_state(deps.records, deps.store, read.stream_id, deps.states)
    text = context_text(read.window)
    tokens = counter_for(record_config(deps.profile, state)).count_text(text)
    return Driven(text, state, tokens, most)


def _calls_in_read(window: ContextWindow) -> int:
    """Observer plus Reflector calls recorded while the read ran, as its status reports them."""
    this_read = window.status["thisRead"]
    return int(this_read["observerCalls"]) + int(this_read["reflectorCalls"])


# --- the styles suite -------------------------------------------------------------------------------------


@dataclass(slots=True)
class StyleResult:
    style: str
    seed: int
    messages: int
    message_tokens_observed: int
    observation_tokens_written: int
    message_tokens_total: int
    final_observation_tokens: int
    final_context_tokens: int
    facts_planted: int
    facts_retained: int
    corrections: int
    corrections_with_new_value: int
    superseded_values_in_context: int
    observer_calls: int
    reflector_calls: int
    generations: int
    reflections_seen: int
    red_dropped_while_lower_kept: int
    max_calls_in_one_read: int
    by_category: dict[str, list[int]] = field(default_factory=dict)
    by_priority: dict[str, list[int]] = field(default_factory=dict)
    lost_by_cause: dict[str, int] = field(default_factory=dict)
    lost: list[dict[str, Any]] = field(default_factory=list)


def run_styles_conversation(deps: Deps, conversation: styles.Conversation) -> StyleResult:
    driven = drive(deps, f"{conversation.style}-{conversation.seed}", conversation.messages)
    state = driven.state
    context = SearchText.of(driven.text)
    analysis = analyse_stream(deps.store, state.stream_id, conversation.facts)
    by_category: dict[str, list[int]] = {}
    by_priority: dict[str, list[int]] = {}
    causes: Counter[str] = Counter()
    lost: list[dict[str, Any]] = []
    retained = corrected = corrected_found = stale = 0
    for fact, trace in zip(conversation.facts, analysis.traces, strict=True):
        found = context.holds(fact.parts)
        retained += found
        for table, key in ((by_category, fact.category), (by_priority, fact.priority)):
            counts = table.setdefault(key, [0, 0])
            counts[0] += found
            counts[1] += 1
        if fact.category == "correction":
            corrected += 1
            corrected_found += found
        stale += len(superseded_in(fact, context))
        if not found:
            cause = cause_of_loss(fact, trace, context)
            causes[cause] += 1
            lost.append({**fact.to_json(), "cause": cause, "source": fact.source})
    return StyleResult(
        style=conversation.style,
        seed=conversation.seed,
        messages=len(conversation.messages),
        message_tokens_observed=state.stats.messages_observed_tokens,
        observation_tokens_written=state.stats.observations_written_tokens,
        message_tokens_total=state.stats.messages_observed_tokens + state.pending_tokens,
        final_observation_tokens=state.observation_tokens,
        final_context_tokens=driven.context_tokens,
        facts_planted=len(conversation.facts),
        facts_retained=retained,
        corrections=corrected,
        corrections_with_new_value=corrected_found,
        superseded_values_in_context=stale,
        observer_calls=state.stats.observer_calls,
        reflector_calls=state.stats.reflector_calls,
        generations=state.generation,
        reflections_seen=analysis.reflections,
        red_dropped_while_lower_kept=analysis.red_dropped_while_lower_kept,
        max_calls_in_one_read=driven.most_calls_in_a_read,
        by_category=by_category,
        by_priority=by_priority,
        lost_by_cause=dict(causes),
        lost=lost,
    )


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def summarise_styles(name: str, results: Sequence[StyleResult]) -> dict[str, Any]:
    def total(attribute: str) -> int:
        return sum(int(getattr(r, attribute)) for r in results)

    def merged(attribute: str) -> dict[str, dict[str, Any]]:
        sums: dict[str, list[int]] = {}
        for result in results:
            for key, (found, planted) in getattr(result, attribute).items():
                counts = sums.setdefault(key, [0, 0])
                counts[0] += found
                counts[1] += planted
        return {
            key: {"retained": found, "planted": planted, "retention_pct": _pct(found, planted)}
            for key, (found, planted) in sorted(sums.items())
        }

    causes: Counter[str] = Counter()
    for result in results:
        causes.update(result.lost_by_cause)
    observed, written = total("message_tokens_observed"), total("observation_tokens_written")
    conversation_tokens, context_tokens = total("message_tokens_total"), total("final_context_tokens")
    planted, retained = total("facts_planted"), total("facts_retained")
    ratios = [r.message_tokens_total / max(r.final_context_tokens, 1) for r in results]
    return {
        "style": name,
        "conversations": len(results),
        "messages": total("messages"),
        "facts_planted": planted,
        "facts_retained": retained,
        "fact_retention_pct": _pct(retained, planted),
        "corrections": total("corrections"),
        "corrections_with_new_value": total("corrections_with_new_value"),
        "corrections_with_new_value_pct": _pct(total("corrections_with_new_value"), total("corrections")),
        "superseded_values_in_context": total("superseded_values_in_context"),
        "message_tokens_observed": observed,
        "observation_tokens_written": written,
        "compression_ratio": round(observed / max(written, 1), 2),
        "message_tokens_total": conversation_tokens,
        "final_observation_tokens": total("final_observation_tokens"),
        "final_context_tokens": context_tokens,
        "context_ratio": round(conversation_tokens / max(context_tokens, 1), 2),
        "context_ratio_range": [round(min(ratios), 1), round(max(ratios), 1)],
        "observer_calls": total("observer_calls"),
        "reflector_calls": total("reflector_calls"),
        "generations": total("generations"),
        "max_generations": max(r.generations for r in results),
        "red_dropped_while_lower_kept": total("red_dropped_while_lower_kept"),
        "max_calls_in_one_read": max(r.max_calls_in_one_read for r in results),
        "lost_by_cause": {cause: causes[cause] for cause in CAUSES if causes[cause]},
        "by_category": merged("by_category"),
        "by_priority": merged("by_priority"),
    }


def seeds_for(kind: str, count: int, first: int | None) -> list[int]:
    """``count`` seeds of ``kind`` from ``first`` (by default the first of that kind); a seed on the wrong
    side of ``HELDOUT_FIRST_SEED`` is refused."""
    start = first if first is not None else (DEV_FIRST_SEED if kind == "dev" else styles.HELDOUT_FIRST_SEED)
    seeds = list(range(start, start + count))
    held = [s >= styles.HELDOUT_FIRST_SEED for s in seeds]
    if kind == "dev" and any(held):
        raise ValueError(
            f"development seeds are below {styles.HELDOUT_FIRST_SEED}; got {seeds[0]}–{seeds[-1]}"
        )
    if kind == "heldout" and not all(held):
        raise ValueError(f"held-out seeds start at {styles.HELDOUT_FIRST_SEED}; got {seeds[0]}–{seeds[-1]}")
    return seeds


def run_styles(
    style_names: Sequence[str],
    seeds: Sequence[int],
    messages: int | None,
    database_url: str | None,
    heldout: bool,
    list_lost: bool,
) -> dict[str, Any]:
    began = time.perf_counter()
    per_style: list[dict[str, Any]] = []
    everything: list[StyleResult] = []
    with _engine(database_url) as (deps, dispatcher):
        for name in style_names:
            results = [run_styles_conversation(deps, styles.generate(name, seed, messages)) for seed in seeds]
            dispatcher.drain()
            per_style.append(summarise_styles(name, results))
            everything += results
    report: dict[str, Any] = {
        "bench": "quality",
        "suite": "styles",
        "model": PROFILE["model"],
        "profile": PROFILE,
        "seeds": "heldout" if heldout else "dev",
        "seed_range": [seeds[0], seeds[-1]],
        "messages_per_conversation": messages or "300-600 (by seed)",
        "styles": per_style,
        "overall": summarise_styles("all", everything),
        "categories": CATEGORIES,
        "causes": CAUSES,
        "conversations": [
            {k: v for k, v in asdict(r).items() if k not in ("lost", "by_category", "by_priority")}
            for r in everything
        ],
        "elapsed_s": round(time.perf_counter() - began, 1),
        "python": platform.python_version(),
    }
    if list_lost and not heldout:
        report["lost"] = [{"style": r.style, "seed": r.seed, **fact} for r in everything for fact in r.lost]
    return report


def markdown_styles(report: dict[str, Any]) -> str:
    rows = [
        "| style | conversations / messages | facts kept | corrected → new value | superseded left | "
        "compression (observed ÷ written) | conversation ÷ final context | Observer / Reflector calls | "
        "generations (max) | 🔴 dropped by a reflection |",
        "|" + "---|" * 10,
    ]
    for s in [*report["styles"], report["overall"]]:
        name = "**all**" if s["style"] == "all" else s["style"]
        low, high = s["context_ratio_range"]
        rows.append(
            f"| {name} | {s['conversations']} / {s['messages']:,} | "
            f"{s['facts_retained']}/{s['facts_planted']} "
            f"({s['fact_retention_pct']}%) | {s['corrections_with_new_value']}/{s['corrections']} | "
            f"{s['superseded_values_in_context']} | {s['compression_ratio']}× | {s['context_ratio']}× "
            f"({low}–{high}) | {s['observer_calls']} / {s['reflector_calls']} | {s['generations']} "
            f"({s['max_generations']}) | {s['red_dropped_while_lower_kept']} |"
        )
    overall = report["overall"]
    lost = overall["facts_planted"] - overall["facts_retained"]
    rows += ["", f"Lost facts by cause ({lost}):", "", "| cause | facts | what it means |", "|---|---:|---|"]
    for cause, count in overall["lost_by_cause"].items():
        rows.append(f"| {cause} | {count} | {CAUSES[cause]} |")
    rows += ["", "By category:", "", "| category | kept | |", "|---|---:|---|"]
    for category, counts in overall["by_category"].items():
        rows.append(
            f"| {category} | {counts['retained']}/{counts['planted']} ({counts['retention_pct']}%) | "
            f"{CATEGORIES[category]} |"
        )
    rows += ["", "By priority:", "", "| priority | kept |", "|---|---:|"]
    for priority in PRIORITIES:
        counts = overall["by_priority"].get(priority)
        if counts:
            rows.append(
                f"| {priority} | {counts['retained']}/{counts['planted']} ({counts['retention_pct']}%) |"
            )
    return "\n".join(rows)


# --- the legacy suite -------------------------------------------------------------------------------------


def run_legacy_conversation(deps: Deps, conversation: legacy.Conversation) -> dict[str, Any]:
    driven = drive(deps, f"legacy-{conversation.style}-{conversation.seed}", conversation.messages())
    state, text = driven.state, driven.text
    missed = [f"{f.key}={f.value}" for f in conversation.facts if not legacy.fact_found(f.value, text)]
    stale = sum(
        1
        for f in conversation.facts
        for old in f.earlier
        if legacy.fact_found(old, text) and not legacy.fact_found(old, f.value)
    )
    return {
        "style": conversation.style,
        "seed": conversation.seed,
        "messages": len(conversation.messages()),
        "message_tokens_observed": state.stats.messages_observed_tokens,
        "observation_tokens_written": state.stats.observations_written_tokens,
        "final_observation_tokens": state.observation_tokens,
        "final_context_tokens": driven.context_tokens,
        "message_tokens_total": state.stats.messages_observed_tokens + state.pending_tokens,
        "facts_planted": len(conversation.facts),
        "facts_retained": len(conversation.facts) - len(missed),
        "superseded_values_in_context": stale,
        "observer_calls": state.stats.observer_calls,
        "reflector_calls": state.stats.reflector_calls,
        "generations": state.generation,
        "max_calls_in_one_read": driven.most_calls_in_a_read,
        "missed": missed,
    }


def summarise_legacy(style: str, results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(r[key]) for r in results)

    observed, written = total("message_tokens_observed"), total("observation_tokens_written")
    planted, retained = total("facts_planted"), total("facts_retained")
    return {
        "style": style,
        "conversations": len(results),
        "messages": total("messages"),
        "message_tokens_observed": observed,
        "observation_tokens_written": written,
        "compression_ratio": round(observed / max(written, 1), 2),
        "message_tokens_total": total("message_tokens_total"),
        "final_observation_tokens": total("final_observation_tokens"),
        "final_context_tokens": total("final_context_tokens"),
        "context_ratio": round(total("message_tokens_total") / max(total("final_context_tokens"), 1), 2),
        "facts_planted": planted,
        "facts_retained": retained,
        "fact_retention_pct": _pct(retained, planted),
        "superseded_values_in_context": total("superseded_values_in_context"),
        "observer_calls": total("observer_calls"),
        "reflector_calls": total("reflector_calls"),
        "generations": total("generations"),
        "max_generations": max(r["generations"] for r in results),
        "max_calls_in_one_read": max(r["max_calls_in_one_read"] for r in results),
        "missed": [f"seed {r['seed']}: {m}" for r in results for m in r["missed"]],
    }


def run_legacy(
    style_names: Sequence[str], conversations: int, messages: int, seed_base: int, database_url: str | None
) -> dict[str, Any]:
    began = time.perf_counter()
    per_style: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    with _engine(database_url) as (deps, dispatcher):
        for style in style_names:
            results = [
                run_legacy_conversation(deps, legacy.generate(style, seed_base + i, messages))
                for i in range(conversations)
            ]
            dispatcher.drain()
            per_style.append(summarise_legacy(style, results))
            details += [{k: v for k, v in r.items() if k != "missed"} for r in results]
    planted = sum(s["facts_planted"] for s in per_style)
    retained = sum(s["facts_retained"] for s in per_style)
    observed = sum(s["message_tokens_observed"] for s in per_style)
    written = sum(s["observation_tokens_written"] for s in per_style)
    return {
        "bench": "quality",
        "suite": "legacy",
        "model": PROFILE["model"],
        "profile": PROFILE,
        "seeds": [seed_base, seed_base + conversations - 1],
        "messages_per_conversation": messages,
        "styles": per_style,
        "overall": {
            "compression_ratio": round(observed / max(written, 1), 2),
            "fact_retention_pct": _pct(retained, planted),
            "facts_planted": planted,
            "facts_retained": retained,
            "max_calls_in_one_read": max(s["max_calls_in_one_read"] for s in per_style),
        },
        "conversations": details,
        "elapsed_s": round(time.perf_counter() - began, 1),
        "python": platform.python_version(),
    }


def markdown_legacy(report: dict[str, Any]) -> str:
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


# --- the engine and the command ---------------------------------------------------------------------------


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


@contextlib.contextmanager
def _engine(database_url: str | None) -> Iterator[tuple[Deps, Any]]:
    with _database(database_url) as url:
        deps, dispatcher = build_inline(database_url=url, profile=PROFILE)
        deps.sync_wait_seconds = 0.0
        try:
            yield deps, dispatcher
        finally:
            dispatcher.close()
            deps.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="om bench quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=("styles", "legacy"), default="styles", help="(styles)")
    parser.add_argument("--seeds", choices=("dev", "heldout"), default="dev", help="styles suite: (dev)")
    parser.add_argument("--first-seed", type=int, default=None, help="styles suite: the first seed")
    parser.add_argument("--conversations", type=int, default=None, help="per style (styles 3, legacy 5)")
    parser.add_argument(
        "--messages", type=int, default=None, help="per conversation (styles: 300–600 by seed)"
    )
    parser.add_argument("--styles", default=None, help="comma-separated (all of the suite)")
    parser.add_argument("--seed-base", type=int, default=1000, help="legacy suite: the first seed (1000)")
    parser.add_argument("--database-url", default=None, help="a Postgres server or a sqlite:/// file")
    parser.add_argument("--markdown", action="store_true", help="also print markdown tables (stderr)")
    parser.add_argument("--json", dest="json_file", default=None, help="also write the report to this file")
    parser.add_argument("--lost", action="store_true", help="list each lost fact (development seeds only)")
    args = parser.parse_args(argv)
    known = list(styles.STYLES) if args.suite == "styles" else list(legacy.STYLES)
    chosen = [s.strip() for s in (args.styles or ",".join(known)).split(",") if s.strip()]
    unknown = [s for s in chosen if s not in known]
    if unknown or not chosen:
        parser.error(f"unknown style(s) {', '.join(unknown)}; the {args.suite} suite has: {', '.join(known)}")
    conversations = args.conversations or (3 if args.suite == "styles" else 5)
    if conversations < 1 or (args.messages is not None and args.messages < 2):
        parser.error("--conversations must be ≥ 1 and --messages ≥ 2")
    if args.suite == "legacy":
        if args.lost or args.seeds != "dev" or args.first_seed is not None:
            parser.error("--lost, --seeds and --first-seed belong to the styles suite")
        report = run_legacy(chosen, conversations, args.messages or 300, args.seed_base, args.database_url)
        table = markdown_legacy(report)
    else:
        if args.lost and args.seeds == "heldout":
            parser.error(
                "--lost lists the facts a run lost, which is for development seeds only: held-out "
                "conversations stay unread so that their figures measure conversations nobody tuned for"
            )
        try:
            seeds = seeds_for(args.seeds, conversations, args.first_seed)
        except ValueError as error:
            parser.error(str(error))
        report = run_styles(
            chosen, seeds, args.messages, args.database_url, args.seeds == "heldout", args.lost
        )
        table = markdown_styles(report)
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.json_file:
        Path(args.json_file).write_text(text + "\n", encoding="utf-8")
    if args.markdown:
        print(table, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
