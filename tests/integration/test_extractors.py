"""Extractors end to end: inline and JSON-Schema values of the Observer and the Reflector reach the record,
the context and the metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from om_core.application.append import append_messages
from om_core.application.configuration import record_config
from om_core.application.context import get_context
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.application.threads import describe_thread
from om_core.bootstrap import build_inline
from om_core.domain.context import om_metadata
from om_core.domain.events import ReflectionBuffered, ReflectionCompleted, from_recorded
from om_core.domain.state import fold, initial_state

PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {
        "messageTokens": 200,
        "bufferTokens": False,
        "extract": [
            {"name": "home-city", "instructions": "The city where the user lives (lives, city)."},
            {
                "name": "pets",
                "instructions": "The user's pets.",
                "schema": {
                    "type": "object",
                    "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                },
                "metadataKeyPath": "profile.pets",
            },
        ],
    },
}


def test_extracted_values_reach_context_and_metadata(tmp_path: Path) -> None:
    deps, _ = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=PROFILE)
    for i in range(10):
        append_messages(
            deps,
            tenant="a",
            thread_id="t",
            messages=[
                {
                    "id": f"m{i}",
                    "role": "user",
                    "content": f"I live in Lisbon near the river. My dog Biscuit is {i} years old.",
                }
            ],
        )
    window = get_context(deps, tenant="a", thread_id="t")
    state = load_state(deps.records, deps.store, thread_stream_id("a", "t"))
    assert state.stats.sync_observations >= 1
    assert "home-city" in state.extracted and "Lisbon" in str(state.extracted["home-city"])
    assert isinstance(state.extracted.get("pets"), dict)  # the schema extractor answered valid JSON
    assert any(s.startswith("<home-city>") for s in window.system)
    meta = om_metadata(state, record_config(deps.profile, state))
    assert "Lisbon" in str(meta["extracted"]["home-city"])
    assert meta["profile"]["pets"] == state.extracted["pets"]


def reflection_profile(*, buffered: bool) -> dict[str, Any]:
    return {
        "model": "om-local/extractive",
        "observation": {"messageTokens": 200} if buffered else {"messageTokens": 200, "bufferTokens": False},
        "reflection": {
            "observationTokens": 300,
            "extract": [
                {"name": "home-city", "instructions": "The city where the user lives (lives, city)."},
                {
                    "name": "pets",
                    "instructions": "The user's pets.",
                    "schema": {"type": "object", "properties": {"puppy": {"type": "string"}}},
                    "metadataKeyPath": "profile.pets",
                },
                # the local model cannot answer this pattern: the extractor fails on every reflection
                {
                    "name": "code",
                    "instructions": "A code.",
                    "schema": {"type": "string", "pattern": "^NEVER$"},
                },
            ],
        },
    }


@pytest.mark.parametrize("buffered", [False, True], ids=["sync", "buffered"])
def test_reflection_extractors_reach_events_record_context_and_metadata(
    tmp_path: Path, buffered: bool
) -> None:
    deps, _ = build_inline(
        database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=reflection_profile(buffered=buffered)
    )
    stream = thread_stream_id("a", "t")
    outcome_type = ReflectionBuffered if buffered else ReflectionCompleted
    outcomes: list[ReflectionBuffered | ReflectionCompleted] = []
    # new facts in every message, so the log grows until it is reflected
    for i in range(40):
        text = f"My colleague Ana{i} works in Office {i * 7} and joined on March {i + 1}, 2026."
        if i == 0:
            text = "I live in Lisbon near the river. My puppy is called Biscuit. " + text
        message = {"id": f"m{i}", "role": "user", "content": text, "createdAt": f"2026-03-02T10:{i:02d}:00Z"}
        append_messages(deps, tenant="a", thread_id="t", messages=[message])
        get_context(deps, tenant="a", thread_id="t")
        events = [from_recorded(e) for e in deps.store.read_stream(stream)]
        outcomes = [e for e in events if isinstance(e, outcome_type)]
        if outcomes:
            break
    assert outcomes, f"no {outcome_type.__name__} in {[type(e).__name__ for e in events]}"
    outcome = outcomes[0]
    assert "Lisbon" in str(outcome.extracted["home-city"])  # inline, from the Reflector's answer
    assert "Biscuit" in str(outcome.extracted["pets"]["puppy"])  # schema, from the structured call
    assert set(outcome.extraction_failures) == {"code"} and "outside its schema" in str(
        outcome.extraction_failures["code"]
    )
    # the values apply with the outcome itself (a buffered reflection's before it is activated), and the
    # failing extractor did not cost the reflection
    applied = fold(initial_state(stream), events[: events.index(outcome) + 1])
    assert applied.extracted == dict(outcome.extracted)
    if buffered:
        assert applied.buffered_reflection is not None and applied.buffered_reflection.text == outcome.text
    else:
        assert applied.generation == 1 and applied.log[0].text == outcome.text

    state = load_state(deps.records, deps.store, stream)
    assert "code" not in state.extracted
    window = get_context(deps, tenant="a", thread_id="t")
    assert any(s.startswith("<home-city>") and "Lisbon" in s for s in window.system)
    assert any(s.startswith("<pets>") and "Biscuit" in s for s in window.system)
    om = describe_thread(deps, tenant="a", thread_id="t").metadata["mastra"]["om"]
    assert "Lisbon" in om["extracted"]["home-city"]
    assert om["profile"]["pets"] == state.extracted["pets"]
    assert "code" not in om["extracted"]
