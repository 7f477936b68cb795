"""reflection.extract: prompted in the Reflector's request, read from its answer (inline) or asked in a
structured call after the ladder (schema), folded into the record's values and shown in the context.

The Reflector's model is scripted in the ladder tests: what each call answers is what is under test. The
local model's own answers are checked at the end, through its ``respond`` entry point.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from om_core.adapters.models.om_local import OmLocalOptions, respond
from om_core.application.observer import extractor_specs
from om_core.application.ports import (
    EmbeddingRequest,
    EmbeddingResponse,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ModelUsage,
    TransientModelError,
)
from om_core.application.reflector import reflect_observations
from om_core.domain.config import MemoryConfig, parse_memory_config
from om_core.domain.context import build_context, om_metadata
from om_core.domain.events import ReflectionBuffered, ReflectionCompleted, ReflectionRequested, decode_event
from om_core.domain.prompts import (
    REFLECTOR_PRIOR_VALUES_HEADING,
    build_extractor_request,
    build_reflector_request,
    extractor_response_format,
)
from om_core.domain.state import RecordState, fold
from om_core.domain.timeutil import format_time
from tests.unit.test_policy import NOW, _log_state

SOURCE = "\n".join(f"* 🔴 (10:{i:02d}) User said fact {i} about Lisbon" for i in range(30))
HOME: dict[str, Any] = {"name": "home-city", "instructions": "The city where the user lives."}
PETS: dict[str, Any] = {
    "name": "pets",
    "instructions": "The user's pets.",
    "schema": {"type": "object", "properties": {"puppy": {"type": "string"}}, "required": ["puppy"]},
    "metadataKeyPath": "profile.pets",
}
CODE: dict[str, Any] = {
    "name": "code",
    "instructions": "A code.",
    "schema": {"type": "string", "pattern": "^[A-Z]{3}$"},
}


def config_with(*extractors: dict[str, Any]) -> MemoryConfig:
    return parse_memory_config({"model": "om-local/extractive", "reflection": {"extract": list(extractors)}})


def answer(lines: int, home: str | None = None) -> str:
    body = "\n".join(f"* 🔴 (10:{i:02d}) kept fact {i}" for i in range(lines))
    tail = f"\n<home-city>\n{home}\n</home-city>" if home else ""
    return f"<observations>\nDate: Mar 2, 2026\n{body}\n</observations>{tail}"


class ScriptedModel(ModelGateway):
    """Reflector calls answer the next scripted reply; structured calls answer by extractor slug."""

    def __init__(self, replies: list[str], structured: dict[str, Callable[[], str]]) -> None:
        self.replies = replies
        self.structured = structured
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if request.response_schema is not None:
            text = self.structured[request.purpose.removeprefix("extractor:")]()
        else:
            text = self.replies[min(len(self.replies), self.reflector_calls) - 1]
        return ModelResponse(
            text=text, model=request.model, usage=ModelUsage(5, 5), latency_ms=1.0, attempts=1
        )

    @property
    def reflector_calls(self) -> int:
        return sum(1 for r in self.requests if r.response_schema is None)

    def embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        raise AssertionError("reflection never embeds")


def test_inline_values_come_from_the_committed_attempt_and_schema_values_from_their_call() -> None:
    # no attempt gets under the target: the smallest (the second) is committed, with its own value
    model = ScriptedModel(
        [answer(20, "Porto"), answer(12, "Lisbon"), answer(18, "Faro"), answer(19)],
        {"pets": lambda: '{"puppy": "Biscuit"}'},
    )
    result = reflect_observations(
        model,
        config_with(HOME, PETS),
        SOURCE,
        target_tokens=5,
        buffered=False,
        prior_values={"pets": {"puppy": "Rex"}},
        start_level=0,
    )
    assert result.extracted == {"home-city": "Lisbon", "pets": {"puppy": "Biscuit"}}
    assert result.extraction_failures == {}
    assert "<home-city>" not in result.text and result.text.count("kept fact") == 12
    structured = [r for r in model.requests if r.response_schema is not None]
    assert len(structured) == 1  # after the ladder, once, not per attempt
    call = structured[0]
    assert call.purpose == "extractor:pets" and call.response_schema == PETS["schema"]
    assert "during reflection" in call.messages[0]["content"]
    user = call.messages[1]["content"]
    assert '{"puppy": "Rex"}' in user and "kept fact 11" in user  # the prior value, and the new memory
    assert result.usage.calls == 5  # four Reflector attempts and the extractor's call


def test_a_failing_extractor_costs_neither_the_reflection_nor_the_others() -> None:
    def unavailable() -> str:
        raise TransientModelError("provider down", model="m", attempts=3)

    model = ScriptedModel(
        [answer(2, "Lisbon")],
        {"pets": lambda: "not json at all", "code": lambda: '"abcd"', "other": unavailable},
    )
    other: dict[str, Any] = {"name": "other", "instructions": "x", "schema": {"type": "string"}}
    result = reflect_observations(
        model,
        config_with(HOME, PETS, CODE, other),
        SOURCE,
        target_tokens=500,
        buffered=True,
        prior_values={},
        start_level=0,
    )
    assert result.under_target and result.text.count("kept fact") == 2
    assert result.extracted == {"home-city": "Lisbon"}
    assert set(result.extraction_failures) == {"pets", "code", "other"}
    assert "did not answer with JSON" in result.extraction_failures["pets"]
    assert "outside its schema" in result.extraction_failures["code"]
    assert "provider down" in result.extraction_failures["other"]


def test_the_reflector_prompt_asks_for_inline_extractors_only_and_carries_their_values() -> None:
    specs = extractor_specs(config_with(HOME, PETS).reflection.extract)
    system = build_reflector_request(
        SOURCE, level=1, target_tokens=100, extractors=specs, prior_values={"home-city": "Lisbon", "pets": {}}
    )[0]["content"]
    assert "Extractor sections: home-city" in system and "<home-city>" in system
    assert "pets" not in system  # a schema extractor has its own call
    carried = system[system.index(REFLECTOR_PRIOR_VALUES_HEADING) :]
    assert "- home-city (home-city): Lisbon" in carried
    assert "Omit a section only when you have nothing to say about it" in system
    plain = build_reflector_request(SOURCE, level=1, target_tokens=100)[0]["content"]
    assert REFLECTOR_PRIOR_VALUES_HEADING not in plain and "extractor section" not in plain


def reflection_requested(state: RecordState, mode: Literal["sync", "buffered"]) -> ReflectionRequested:
    return ReflectionRequested(
        cycle_id="r1",
        mode=mode,
        generation=state.generation,
        line_count=len(state.log_lines()),
        input_tokens=state.observation_tokens,
        target_tokens=state.observation_tokens // 2,
        requested_at=format_time(NOW),
    )


def test_a_completed_reflection_folds_its_values_into_the_record() -> None:
    state = _log_state(6, 20)
    state = fold(state, [reflection_requested(state, "sync")])
    state = fold(
        state,
        [
            ReflectionCompleted(
                cycle_id="r1",
                new_generation=1,
                line_count=6,
                input_tokens=120,
                text="* 🔴 (12:00) condensed",
                tokens=10,
                observation_tokens=10,
                over_target=False,
                extracted={"home-city": "Lisbon", "pets": {"puppy": "Biscuit"}},
                extraction_failures={"code": "no"},
                completed_at=format_time(NOW),
            )
        ],
    )
    assert state.generation == 1
    assert state.extracted == {"home-city": "Lisbon", "pets": {"puppy": "Biscuit"}}


def test_a_buffered_reflection_writes_its_values_when_buffered_even_if_it_is_never_activated() -> None:
    state = _log_state(6, 20)
    state = fold(state, [reflection_requested(state, "buffered")])
    not_condensed = ReflectionBuffered(
        cycle_id="r1",
        generation=0,
        line_count=6,
        input_tokens=120,
        text="* 🔴 (12:00) as long as before",
        tokens=120,
        extracted={"home-city": "Lisbon"},
        completed_at=format_time(NOW),
    )
    state = fold(state, [not_condensed])
    assert state.buffered_reflection is None and state.generation == 0
    assert state.extracted == {"home-city": "Lisbon"}


def test_reflection_events_stored_before_extractors_still_load() -> None:
    old = {
        "cycle_id": "r1",
        "generation": 0,
        "line_count": 3,
        "input_tokens": 90,
        "text": "x",
        "tokens": 10,
        "completed_at": format_time(NOW),
    }
    event = decode_event("ReflectionBuffered", old)
    assert isinstance(event, ReflectionBuffered)
    assert event.extracted == {} and event.extraction_failures == {}
    completed = decode_event(
        "ReflectionCompleted",
        {k: v for k, v in old.items() if k != "generation"}
        | {"new_generation": 1, "observation_tokens": 10, "over_target": False},
    )
    assert isinstance(completed, ReflectionCompleted) and completed.extracted == {}


def test_the_context_and_the_metadata_show_reflection_values() -> None:
    hidden: dict[str, Any] = {"name": "hidden", "instructions": "x", "includePreviousExtraction": False}
    config = parse_memory_config(
        {
            "model": "om-local/extractive",
            "observation": {"extract": [HOME]},
            "reflection": {"extract": [HOME, PETS, hidden]},
        }
    )
    state = _log_state(3, 20).model_copy(
        update={"extracted": {"home-city": "Lisbon", "pets": {"puppy": "Biscuit"}, "hidden": "h"}}
    )
    system = build_context(state, config, NOW).system
    assert system.count("<home-city>\nLisbon\n</home-city>") == 1  # in both lists, shown once
    assert '<pets>\n{"puppy": "Biscuit"}\n</pets>' in system
    assert not any(s.startswith("<hidden>") for s in system)
    meta = om_metadata(state, config)
    assert meta["extracted"] == {"home-city": "Lisbon", "hidden": "h"}
    assert meta["profile"] == {"pets": {"puppy": "Biscuit"}}


def local_reflection(fact: str, prior: dict[str, Any]) -> str:
    log = f"Date: Mar 2, 2026\n* 🔴 (10:00) User said: {fact}\n* 🟡 (10:05) User asked about trams"
    city = {"name": "home-city", "instructions": "The city where the user lives (lives, city)."}
    specs = extractor_specs(config_with(city).reflection.extract)
    request = build_reflector_request(log, level=0, target_tokens=1000, extractors=specs, prior_values=prior)
    return respond(request, OmLocalOptions()).text


def test_the_local_model_answers_a_reflection_extractor_inline() -> None:
    reply = local_reflection("I live in Lisbon near the river", {"home-city": "Porto"})
    assert reply.index("</observations>") < reply.index("<home-city>")
    assert "<home-city>\nI live in Lisbon near the river\n</home-city>" in reply


def test_the_local_model_carries_a_recorded_value_forward_when_nothing_mentions_it() -> None:
    assert "<home-city>\nPorto\n</home-city>" in local_reflection("I like coffee", {"home-city": "Porto"})
    assert "<home-city>" not in local_reflection("I like coffee", {})


def test_the_local_model_answers_a_reflection_schema_extractor_from_the_new_memory() -> None:
    spec = extractor_specs(config_with(PETS).reflection.extract)[0]
    request = build_extractor_request(
        spec, observations="* 🔴 (10:00) User said: my puppy is called Biscuit", source="reflection"
    )
    reply = respond(request, OmLocalOptions(), response_format=extractor_response_format(spec)).text
    assert json.loads(reply) == {"puppy": "my puppy is called Biscuit"}
