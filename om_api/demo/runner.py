"""``om demo``: a long synthetic conversation through the engine, embedded (SQLite, local model).

Each turn does what an agent does: append the user message, read the context it would send to its model,
append the assistant's answer. Buffering, activation and reflection happen as the policy decides.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from om_api.demo.conversation import FACTS, synthetic_conversation
from om_core.adapters.inline_dispatcher import InlineDispatcher
from om_core.application.append import append_messages, configure_thread
from om_core.application.configuration import counter_for
from om_core.application.context import get_context
from om_core.application.deps import Deps
from om_core.application.profiles import config_of
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.context import ContextWindow
from om_core.domain.events import (
    ChunksActivated,
    DomainEvent,
    ObservationBufferRequested,
    ReflectionActivated,
    ReflectionRequested,
    SyncObservationStarted,
)
from om_core.domain.policy import resolve_limits

DEMO_TENANT = "demo"
DEMO_PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 3_000, "bufferTokens": 0.2, "bufferActivation": 0.8, "blockAfter": 1.2},
    "reflection": {"observationTokens": 1_000, "bufferActivation": 0.5, "blockAfter": 1.2},
}


@dataclass
class DemoSummary:
    turns: int
    observer_calls: int
    reflector_calls: int
    buffered_chunks: int
    activations: int
    sync_observations: int
    generations: int
    compression_ratio: float
    facts_planted: int
    facts_retained: int
    max_unobserved_tokens: int
    block_after_tokens: int
    message_tokens_total: int
    observation_tokens: int
    final_context_tokens: int
    events: int
    elapsed_s: float


def context_text(window: ContextWindow) -> str:
    parts = [*window.system]
    if window.continuation:
        parts.append(window.continuation)
    for message in window.messages:
        for part in message.get("parts", []):
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
    return "\n".join(parts)


def run_demo(
    *,
    turns: int = 320,
    database: Path | None = None,
    seed: int = 7,
    as_json: bool = False,
    background: bool = False,
    console: Console | None = None,
    profile: Mapping[str, Any] = DEMO_PROFILE,
) -> DemoSummary:
    """The demo over ``database``, which is kept; without one, over a scratch file deleted at the end.
    ``profile``: the memory options of the demo's thread."""
    console = console or Console()
    with _database_file(database) as path:
        deps, dispatcher = build_inline(
            database_url=f"sqlite:///{path}", profile=profile, background=background
        )
        try:
            return _converse(deps, dispatcher, turns=turns, seed=seed, as_json=as_json, console=console)
        finally:
            deps.close()


@contextmanager
def _database_file(database: Path | None) -> Iterator[Path]:
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
        yield database
        return
    with tempfile.TemporaryDirectory(prefix="om-demo-") as scratch:
        yield Path(scratch) / "demo.sqlite3"


def _converse(
    deps: Deps, dispatcher: InlineDispatcher, *, turns: int, seed: int, as_json: bool, console: Console
) -> DemoSummary:
    thread_id = f"demo-{seed}"
    stream_id = thread_stream_id(DEMO_TENANT, thread_id)
    configure_thread(
        deps,
        tenant=DEMO_TENANT,
        thread_id=thread_id,
        resource_id="demo-user",
        title="Synthetic demo conversation",
    )
    feed: list[str] = []
    max_unobserved = 0
    started = time.monotonic()
    # Live redraws in place on a terminal only; elsewhere (a pipe, a file) it would print just the last
    # frame without ending its line, so there the last frame is printed once, after the conversation
    live = Live(console=console, refresh_per_second=8) if console.is_terminal and not as_json else None
    if live is not None:
        live.start()
    try:
        for turn in synthetic_conversation(turns, seed=seed):
            outcome = append_messages(deps, tenant=DEMO_TENANT, thread_id=thread_id, messages=[turn.user])
            _note(feed, turn.index, outcome.events)
            window = get_context(
                deps, tenant=DEMO_TENANT, thread_id=thread_id, caller_model="openai/gpt-5-mini"
            )
            max_unobserved = max(max_unobserved, window.pending_tokens)
            outcome = append_messages(
                deps, tenant=DEMO_TENANT, thread_id=thread_id, messages=[turn.assistant]
            )
            _note(feed, turn.index, outcome.events)
            if live is not None:
                live.update(_render(deps, stream_id, turn.index + 1, turns, feed))
        dispatcher.drain()
        final = get_context(deps, tenant=DEMO_TENANT, thread_id=thread_id, caller_model="openai/gpt-5-mini")
        max_unobserved = max(max_unobserved, final.pending_tokens)
    finally:
        if live is not None:
            live.stop()
        dispatcher.close()
    if live is None and not as_json:
        console.print(_render(deps, stream_id, turns, turns, feed))
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    config = config_of(deps, state)
    limits = resolve_limits(config, state)
    text = context_text(final).lower()
    retained = sum(all(term.lower() in text for term in fact.key_terms) for fact in FACTS[: _planted(turns)])
    counter = counter_for(config)
    summary = DemoSummary(
        turns=turns,
        observer_calls=state.stats.observer_calls,
        reflector_calls=state.stats.reflector_calls,
        buffered_chunks=state.stats.buffered_chunks,
        activations=state.stats.activations,
        sync_observations=state.stats.sync_observations,
        generations=state.generation,
        compression_ratio=round(state.stats.messages_observed_tokens / max(state.observation_tokens, 1), 2),
        facts_planted=_planted(turns),
        facts_retained=retained,
        max_unobserved_tokens=max_unobserved,
        block_after_tokens=limits.block_after or limits.message_threshold,
        message_tokens_total=state.stats.messages_observed_tokens + state.pending_tokens,
        observation_tokens=state.observation_tokens,
        final_context_tokens=counter.count_text(context_text(final)),
        events=state.version,
        elapsed_s=round(time.monotonic() - started, 2),
    )
    if as_json:
        console.print_json(json.dumps(asdict(summary)))
    else:
        _print_final(console, final, summary)
    return summary


