"""What the Observer's answer must hold for a cycle to succeed: an empty or degenerate answer is a failed
attempt (asked once more, then the cycle fails), never observations that drop the messages unwritten.

The model is scripted, as in the Reflector's ladder tests: each attempt must answer what the case needs.
The real local model is exercised by the end-to-end tests (tests/e2e/test_no_500.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from om_core.application.observer import ObserverFailedError, observe_messages
from om_core.application.ports import (
    EmbeddingRequest,
    EmbeddingResponse,
    ModelConfigurationError,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ModelUsage,
)
from om_core.domain.config import parse_memory_config
from om_core.domain.message_input import message_to_json, normalize_message
from om_core.domain.state import RecordState, WindowMessage, initial_state, window_message
from om_core.domain.timeutil import format_time

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
OBSERVED = (
    "<observations>\nDate: Mar 2, 2026\n* 🔴 (09:00) User said: my sister Priya lives in Lisbon\n"
    "</observations>"
)
EMPTY = "<observations>\n</observations>"
DEGENERATE = "<observations>\n" + "\n".join(
    ["* 🟡 (10:00) the assistant repeated one long looping sentence about the weather again and again"] * 300
)


class ScriptedObserver(ModelGateway):
    def __init__(self, answers: Sequence[str | Exception]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return ModelResponse(
            text=answer, model=request.model, usage=ModelUsage(10, 10), latency_ms=1.0, attempts=1
        )

    def embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        raise AssertionError("the Observer never embeds")


def window(*raws: dict[str, Any], thread_id: str = "t") -> list[WindowMessage]:
    out = []
    for seq, raw in enumerate(raws, start=1):
        message = normalize_message(raw, now=NOW, max_bytes=100_000, thread_id=thread_id)[0]
        out.append(
            window_message(
                seq=seq,
                message_id=message.id,
                role=message.role,
                thread_id=thread_id,
                tokens=20,
                created_at=format_time(message.created_at),
                model=None,
                message=message_to_json(message),
            )
        )
    return out


def observe(model: ModelGateway, messages: list[WindowMessage], **profile: Any) -> Any:
    config = parse_memory_config({"model": "om-local/extractive", **profile})
    state: RecordState = initial_state("a/thread/t")
    return observe_messages(model, state, config, messages, buffered=False, cycle_id="sync-obs-1")


SAID = {"id": "m1", "role": "user", "content": "My sister Priya lives in Lisbon."}


@pytest.mark.parametrize("first", [EMPTY, "", "I have nothing to add.\n", DEGENERATE])
def test_an_unusable_first_answer_is_asked_once_more(first: str) -> None:
    model = ScriptedObserver([first, OBSERVED])
    result = observe(model, window(SAID))
    assert model.calls == 2
    assert "Priya" in result.observations
    assert result.usage.calls == 2


def test_two_answers_without_observations_fail_the_cycle() -> None:
    model = ScriptedObserver([DEGENERATE, EMPTY])
    with pytest.raises(ObserverFailedError) as failed:
        observe(model, window(SAID))
    assert model.calls == 2 and failed.value.attempts == 2
    assert "degenerate repetition, no observations" in str(failed.value)


def test_a_transcript_with_nothing_to_observe_is_not_sent() -> None:
    # only application data: nothing reaches a model, so there is nothing to lose either
    model = ScriptedObserver([EMPTY])
    data_only = {"id": "d1", "role": "assistant", "parts": [{"type": "data-progress", "data": {"p": 1}}]}
    result = observe(model, window(data_only))
    assert model.calls == 0
    assert result.observations == "" and result.observation_tokens == 0


def test_a_model_that_cannot_be_called_fails_the_cycle() -> None:
    model = ScriptedObserver([ModelConfigurationError("model 'openai/gpt-4o-mini' needs OPENAI_API_KEY")])
    with pytest.raises(ObserverFailedError, match="OPENAI_API_KEY"):
        observe(model, window(SAID))


def test_resource_scope_answers_with_only_empty_thread_sections_fail() -> None:
    empty_threads = '<observations>\n<thread id="x">\n</thread>\n</observations>'
    model = ScriptedObserver([empty_threads])
    with pytest.raises(ObserverFailedError, match="no observations"):
        observe(model, window(SAID), scope="resource")
    assert model.calls == 2
