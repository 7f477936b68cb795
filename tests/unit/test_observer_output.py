from hypothesis import given, settings
from hypothesis import strategies as st

from om_core.domain.observer_output import (
    detect_degenerate_repetition,
    parse_json_reply,
    parse_observer_output,
    thread_title_accepted,
    validate_compression,
    validate_extracted_value,
)
from om_core.domain.prompts import build_observer_request, instructions_of


def test_parses_all_sections() -> None:
    reply = """<observations>
Date: May 15, 2023
* 🔴 (14:30) User has two cats
* 🟡 (14:31) Assistant suggested a vet
</observations>

<current-task>
Primary: find a vet
</current-task>

<suggested-response>
Ask which district the user lives in
</suggested-response>

<thread-title>Cat care</thread-title>
"""
    output = parse_observer_output(reply, thread_title_enabled=True)
    assert output.observations == (
        "Date: May 15, 2023\n* 🔴 (14:30) User has two cats\n* 🟡 (14:31) Assistant suggested a vet"
    )
    assert output.current_task == "Primary: find a vet"
    assert output.suggested_response == "Ask which district the user lives in"
    assert output.thread_title == "Cat care"
    assert not output.degenerate
    assert parse_observer_output(reply).thread_title is None


def test_scenario_30_unclosed_block_keeps_list_items() -> None:
    output = parse_observer_output("<observations>\n* 🔴 User preference noted\n")
    assert "🔴 User preference noted" in output.observations
    no_block = parse_observer_output("Here are my notes:\n* 🔴 User preference noted\nThanks!")
    assert no_block.observations == "* 🔴 User preference noted"


def test_scenario_30_inline_closing_tag_does_not_truncate() -> None:
    reply = (
        "<observations>\n* 🟡 (10:00) User asked why their parser stops at </observations> tags\n"
        "* 🔴 (10:05) User uses Python 3.11\n</observations>"
    )
    output = parse_observer_output(reply)
    assert "stops at </observations> tags" in output.observations
    assert "Python 3.11" in output.observations


def test_scenario_30_xml_in_code_blocks_is_kept() -> None:
    reply = (
        "<observations>\n* 🟡 (10:00) User shared config:\n"
        "```xml\n<current-task>\nnot a task\n</current-task>\n"
        "</observations>\n```\n* 🔴 (10:01) User wants it validated\n</observations>"
    )
    output = parse_observer_output(reply)
    assert "<current-task>\nnot a task\n</current-task>\n</observations>" in output.observations
    assert "User wants it validated" in output.observations
    assert output.current_task is None


def test_scenario_30_reflector_current_task_not_embedded_in_observations() -> None:
    reply = (
        "<observations>\n* 🔴 (10:00) fact\n"
        "<current-task>\nPrimary: old task\n</current-task>\n</observations>\n"
        "<current-task>Primary: also old</current-task>"
    )
    output = parse_observer_output(reply, reflector=True)
    assert output.observations == "* 🔴 (10:00) fact"
    assert output.current_task is None
    observer = parse_observer_output(reply)
    assert observer.current_task == "Primary: also old"
    assert "old task" not in observer.observations


def test_multiple_blocks_joined_and_tags_must_start_lines() -> None:
    reply = (
        "I will write <observations> now.\n<observations>\n* 🔴 a\n</observations>\ntext\n"
        "<observations>\n* 🔴 b\n</observations>"
    )
    assert parse_observer_output(reply).observations == "* 🔴 a\n* 🔴 b"


def test_whole_reply_in_a_code_fence() -> None:
    reply = "```xml\n<observations>\n* 🔴 (09:00) fact\n</observations>\n```"
    assert parse_observer_output(reply).observations == "* 🔴 (09:00) fact"


def test_long_lines_truncated() -> None:
    long_line = "* 🔴 Codes " + " ".join(str(n * n) for n in range(3_000))
    output = parse_observer_output(f"<observations>\n{long_line}\n</observations>")
    line = output.observations.split("\n")[0]
    assert len(line) == 10_000 + len("… [truncated]")
    assert line.endswith("… [truncated]")


def test_thread_tags_stripped_in_single_thread_mode() -> None:
    reply = '<observations>\n<thread id="t_1">\n* 🔴 (10:00) fact\n</thread>\n</observations>'
    assert parse_observer_output(reply).observations == "* 🔴 (10:00) fact"


