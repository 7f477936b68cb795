"""Parity with Mastra 1.31 on the recorded conversations (tests/fixtures/parity, testing/parity.py).

Each trace is replayed through om's engine turn by turn, as Mastra's harness drove Mastra's, with a test
double answering like Mastra's mock models. om must count every message as Mastra did, never observe a
message twice, keep the turn's own question raw, and differ from Mastra's turns only in the ways the table
of deliberate differences in docs/architecture.md describes.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from om_core.domain.config import parse_memory_config
from om_core.domain.context import OBSERVATIONS_CLOSE, OBSERVATIONS_OPEN, build_context
from om_core.domain.events import SyncObservationCompleted
from om_core.domain.message_input import normalize_message
from om_core.domain.transcript import format_transcript
from testing import parity

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


@pytest.fixture(scope="module", params=parity.TRACES)
def compared(request: pytest.FixtureRequest) -> tuple[parity.Replay, dict[str, Any], dict[str, Any]]:
    name = request.param
    run = parity.replay(name, parity.load_trace(name))
    mastra = parity.load_mastra(name)
    return run, mastra, parity.compare(name, run, mastra)


def test_every_message_counts_as_many_tokens_as_in_mastra(
    compared: tuple[parity.Replay, dict[str, Any], dict[str, Any]],
) -> None:
    run, mastra, comparison = compared
    assert len(run.message_tokens) == len(mastra["turns"]) == 100
    assert comparison["tokenMismatches"] == []
    # and so does the window, up to the first turn where either engine took messages out of it
    assert comparison["windowComparedThroughTurn"] >= 10
    assert comparison["windowMismatches"] == []


def test_no_message_is_observed_twice(
    compared: tuple[parity.Replay, dict[str, Any], dict[str, Any]],
) -> None:
    run, _, comparison = compared
    found = parity.coverage(run)
    # the check means something only if observation took most of the conversation
    assert found.ranges and found.observed_through > len(found.messages) // 2
    assert comparison["observedTwice"] == []


def test_no_message_is_observed_twice_across_synchronous_reflections() -> None:
    # where Mastra observed messages again: after a synchronous reflection. Small budgets bring several
    # into the first 60 turns of the conversation
    trace = parity.load_trace("nobuffer-200")
    trace = {
        **trace,
        "config": {
            "scope": "thread",
            "observation": {"messageTokens": 500, "bufferTokens": False},
            "reflection": {"observationTokens": 600},
        },
        "turns": trace["turns"][:120],
    }
    run = parity.replay("nobuffer-120-small-budgets", trace)
    summary = parity.om_record(run)["summary"]
    assert summary["syncReflections"] >= 2 and summary["syncObservations"] >= 10
    assert parity.observed_twice(run) == []
    assert all(run.newest_user_raw.values())
    # the check sees it when a range is observed a second time
    version, first_sync = next((v, e) for v, e in run.events if isinstance(e, SyncObservationCompleted))
    doubled = replace(run, events=[*run.events, (version, first_sync)])
    assert f"message seq {first_sync.from_seq} observed 2 times" in parity.observed_twice(doubled)[0]


def test_the_turns_own_question_is_raw_in_every_context(
    compared: tuple[parity.Replay, dict[str, Any], dict[str, Any]],
) -> None:
    _, _, comparison = compared
    assert comparison["newestUserMessageObserved"] == []


def test_every_difference_from_mastra_is_a_documented_one(
    compared: tuple[parity.Replay, dict[str, Any], dict[str, Any]],
) -> None:
    _, _, comparison = compared
    findings = parity.differences(comparison)
    broken = [f for f in findings if not f.holds]
    assert not broken, (
        f"{comparison['trace']}: differences from Mastra that no documented one explains:\n"
        + ("\n".join(f"- {f.kind}: {f.rule}: {f.detail}" for f in broken))
    )
    # each rule is a row of the table, so the table and the checks cannot drift apart
    table = ARCHITECTURE.read_text()
    assert {f.rule for f in findings} <= {rule for rule in _rules() if rule in table}


def test_an_unexplained_difference_fails_with_what_differs() -> None:
    comparison: dict[str, Any] = {
        "turnsWith": {kind: {"om": [], "mastra": []} for kind in parity.KINDS},
        "activation": {
            "om": {"count": 10, "meanTokensActivated": 900, "meanTokensLeft": 900, "turns": [5, 9]},
            "mastra": {"count": 9, "meanTokensActivated": 1359, "meanTokensLeft": 789, "turns": [13, 23]},
        },
        "phases": {kind: ["user"] for kind in parity.KINDS},
        "syncObservations": {"om": [], "mastra": []},
    }
    comparison["turnsWith"]["observationActivation"] = {"om": [5, 9], "mastra": [13, 23]}
    comparison["turnsWith"]["syncReflection"] = {"om": [40], "mastra": []}
    broken = {(f.kind, f.detail) for f in parity.differences(comparison) if not f.holds}
    assert ("observationActivation", "first: om turn 5 (user commit), Mastra turn 13 (step 0)") in broken
    assert ("observationActivation", "count: om 10, Mastra 9") in broken
    assert ("syncReflection", "count: om 1, Mastra 0") in broken


def test_the_double_writes_what_mastras_mock_observer_wrote() -> None:
    # Mastra's first synchronous observation on nobuffer-200 took the first 27 messages and wrote 417 tokens
    trace = parity.load_trace("nobuffer-200")
    messages = [
        normalize_message(
            {
                "id": str(i),
                "role": m["role"],
                "parts": [{"type": "text", "text": m["text"]}],
                "createdAt": m["at"],
            },
            now=parity.user_turns(trace)[0].user_at,
            max_bytes=1_000_000,
        )[0]
        for i, m in enumerate(trace["turns"][:27])
    ]
    written = parity.mock_observations(format_transcript(messages, gap_markers=False).text)
    assert written.startswith(
        "Date: Jan 6, 2025\n* 🔴 (09:00) User said: Can you help me with the garden shed?"
    )
    assert parity.tokenx(written) == 417


# a log with every construct the context rewrites, in the forms real Observers write them
EVERY_CONSTRUCT = """Date: Jan 6, 2025
* 🔴 (09:00) [O1] User's allotment is plot 31 [garden, plot]
  [O1-N1] * 🟡 the water tap -> left of the gate
