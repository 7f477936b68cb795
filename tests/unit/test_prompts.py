import json
from datetime import UTC, datetime

import pytest

from om_core.domain.messages import ImagePart, Message, TextPart
from om_core.domain.prompts import (
    OBSERVER_HISTORY_HEADING,
    PREVIOUS_OBSERVATIONS_HEADING,
    PRIOR_METADATA_HEADING,
    REFLECTOR_END_MARKER,
    REFLECTOR_OBSERVATIONS_HEADING,
    TRANSCRIPT_END_MARKER,
    ExtractorSpec,
    build_extractor_request,
    build_observer_request,
    build_reflector_request,
    extractor_response_format,
)
from om_core.domain.transcript import format_transcript

T0 = datetime(2023, 5, 15, 14, 30, tzinfo=UTC)
MOOD = ExtractorSpec("mood", "Mood", "How the user feels right now.")
PROFILE = ExtractorSpec(
    "profile",
    "Profile",
    "The user's profile.",
    schema={"type": "object", "properties": {"name": {"type": "string"}}},
)


def transcript(*texts: str) -> str:
    messages = [Message(f"m{i}", "user", (TextPart(t),), T0) for i, t in enumerate(texts)]
    return format_transcript(messages, gap_markers=False).text


def test_observer_request_is_one_system_and_one_user_message() -> None:
    request = build_observer_request(transcript("I have two cats"))
    assert [m["role"] for m in request] == ["system", "user"]
    assert isinstance(request[1]["content"], str)


def test_regression_22195_instructions_only_in_system_transcript_only_after_heading() -> None:
    history = transcript("I have two cats", "Please remember I prefer window seats")
    request = build_observer_request(history, previous_observations="* 🔴 (10:00) User lives in Lisbon")
    system, user = request[0]["content"], request[1]["content"]

    assert "memory" in system and "<observations>" in system and "✅" in system
    # no instruction text leaks into the data message
    assert "<observations>" not in user
    assert "(meaning" not in user and "priority" not in user.lower()

    before, after = user.split(OBSERVER_HISTORY_HEADING + "\n\n", 1)
    body, closing = after.rsplit("\n\n", 1)
    assert body == history
    assert closing.startswith(TRANSCRIPT_END_MARKER)
    assert "\n" not in closing
    assert history not in before


def test_user_message_sections_are_in_fixed_order() -> None:
    user = build_observer_request(
        transcript("hi"),
        previous_observations="* 🔴 (10:00) old fact",
        current_task="Plan the move",
        suggested_response="Ask about dates",
        thread_title="Lisbon move",
        thread_title_enabled=True,
        extractors=[MOOD, PROFILE],
        prior_values={"mood": "cheerful", "profile": {"name": "Ana"}},
    )[1]["content"]
    positions = [
        user.index(PREVIOUS_OBSERVATIONS_HEADING),
        user.index("* 🔴 (10:00) old fact"),
        user.index(PRIOR_METADATA_HEADING),
        user.index("- Current task: Plan the move"),
        user.index("- Suggested response: Ask about dates"),
        user.index("- Thread title: Lisbon move"),
        user.index("- mood (Mood): cheerful"),
        user.index(OBSERVER_HISTORY_HEADING),
        user.index(TRANSCRIPT_END_MARKER),
    ]
    assert positions == sorted(positions)
    assert user.startswith(PREVIOUS_OBSERVATIONS_HEADING)
    # schema-backed extractors are handled by their own follow-up call
    assert "profile" not in user


def test_empty_sections_say_none() -> None:
    user = build_observer_request(transcript("hi"), thread_title="ignored when disabled")[1]["content"]
    assert f"{PREVIOUS_OBSERVATIONS_HEADING}\n\n(none)" in user
    assert f"{PRIOR_METADATA_HEADING}\n\n(none)" in user
    assert "ignored when disabled" not in user


def test_truncated_previous_observations_are_flagged() -> None:
    user = build_observer_request(
        "x", previous_observations="[12 observations truncated here]\n* 🔴 new", previous_truncated=True
    )[1]["content"]
    assert "partly left out" in user