def test_multi_thread_outputs() -> None:
    reply = """<observations>
<thread id="t_a">
Date: May 15, 2023
* 🔴 (10:00) User plans a trip
<current-task>
Primary: trip
</current-task>
<thread-title>Trip planning</thread-title>
</thread>
<thread id="t_b">
* 🔴 (11:00) User fixed the bug
<suggested-response>Wait for the user</suggested-response>
</thread>
</observations>"""
    output = parse_observer_output(reply, multi_thread=True, thread_title_enabled=True)
    assert [t.thread_id for t in output.threads] == ["t_a", "t_b"]
    a, b = output.threads
    assert a.observations == "Date: May 15, 2023\n* 🔴 (10:00) User plans a trip"
    assert a.current_task == "Primary: trip" and a.thread_title == "Trip planning"
    assert b.suggested_response == "Wait for the user" and b.current_task is None
    assert "<current-task>" not in output.observations
    assert '<thread id="t_b">' in output.observations
    assert output.current_task is None


def test_multi_thread_without_wrapper() -> None:
    reply = '<thread id="t_a">\n* 🔴 a\n<current-task>x</current-task>\n</thread>'
    output = parse_observer_output(reply, multi_thread=True)
    assert output.threads[0].observations == "* 🔴 a"
    assert output.threads[0].current_task == "x"


def test_inline_extractor_sections_and_json() -> None:
    reply = "<observations>\n* 🔴 a\n</observations>\n<mood>\nhappy\n</mood>\n<mood>calm</mood>"
    output = parse_observer_output(reply, inline_extractors=["mood", "goal"])
    assert output.extracted == {"mood": "calm"}
    assert output.observations == "* 🔴 a"

    json_reply = (
        "<observations>\n* 🔴 a\n</observations>\n<extracted-values>\n"
        '{"mood": "tired", "goal": 3, "current-task": "Primary: rest"}\n</extracted-values>'
    )
    output = parse_observer_output(json_reply, inline_extractors=["mood", "goal"])
    assert output.extracted == {"mood": "tired"}
    assert "goal" in output.extraction_failures
    assert output.current_task == "Primary: rest"

    broken = parse_observer_output(
        "<observations>\n* a\n</observations>\n<extracted-values>{nope</extracted-values>\n<mood>ok</mood>",
        inline_extractors=["mood", "goal"],
    )
    assert broken.extracted == {"mood": "ok"}
    assert set(broken.extraction_failures) == {"goal"}


def test_anchor_ids_removed() -> None:
    assert (
        parse_observer_output("<observations>\n* 🔴 [O12] a [O3-N4] b\n</observations>").observations
        == "* 🔴 a b"
    )


def test_degenerate_reply_yields_nothing() -> None:
    looped = (
        "<observations>\n"
        + ("* 🟡 (10:00) The assistant keeps repeating this very long sentence. " * 2)
        + "\n"
    )
    output = parse_observer_output(looped * 300)
    assert output.degenerate and output.observations == ""


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                *"ab \n*-<>/`\"'=:",
                "<observations>",
                "</observations>",
                "<thread id=",
                "</thread>",
                "<current-task>",
                "<mood>",
                "<extracted-values>",
                "```",
                "🔴",
            ]
        ),
        max_size=120,
    ).map("".join),
    st.booleans(),
    st.booleans(),
)
def test_parser_never_raises(text: str, multi_thread: bool, reflector: bool) -> None:
    parse_observer_output(
        text,
        inline_extractors=["mood"],
        thread_title_enabled=True,
        multi_thread=multi_thread,
        reflector=reflector,
    )


@given(st.text(max_size=3_000))
def test_parser_never_raises_on_arbitrary_text(text: str) -> None:
    parse_observer_output(text, inline_extractors=["mood"], multi_thread=True)


# Degeneracy (scenario 29)


def test_faithful_summary_of_identical_short_tool_lines_is_not_degenerate() -> None:
    text = "Date: May 15, 2023\n" + "\n".join(
        "* 🟡 (10:00) Called read_file on src/app.ts" for _ in range(200)
    )
    assert len(text) > 2_000
    assert not detect_degenerate_repetition(text)


def test_repeated_five_line_block_is_degenerate() -> None:
    block = "\n".join(
        [
            "* 🟡 (10:00) User asked about the deployment",
            "* 🟡 (10:01) Assistant checked the logs",
            "* 🟡 (10:02) Logs show a timeout",
            "* 🟡 (10:03) Assistant restarted the pod",
            "* 🟡 (10:04) Pod is healthy again",
        ]
    )
    assert detect_degenerate_repetition("\n".join([block] * 20))


def test_repeated_long_line_is_degenerate() -> None:
    line = "* 🟡 (10:00) The user asked about the deployment pipeline and the assistant explained it again"
    assert len(line) > 80
    assert detect_degenerate_repetition("\n".join([line] * 300))