* 🟡 (09:05)   Assistant listed seed suppliers, see [the list](https://seeds.example/list)
* 🟢 (09:07) User might join the committee [72 items collapsed - ID: b1fa]
* ✅ (09:10) User will order the compost tomorrow (meaning Jan 7, 2025)



Date: January 20, 2025
* 🔴 (10:00) User plans to repaint the shed (estimated late January 2025)
* 🔴 (10:01) User went away (estimated Jan 10-12, 2025) and wants to go again (estimated March to April 2025)
Date: Mar 30, 2025
* 🟡 (11:00) -> the hedge was cut"""


def test_the_context_renders_the_log_as_mastra_does(
    compared: tuple[parity.Replay, dict[str, Any], dict[str, Any]],
) -> None:
    # each log segment is one system message between the observation tags, rendered as Mastra renders
    # the log: every line kept, the 🟡/🟢 markers, anchors, tags and arrows gone, dates made relative
    run, _, _ = compared
    config = parse_memory_config(parity.profile_for(parity.load_trace(run.name)))
    extra = run.final.log[0].model_copy(update={"text": EVERY_CONSTRUCT})
    state = run.final.model_copy(update={"log": [*run.final.log, extra]})
    assert len(run.final.log) >= 2
    start = datetime(2025, 1, 6, 9, 30, tzinfo=UTC)
    for now in (
        start + timedelta(days=days, hours=hours) for days in (0, 1, 5, 20, 90, 400) for hours in (0, 13)
    ):
        system = build_context(state, config, now).system
        rendered = system[system.index(OBSERVATIONS_OPEN) + 1 : system.index(OBSERVATIONS_CLOSE)]
        expected = [parity.mastra_context_observations(segment.text, now) for segment in state.log]
        assert rendered == [text for text in expected if text.strip()]
        assert not any(marker in text for text in rendered for marker in ("🟡", "🟢", "[O1", "->"))


def _rules() -> list[str]:
    return [parity.COMMIT, parity.FRESH, parity.TAIL, parity.BOUNDARY, parity.REFLECTION]