def _planted(turns: int) -> int:
    return len(FACTS) if turns >= len(FACTS) else turns


def _note(feed: list[str], turn: int, events: list[DomainEvent]) -> None:
    for event in events:
        line = None
        if isinstance(event, ObservationBufferRequested):
            line = f"turn {turn}: buffer requested for messages {event.from_seq}–{event.to_seq}"
        elif isinstance(event, ChunksActivated):
            line = (
                f"turn {turn}: activated {len(event.cycle_ids)} chunk(s), "
                f"{event.message_tokens} message tokens → {event.observation_tokens} ({event.triggered_by})"
            )
        elif isinstance(event, SyncObservationStarted):
            line = f"turn {turn}: synchronous observation of {event.message_tokens} tokens"
        elif isinstance(event, ReflectionRequested):
            line = f"turn {turn}: {event.mode} reflection of {event.line_count} lines"
        elif isinstance(event, ReflectionActivated):
            line = f"turn {turn}: reflection activated → generation {event.new_generation}"
        if line:
            feed.append(line)
    del feed[:-8]


def _bar(value: int, limit: int, marker: int | None, width: int = 40) -> Text:
    scale = max(limit, marker or 0, value, 1)
    filled = min(width, round(value / scale * width))
    text = Text("█" * filled, style="green" if value < limit else "yellow")
    text.append("░" * (width - filled), style="grey37")
    text.append(f" {value:,}/{limit:,}")
    if marker:
        text.append(f" (blockAfter {marker:,})", style="grey50")
    return text


def _render(deps: Any, stream_id: str, turn: int, turns: int, feed: list[str]) -> Panel:
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    limits = resolve_limits(config_of(deps, state), state)
    table = Table.grid(padding=(0, 1))
    table.add_row("messages", _bar(state.pending_tokens, limits.message_threshold, limits.block_after))
    table.add_row("observations", _bar(state.observation_tokens, limits.observation_threshold, None))
    stats = state.stats
    table.add_row(
        "work",
        Text(
            f"observer calls {stats.observer_calls} · chunks {stats.buffered_chunks}"
            f" (waiting {len(state.chunks)}) · activations {stats.activations}"
            f" · sync {stats.sync_observations}"
            f" · reflections {stats.reflections} · generation {state.generation}"
        ),
    )
    return Panel(
        Group(table, Text("\n".join(feed), style="cyan")),
        title=f"om demo — turn {turn}/{turns}",
        border_style="blue",
    )


def _print_final(console: Console, window: ContextWindow, summary: DemoSummary) -> None:
    console.rule("final context (what the agent would send to its model)")
    for index, system in enumerate(window.system):
        console.print(Panel(system, title=f"system {index + 1}", border_style="grey50"))
    if window.continuation:
        console.print(Panel(window.continuation, title="continuation", border_style="grey50"))
    for message in window.messages:
        text = " ".join(str(p.get("text", "")) for p in message.get("parts", []) if isinstance(p, dict))
        console.print(f"[bold]{message.get('role')}[/bold]: {text}")
    console.rule("summary")
    table = Table(show_header=False)
    for key, value in asdict(summary).items():
        table.add_row(key, str(value))
    console.print(table)