def test_other_degeneracy_rules() -> None:
    assert not detect_degenerate_repetition("short " * 10)
    assert detect_degenerate_repetition("x" * 50_001)
    assert detect_degenerate_repetition("* 🔴 " + "and then the user said " * 200)
    varied = "\n".join(
        f"* 🔴 (10:{i % 60:02d}) Observation number {i} about topic {i * 7}" for i in range(200)
    )
    assert not detect_degenerate_repetition(varied)
    scattered = [
        f"* 🟡 (10:00) A long repeated observation line that keeps coming back, variant {i % 3} ok"
        for i in range(60)
    ]
    interleaved = "\n".join(f"{line}\n* 🔴 short {i}" for i, line in enumerate(scattered))
    assert detect_degenerate_repetition(interleaved)


def test_validate_compression_scenario_28() -> None:
    assert validate_compression(5_000, 10_000)
    assert not validate_compression(10_000, 10_000)
    assert validate_compression(9_500, 10_000)
    assert not validate_compression(10_500, 10_000)


def test_thread_title_acceptance() -> None:
    assert thread_title_accepted("Trip planning", "Cats", pinned=False)
    assert thread_title_accepted("  Trip  ", None, pinned=False)
    assert not thread_title_accepted(" ab ", None, pinned=False)
    assert not thread_title_accepted("Cats ", "Cats", pinned=False)
    assert not thread_title_accepted("Trip planning", "Cats", pinned=True)
    assert not thread_title_accepted(None, "Cats", pinned=False)


def test_validate_extracted_value() -> None:
    schema = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
    }
    assert validate_extracted_value({"name": "Ana", "tags": ["a"]}, schema) == []
    errors = validate_extracted_value({"tags": ["a", "z"]}, schema)
    assert any(error.startswith("$:") and "name" in error for error in errors)
    assert any(error.startswith("$.tags[1]:") for error in errors)
    assert validate_extracted_value(1, {"type": "bogus"})[0].startswith("invalid schema")


def test_parse_json_reply() -> None:
    assert parse_json_reply('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_json_reply('Sure! {"a": [1, 2]} hope that helps') == {"a": [1, 2]}
    try:
        parse_json_reply("no json")
    except ValueError as error:
        assert "not valid JSON" in str(error)
    else:
        raise AssertionError("expected ValueError")


def test_unclosed_block_followed_by_closed_block() -> None:
    reply = "<observations>\n* 🔴 a\n<observations>\n* 🔴 b\n</observations>\n<current-task>t</current-task>"
    output = parse_observer_output(reply)
    assert output.observations == "* 🔴 a\n* 🔴 b"
    assert output.current_task == "t"


def test_leading_and_trailing_code_blocks_are_not_taken_for_a_wrapper() -> None:
    reply = "```xml\n<a/>\n```\n<observations>\n* 🔴 (10:00) fact\n</observations>\n```\nfoo\n```"
    assert parse_observer_output(reply).observations == "* 🔴 (10:00) fact"


def test_lines_copied_from_the_prompt_are_not_observations() -> None:
    # what SmolLM2-135M answered: the instructions' own list, and their example, as "observations"
    request = build_observer_request("User: I moved to Porto last week.")
    instructions = instructions_of(request)
    example = next(line for line in instructions.split("\n") if "Lisbon in two weeks" in line)
    copied = example.lstrip("* ").replace("🔴 ", "")
    reply = f"- {copied}\n* 🔴 (09:00) User moved to Porto last week"
    output = parse_observer_output(reply, instructions=instructions)
    assert output.observations == "* 🔴 (09:00) User moved to Porto last week"
    only_copies = parse_observer_output(
        f"<observations>\n{example}\n</observations>", instructions=instructions
    )
    assert only_copies.observations == ""
    # short lines may be said in both, and without the instructions nothing is judged a copy
    assert parse_observer_output("* 🔴 User has a dog", instructions="* 🔴 User has a dog").observations
    assert parse_observer_output(reply).observations.count("\n") == 1


def test_a_reflector_reply_without_any_observation_is_no_reflection() -> None:
    # a chat reply would otherwise replace the whole log
    assert (
        parse_observer_output("I'm ready to help. What's the next task?", reflector=True).observations == ""
    )
    # the condensed log written without tags or bullets is still a reflection
    plain = "Date: May 15, 2023\n🔴 (14:30) User has two cats\n🟡 User likes tea"
    assert parse_observer_output(plain, reflector=True).observations == plain


def test_an_item_that_says_nothing_is_no_observation() -> None:
    reply = "- (none)\n* 🔴\n- 🟡 (10:00)\n* 🔴 (10:01) User has two cats\n1. N/A\n- Nothing new."
    assert parse_observer_output(reply).observations == "* 🔴 (10:01) User has two cats"
    assert parse_observer_output("<observations>\n* 🔴 (10:00)\n- none\n</observations>").observations == ""
