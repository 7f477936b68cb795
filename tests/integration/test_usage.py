"""Usage on the outcome events and their parts: what each Observer and Reflector cycle cost, failed
cycles included, with the local model through litellm (errorRate and output modes make it fail)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from om_core.application.append import append_messages, configure_thread
from om_core.application.deps import Deps
from om_core.application.manual import observe_now, reflect_now
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.config import parse_memory_config
from om_core.domain.events import (
    UNRECORDED_USAGE,
    ObservationFailure,
    ReflectionFailed,
    SyncObservationCompleted,
    SyncObservationFailed,
    decode_event,
    from_recorded,
)
from om_core.domain.parts import Part, parts_for_events
from om_core.domain.state import initial_state

MODEL = "om-local/extractive"
PROFILE: dict[str, Any] = {
    "model": MODEL,
    "observation": {"messageTokens": 30_000, "bufferTokens": False},
    "reflection": {"observationTokens": 40_000},
    "modelRetry": {"maxRetries": 2},
}


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Deps]:
    built, dispatcher = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=PROFILE)
    yield built
    dispatcher.close()


def _talk(deps: Deps, thread_id: str, count: int = 6) -> None:
    messages = [
        {
            "id": f"{thread_id}-m{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"My colleague Person{i} moved to Office {i * 7} in Lisbon last week.",
            "createdAt": f"2026-03-02T10:00:{i:02d}Z",
        }
        for i in range(count)
    ]
    append_messages(deps, tenant="a", thread_id=thread_id, messages=messages)


def _parts(deps: Deps, thread_id: str) -> list[Part]:
    stream_id = thread_stream_id("a", thread_id)
    events = [from_recorded(r) for r in deps.store.read_stream(stream_id)]
    config = parse_memory_config(PROFILE)
    batches = parts_for_events(initial_state(stream_id), events, config, status_after_each=False)
    return [p for _, batch in batches for p in batch]


def _events(deps: Deps, thread_id: str) -> list[Any]:
    return [from_recorded(r) for r in deps.store.read_stream(thread_stream_id("a", thread_id))]


def test_a_completed_observation_records_its_usage_on_the_event_and_its_end_part(deps: Deps) -> None:
    _talk(deps, "t")
    assert observe_now(deps, tenant="a", thread_id="t").outcome == "completed"
    (completed,) = [e for e in _events(deps, "t") if isinstance(e, SyncObservationCompleted)]
    assert completed.usage.model == MODEL
    assert completed.usage.input_tokens > 0 and completed.usage.output_tokens > 0
    assert completed.usage.calls == 1
    (end,) = [p for p in _parts(deps, "t") if p["type"] == "data-om-observation-end"]
    usage = end["data"]["usage"]
    assert usage == {
        "model": MODEL,
        "inputTokens": completed.usage.input_tokens,
        "outputTokens": completed.usage.output_tokens,
        "totalTokens": completed.usage.input_tokens + completed.usage.output_tokens,
        "costUsd": completed.usage.cost_usd,
        "latencyMs": completed.usage.latency_ms,
        "attempts": 1,
    }


def test_an_observer_failing_at_the_gateway_records_every_attempt_and_the_time_they_took(deps: Deps) -> None:
    options = {"omLocal": {"errorRate": 1.0, "latencyMs": 15}}
    configure_thread(deps, tenant="a", thread_id="t", config={"observation": {"providerOptions": options}})
    _talk(deps, "t")
    assert observe_now(deps, tenant="a", thread_id="t").outcome == "failed"
    (failed,) = [e for e in _events(deps, "t") if isinstance(e, SyncObservationFailed)]
    # one call, retried twice by the gateway (modelRetry.maxRetries): three attempts, each ≥ 15 ms
    assert failed.attempts == 3 and failed.usage.calls == 3
    assert failed.usage.model == MODEL
    assert failed.usage.latency_ms >= 45
    assert failed.usage.input_tokens == failed.usage.output_tokens == 0
    (part,) = [p for p in _parts(deps, "t") if p["type"] == "data-om-observation-failed"]
    assert part["data"]["usage"]["attempts"] == 3
    assert part["data"]["usage"]["latencyMs"] == failed.usage.latency_ms


def test_an_observer_answering_unusably_records_the_tokens_of_both_answers(deps: Deps) -> None:
    options = {"omLocal": {"output": "degenerate"}}
    configure_thread(deps, tenant="a", thread_id="t", config={"observation": {"providerOptions": options}})
    _talk(deps, "t")
    assert observe_now(deps, tenant="a", thread_id="t").outcome == "failed"
    (failed,) = [e for e in _events(deps, "t") if isinstance(e, SyncObservationFailed)]
    # the Observer is asked twice; both answers were paid for
    assert failed.usage.calls == 2
    assert failed.usage.input_tokens > 0 and failed.usage.output_tokens > 0


def test_a_failed_reflection_records_the_usage_of_its_ladder(deps: Deps) -> None:
    _talk(deps, "t", count=12)
    assert observe_now(deps, tenant="a", thread_id="t").outcome == "completed"
    options = {"omLocal": {"output": "degenerate"}}
    configure_thread(deps, tenant="a", thread_id="t", config={"reflection": {"providerOptions": options}})
    assert reflect_now(deps, tenant="a", thread_id="t").outcome == "failed"
    (failed,) = [e for e in _events(deps, "t") if isinstance(e, ReflectionFailed)]
    assert failed.usage.calls == len(failed.levels_tried) >= 2
    assert failed.usage.output_tokens > 0 and failed.usage.model == MODEL
    (part,) = [p for p in _parts(deps, "t") if p["type"] == "data-om-observation-failed"]
    assert part["data"]["operationType"] == "reflection"
    assert part["data"]["usage"]["attempts"] == failed.usage.calls


def test_failures_stored_before_usage_was_recorded_still_load() -> None:
    old = {"cycle_id": "c1", "error": "boom", "attempts": 2, "failed_at": "2026-01-01T00:00:00.000Z"}
    event = decode_event("ObservationBufferFailed", old)
    assert isinstance(event, ObservationFailure) and event.usage == UNRECORDED_USAGE
    reflection = decode_event(
        "ReflectionFailed",
        {
            "cycle_id": "c2",
            "mode": "sync",
            "error": "x",
            "observation_tokens": 5,
            "failed_at": old["failed_at"],
        },
    )
    assert isinstance(reflection, ReflectionFailed) and reflection.usage.calls == 0
