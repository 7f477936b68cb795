"""Extractors end to end: inline and JSON-Schema values reach the record, the context and the metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from om_core.application.append import append_messages
from om_core.application.configuration import record_config
from om_core.application.context import get_context
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.context import om_metadata

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
