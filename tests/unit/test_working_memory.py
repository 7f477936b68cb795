"""Working memory kept by the Observer: its options, the Observer's request, the reply's section, the
fold of the outcome events (old ones included), the context and the local model's answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from om_core.adapters.models.om_local import observe_transcript
from om_core.domain.config import DEFAULT_WORKING_MEMORY_TEMPLATE, ConfigError, parse_memory_config
from om_core.domain.context import build_context
from om_core.domain.events import (
    MessageAppended,
    ObservationBufferCompleted,
    ObservationBufferRequested,
    SyncObservationCompleted,
    SyncObservationStarted,
    ThreadConfigured,
    decode_event,
)
from om_core.domain.observer_output import parse_observer_output
from om_core.domain.prompts import WORKING_MEMORY_HEADING, WorkingMemorySpec, build_observer_request
from om_core.domain.state import RecordState, fold, initial_state
from om_core.domain.timeutil import parse_time

AT = "2026-05-15T14:30:00.000Z"
TRANSCRIPT = (
    "May 15 2026:\nUser (2:30 PM): Hi, my name is Alice Moreau. I live in Lisbon and I work as a nurse.\n"
    "Assistant: Nice to meet you, Alice!"
)
MANAGED = {"observation": {"manageWorkingMemory": True}}


def problem(raw: dict[str, Any], option: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_memory_config(raw)
    rules = [p.rule for p in caught.value.problems if p.option == option]
    assert rules, caught.value
    return rules[0]


# --- options ------------------------------------------------------------------------------------------


def test_manage_working_memory_turns_it_on_in_the_records_scope() -> None:
    config = parse_memory_config(MANAGED)
    assert config.observation.manage_working_memory and config.working_memory.enabled
    assert config.working_memory.scope == "thread"
    assert config.working_memory.document_template == DEFAULT_WORKING_MEMORY_TEMPLATE
    resource = parse_memory_config({**MANAGED, "scope": "resource"})
    assert resource.working_memory.scope == "resource"
    assert parse_memory_config(resource.to_json()) == resource
    off = parse_memory_config(None)
    assert not off.observation.manage_working_memory and not off.working_memory.enabled


def test_snake_case_template_and_schema() -> None:
    config = parse_memory_config(
        {"observation": {"manage_working_memory": True}, "working_memory": {"template": "# Me\n- **Name**:"}}
    )
    assert config.working_memory.document_template == "# Me\n- **Name**:"
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert (
        parse_memory_config({**MANAGED, "workingMemory": {"schema": schema}}).working_memory.schema_ == schema
    )


@pytest.mark.parametrize(
    ("raw", "option", "says"),
    [
        ({"workingMemory": {"enabled": True}}, "workingMemory.enabled", "manageWorkingMemory"),
        ({**MANAGED, "workingMemory": {"enabled": False}}, "workingMemory.enabled", "needs working memory"),
        ({**MANAGED, "workingMemory": {"scope": "resource"}}, "workingMemory.scope", "own stream"),
        (
            {**MANAGED, "scope": "resource", "workingMemory": {"scope": "thread"}},
            "workingMemory.scope",
            "one document",
        ),
        ({**MANAGED, "workingMemory": {"agentManaged": True}}, "workingMemory.agentManaged", "tool"),
        ({**MANAGED, "workingMemory": {"useStateSignals": False}}, "workingMemory.useStateSignals", "prompt"),
        ({**MANAGED, "workingMemory": {"template": "x", "schema": {}}}, "workingMemory.schema", "not both"),
        ({**MANAGED, "workingMemory": {"template": "  "}}, "workingMemory.template", "empty"),
        ({**MANAGED, "workingMemory": {"tempalte": "x"}}, "workingMemory.tempalte", "template"),
    ],
)
def test_refused_combinations_say_why(raw: dict[str, Any], option: str, says: str) -> None:
    assert says in problem(raw, option)


def test_working_memory_is_a_reserved_extractor_name() -> None:
    extract = [{"name": "working-memory", "instructions": "x"}]
    assert "reserved" in problem({"observation": {"extract": extract}}, "observation.extract[0].name")


# --- the Observer's request and reply ----------------------------------------------------------------


def test_request_asks_for_the_document_with_template_and_current_value() -> None:
    current = "# User Information\n- **First Name**: Alice"
    system, user = build_observer_request(
        TRANSCRIPT,
        working_memory=WorkingMemorySpec(template=DEFAULT_WORKING_MEMORY_TEMPLATE, current=current),
    )
    assert "# Working memory" in system["content"] and "<working-memory>" in system["content"]
    assert "- **Occupation**:" in system["content"]
    # the current document is data: in the user message, before the transcript, never in the instructions
    assert current not in system["content"]
    text = user["content"]
    assert text.index(WORKING_MEMORY_HEADING) < text.index("## New message history to observe")
    assert f"{WORKING_MEMORY_HEADING}\n\n{current}" in text
    empty = build_observer_request(TRANSCRIPT, working_memory=WorkingMemorySpec(template="# T"))[1]["content"]
    assert f"{WORKING_MEMORY_HEADING}\n\n(empty)" in empty


def test_request_without_working_memory_is_unchanged() -> None:
    system, user = build_observer_request(TRANSCRIPT)
    assert "working-memory" not in system["content"] and WORKING_MEMORY_HEADING not in user["content"]


def test_schema_request_shows_the_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    system = build_observer_request(TRANSCRIPT, working_memory=WorkingMemorySpec(schema=schema))[0]["content"]
    assert "JSON Schema" in system and '"city"' in system and "null" in system


def test_parse_takes_the_last_section_and_keeps_it_out_of_the_observations() -> None:
    reply = (
        "<observations>\n* 🔴 (14:30) User lives in Lisbon\n</observations>\n"
        "<working-memory>\n# Old\n</working-memory>\n"
        "<working-memory>\n# User Information\n- **Location**: Lisbon\n</working-memory>"
    )
    parsed = parse_observer_output(reply, working_memory=True)
    assert parsed.working_memory == "# User Information\n- **Location**: Lisbon"
    assert parsed.observations == "* 🔴 (14:30) User lives in Lisbon"


@pytest.mark.parametrize("body", ["", "null", "  \n"])
def test_empty_or_null_section_is_no_update(body: str) -> None:
    reply = f"<observations>\n* 🔴 (14:30) x\n</observations>\n<working-memory>\n{body}\n</working-memory>"
    assert parse_observer_output(reply, working_memory=True).working_memory is None


def test_without_observations_block_the_document_is_not_taken_as_observations() -> None:
    reply = "* 🔴 (14:30) User lives in Lisbon\n<working-memory>\n- **Location**: Lisbon\n</working-memory>"
    parsed = parse_observer_output(reply, working_memory=True)
    assert parsed.working_memory == "- **Location**: Lisbon"
    assert parsed.observations == "* 🔴 (14:30) User lives in Lisbon"


# --- the local model ---------------------------------------------------------------------------------


def local_document(current: str | None, transcript: str = TRANSCRIPT, **spec: Any) -> str | None:
    system, user = build_observer_request(
        transcript, working_memory=WorkingMemorySpec(current=current, **spec)
    )
    reply = observe_transcript(user["content"], system["content"])
    return parse_observer_output(reply, working_memory=True).working_memory


def test_local_model_fills_the_template_deterministically() -> None:
    document = local_document(None, template=DEFAULT_WORKING_MEMORY_TEMPLATE)
    assert document == local_document(None, template=DEFAULT_WORKING_MEMORY_TEMPLATE)
    assert document is not None
    lines = document.splitlines()
    assert lines[0] == "# User Information"
    assert "- **First Name**: Alice" in lines and "- **Last Name**: Moreau" in lines
    assert "- **Location**: User lives in Lisbon" in lines
    assert "- **Occupation**: User works as a nurse" in lines
    assert "- **Goals**:" in lines  # nothing known: the label stays empty
    # nothing new: no section, the document stays as it is
    assert local_document(document, "May 16 2026:\nUser (9:00 AM): Thanks!", template="#") is None
    moved = local_document(
        document, "May 16 2026:\nUser (9:00 AM): I moved to Porto last week.", template="#"
    )
    assert moved is not None and "Porto" in moved and "- **First Name**: Alice" in moved


def test_local_model_answers_a_schema_with_json() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}
    document = local_document(None, schema=schema)
    assert document is not None
    assert json.loads(document) == {"name": "Alice", "city": "User lives in Lisbon"}


# --- the fold and the context ------------------------------------------------------------------------


def _messages(count: int) -> list[Any]:
    return [
        MessageAppended(
            seq=i,
            message_id=f"m{i}",
            thread_id="t",
            role="user",
            created_at=AT,
            tokens=10,
            content_hash="h",
            message={"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
            text="hi",
        )
        for i in range(1, count + 1)
    ]


def _outcome(kind: type[Any], cycle: str, first: int, last: int, document: str | None) -> Any:
    return kind(
        cycle_id=cycle,
        from_seq=first,
        to_seq=last,
        message_ids=[f"m{i}" for i in range(first, last + 1)],
        message_tokens=10 * (last - first + 1),
        observations="* 🔴 (14:30) User said hi",
        observation_tokens=8,
        last_observed_at=AT,
        completed_at=AT,
        working_memory=document,
    )


def _started(state: RecordState) -> RecordState:
    return fold(state, [ThreadConfigured(thread_id="t", at=AT), *_messages(4)])


def test_buffered_document_applies_at_buffering_and_survives_activation() -> None:
    requested = ObservationBufferRequested(
        cycle_id="b1", from_seq=1, to_seq=2, message_tokens=20, pending_tokens=40, trigger="interval",
        requested_at=AT,
    )  # fmt: skip
    state = fold(
        _started(initial_state("s")), [requested, _outcome(ObservationBufferCompleted, "b1", 1, 2, "# A")]
    )
    assert state.chunks and not state.log
    assert (state.working_memory, state.working_memory_cycle_id, state.working_memory_updated_at) == (
        "# A",
        "b1",
        AT,
    )


def test_sync_outcome_replaces_the_document_and_none_keeps_it() -> None:
    started = SyncObservationStarted(
        cycle_id="s1", from_seq=1, to_seq=2, message_tokens=20, trigger="threshold", started_at=AT
    )
    state = fold(
        _started(initial_state("s")), [started, _outcome(SyncObservationCompleted, "s1", 1, 2, "# B")]
    )
    assert state.working_memory == "# B"
    again = SyncObservationStarted(
        cycle_id="s2", from_seq=3, to_seq=3, message_tokens=10, trigger="threshold", started_at=AT
    )
    state = fold(state, [again, _outcome(SyncObservationCompleted, "s2", 3, 3, None)])
    assert (state.working_memory, state.working_memory_cycle_id) == ("# B", "s1")


def test_events_stored_before_working_memory_still_load_and_fold() -> None:
    stored = _outcome(SyncObservationCompleted, "s1", 1, 2, None).model_dump(mode="json")
    del stored["working_memory"]
    event = decode_event("SyncObservationCompleted", stored)
    assert isinstance(event, SyncObservationCompleted) and event.working_memory is None
    started = SyncObservationStarted(
        cycle_id="s1", from_seq=1, to_seq=2, message_tokens=20, trigger="threshold", started_at=AT
    )
    state = fold(_started(initial_state("s")), [started, event])
    assert state.working_memory is None and state.log
    # a row stored before the field existed loads with the default
    row = state.model_dump(mode="json")
    for key in ("working_memory", "working_memory_cycle_id", "working_memory_updated_at"):
        del row[key]
    assert RecordState.model_validate(row).working_memory is None


def test_context_carries_the_document_last() -> None:
    started = SyncObservationStarted(
        cycle_id="s1", from_seq=1, to_seq=2, message_tokens=20, trigger="threshold", started_at=AT
    )
    state = fold(
        _started(initial_state("s")), [started, _outcome(SyncObservationCompleted, "s1", 1, 2, "# Doc")]
    )
    window = build_context(state, parse_memory_config(MANAGED), parse_time(AT), thread_id="t")
    assert window.system[-1].endswith("<working-memory>\n# Doc\n</working-memory>")
    assert window.system.index("<observations>") < len(window.system) - 1
    # turned off, the stored document is not shown
    plain = build_context(state, parse_memory_config(None), parse_time(AT), thread_id="t")
    assert not any("<working-memory>" in s for s in plain.system)