def test_optional_system_sections() -> None:
    plain = build_observer_request("x")[0]["content"]
    assert "<thread-title>" not in plain and "<mood>" not in plain
    assert "Do not add thread ids" in plain

    full = build_observer_request(
        "x",
        thread_title_enabled=True,
        extractors=[MOOD, PROFILE],
        multi_thread=True,
        instruction="Focus on pets.",
    )[0]["content"]
    assert "<thread-title>" in full
    assert "<mood>" in full and "How the user feels right now." in full
    assert "\nExtractor sections: mood\n" in full
    assert "<profile>" not in full
    assert '<thread id="' in full and "Do not add thread ids" not in full
    assert full.rstrip().endswith("Focus on pets.")


def test_output_format_matches_reference_shape() -> None:
    system = build_observer_request("x")[0]["content"]
    assert "Date: May 15, 2023" in system
    assert "* 🔴 (14:30)" in system and "  * -> " in system
    for tag in ("<observations>", "</observations>", "<current-task>", "<suggested-response>"):
        assert tag in system
    without_hints = build_observer_request("x", continuation_hints=False)[0]["content"]
    assert "<current-task>" not in without_hints


def test_attachments_are_forwarded_after_the_text() -> None:
    result = format_transcript(
        [Message("m", "user", (ImagePart(url="https://x/cat.png"),), T0)], gap_markers=False
    )
    content = build_observer_request(result.text, attachments=result.attachments)[1]["content"]
    assert isinstance(content, list)
    assert content[0]["type"] == "text" and "[Image #1: cat.png]" in content[0]["text"]
    assert content[1] == {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}


def test_reflector_request_layout() -> None:
    observations = (
        '<observation-group id="abc" range="m1:m9">\n'
        "Date: May 15, 2023\n* 🔴 (10:00) fact\n</observation-group>"
    )
    request = build_reflector_request(observations, level=3, target_tokens=1500)
    system, user = request[0]["content"], request[1]["content"]
    assert "ENTIRE memory" in system and "✅" in system
    assert user.split("\n") == [
        REFLECTOR_OBSERVATIONS_HEADING,
        "",
        "Date: May 15, 2023",
        "* 🔴 (10:00) fact",
        "",
        "Target size: at most 1500 tokens.",
        "Compression level: 3/4",
        user.split("\n")[7],
        REFLECTOR_END_MARKER,
    ]
    assert "observation-group" not in user


def test_reflector_levels_differ_and_are_bounded() -> None:
    guidance = {build_reflector_request("x", level=n, target_tokens=10)[1]["content"] for n in range(5)}
    assert len(guidance) == 5
    with pytest.raises(ValueError, match="compression level"):
        build_reflector_request("x", level=5, target_tokens=10)


def test_reflector_buffered_and_multi_thread_options() -> None:
    buffered = build_reflector_request(
        "x",
        level=1,
        target_tokens=10,
        buffered=True,
        multi_thread=True,
        extractors=[MOOD],
        prior_values={"mood": "calm"},
        manual_prompt="Keep the travel details.",
        instruction="Custom rule.",
    )[0]["content"]
    assert "<current-task>" not in buffered
    assert "Always include the <observations> section" in buffered
    assert "<thread id=" in buffered
    assert "- mood (Mood): calm" in buffered and "<mood>" in buffered
    assert "Keep the travel details." in buffered and buffered.rstrip().endswith("Custom rule.")
    normal = build_reflector_request("x", level=1, target_tokens=10)[0]["content"]
    assert "<current-task>" in normal and "<thread id=" not in normal


def test_extractor_request_and_response_format() -> None:
    request = build_extractor_request(
        PROFILE, observations="* 🔴 (10:00) User is Ana", source="observation", previous_value={"name": "An"}
    )
    system, user = request[0]["content"], request[1]["content"]
    assert json.dumps(PROFILE.schema, indent=2, sort_keys=True) in system
    assert "JSON" in system
    assert user.index("## Previous value") < user.index("## Observations")
    assert '{"name": "An"}' in user

    no_previous = ExtractorSpec("p", "P", "i", schema={"type": "string"}, include_previous=False)
    user2 = build_extractor_request(no_previous, observations="o", source="reflection", previous_value="old")[
        1
    ]
    assert "old" not in user2["content"]

    assert extractor_response_format(PROFILE)["json_schema"]["schema"] == PROFILE.schema
    with pytest.raises(ValueError):
        build_extractor_request(MOOD, observations="o", source="observation")
