"""The compression ladder (docs/semantics.md, The compression ladder): Mastra 1.31's worked scenarios, with
our fix: the smallest candidate wins.

The Reflector's model is scripted here: the ladder's logic is what is under test, and a scripted model is
the only way to make each attempt answer what the scenario needs. The real local model is exercised by the
integration tests.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from om_core.application.ports import (
    EmbeddingRequest,
    EmbeddingResponse,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ModelUsage,
)
from om_core.application.reflector import ReflectorFailedError, reflect_observations
from om_core.domain.config import parse_memory_config
from om_core.domain.prompts import REFLECTOR_LEVEL_LINE

SOURCE = "\n".join(f"* 🔴 (10:{i:02d}) the user mentioned fact number {i} about Lisbon" for i in range(40))
DEGENERATE = "<observations>\n" + "\n".join(
    ["* 🟡 (10:00) the assistant repeated one long looping sentence about the weather again and again"] * 300
)


def observations(lines: int) -> str:
    body = "\n".join(f"* 🔴 (10:{i:02d}) kept fact {i} about Priya in Lisbon" for i in range(lines))
    return f"<observations>\nDate: Mar 2, 2026\n{body}\n</observations>"


class ScriptedReflector(ModelGateway):
    def __init__(self, answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.levels: list[int] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        prompt = str(request.messages[-1]["content"])
        level = next(level for level in range(5) if REFLECTOR_LEVEL_LINE.format(level=level) in prompt)
        self.levels.append(level)
        text = self.answers[min(len(self.levels), len(self.answers)) - 1]
        return ModelResponse(
            text=text, model=request.model, usage=ModelUsage(10, 10), latency_ms=1.0, attempts=1
        )

    def embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        raise AssertionError("the Reflector never embeds")


def config(model: str = "om-local/extractive") -> object:
    return parse_memory_config({"model": model})


def test_scenario_23_over_target_every_time_tries_four_levels_and_keeps_the_smallest() -> None:
    # Mastra returns the last attempt; the docs (and we) commit the smallest non-degenerate candidate
    model = ScriptedReflector([observations(30), observations(25), observations(28), observations(29)])
    result = reflect_observations(
        model, config(), SOURCE, target_tokens=50, buffered=False, prior_values={}, start_level=0
    )
    assert model.levels == [0, 1, 2, 3]
    assert not result.under_target
    assert result.text.count("kept fact") == 25


def test_scenario_23_success_on_the_second_attempt_stops_there() -> None:
    model = ScriptedReflector([observations(30), observations(2)])
    result = reflect_observations(
        model, config(), SOURCE, target_tokens=60, buffered=False, prior_values={}, start_level=0
    )
    assert model.levels == [0, 1] and result.under_target and result.levels_tried == [0, 1]


@pytest.mark.parametrize(
    ("model_id", "levels"),
    [
        ("google/gemini-2.5-flash", [2, 3, 4]),
        ("google/gemini-3.1-flash-lite-preview", [1, 2, 3, 4]),
    ],
)
def test_scenario_24_start_level_by_model(model_id: str, levels: list[int]) -> None:
    model = ScriptedReflector([observations(30)])
    reflect_observations(model, config(model_id), SOURCE, target_tokens=10, buffered=False, prior_values={})
    assert model.levels == levels


def test_scenario_25_all_degenerate_commits_nothing() -> None:
    model = ScriptedReflector([DEGENERATE])
    with pytest.raises(ReflectorFailedError) as failure:
        reflect_observations(
            model, config(), SOURCE, target_tokens=50, buffered=True, prior_values={}, start_level=0
        )
    assert failure.value.levels_tried == [0, 1, 2, 3]


def test_scenario_25_empty_first_then_content_succeeds() -> None:
    model = ScriptedReflector(["<observations>\n</observations>", observations(2)])
    result = reflect_observations(
        model, config(), SOURCE, target_tokens=60, buffered=False, prior_values={}, start_level=0
    )
    assert model.levels == [0, 1] and result.under_target


def test_degenerate_candidates_are_never_chosen_even_when_smaller() -> None:
    model = ScriptedReflector([observations(30), DEGENERATE, observations(29), observations(31)])
    result = reflect_observations(
        model, config(), SOURCE, target_tokens=5, buffered=False, prior_values={}, start_level=0
    )
    assert "looping" not in result.text and result.text.count("kept fact") == 29


def test_reflection_continuation_hints_reach_the_result_and_can_be_turned_off() -> None:
    answer = (
        observations(2)
        + "\n<current-task>\nPlanning the Lisbon trip\n</current-task>"
        + "\n<suggested-response>\nAsk which dates suit Priya.\n</suggested-response>"
    )
    seen: list[str] = []

    class Recording(ScriptedReflector):
        def complete(self, request: ModelRequest) -> ModelResponse:
            seen.append(str(request.messages[0]["content"]))
            return super().complete(request)

    on = reflect_observations(
        Recording([answer]), config(), SOURCE, target_tokens=10_000, buffered=False, prior_values={}
    )
    # the suggested response is taken; the current task is not (Mastra ignores the Reflector's)
    assert on.suggested_response == "Ask which dates suit Priya."
    assert "<current-task>" in seen[-1]
    off_config = parse_memory_config(
        {"model": "om-local/extractive", "reflection": {"continuationHints": False}}
    )
    reflect_observations(
        Recording([answer]), off_config, SOURCE, target_tokens=10_000, buffered=False, prior_values={}
    )
    assert "<current-task>" not in seen[-1], "the Reflector is not asked for hints"
    buffered = reflect_observations(
        Recording([observations(2)]), config(), SOURCE, target_tokens=10_000, buffered=True, prior_values={}
    )
    assert "<current-task>" not in seen[-1] and buffered.suggested_response is None
